"""A git server over SSH for tests, as a forge with deploy keys is: asyncssh on 127.0.0.1 accepting one
client key, running `git-upload-pack` / `git-receive-pack` on the bare repositories under `root` for
ssh://git@127.0.0.1:PORT/NAME.git. Its host key goes in a known_hosts file for the client side."""

from __future__ import annotations

import asyncio
import pathlib
import shlex
import threading

import asyncssh


class GitSshServer:
    def __init__(self, root: pathlib.Path, client_public_key: str) -> None:
        self.root = root
        self.authorized = asyncssh.import_authorized_keys(client_public_key)
        self.host_key = asyncssh.generate_private_key("ssh-ed25519")
        self.port = 0
        self.commands: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> GitSshServer:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _close(self) -> None:
        self._server.close()
        await self._server.wait_closed()
        await asyncio.sleep(0.1)  # the sessions' tasks finish

    async def _listen(self) -> asyncssh.SSHAcceptor:
        return await asyncssh.listen(
            "127.0.0.1",
            0,
            server_host_keys=[self.host_key],
            authorized_client_keys=self.authorized,
            process_factory=self._git,
            encoding=None,
            allow_scp=False,
        )

    async def _git(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        self.commands.append(process.command or "")
        words = shlex.split(process.command or "")
        if len(words) != 2 or words[0] not in ("git-upload-pack", "git-receive-pack"):
            process.exit(1)
            return
        repo = self.root / words[1].lstrip("/")
        git = await asyncio.create_subprocess_exec(
            words[0], str(repo), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert git.stdin is not None and git.stdout is not None
        feeding = asyncio.create_task(_feed(process.stdin, git.stdin))
        while data := await git.stdout.read(65536):
            process.stdout.write(data)
        feeding.cancel()
        process.exit(await git.wait())

    def url(self, name: str) -> str:
        return f"ssh://git@127.0.0.1:{self.port}/{name}.git"

    def known_hosts(self) -> str:
        """The line a client's ~/.ssh/known_hosts needs to trust this server."""
        key = self.host_key.export_public_key("openssh").decode().strip()
        return f"[127.0.0.1]:{self.port} {key}\n"


async def _feed(source: asyncssh.SSHReader[bytes], sink: asyncio.StreamWriter) -> None:
    """The client's requests to git, until the client or git is done."""
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
        sink.close()
    except (BrokenPipeError, ConnectionResetError):
        pass

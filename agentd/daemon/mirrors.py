"""agentd's refresh of its repository mirrors between runs (drover/core/mirror.py), so that the next
run of a repository fetches little or nothing from the forge before it clones.

Each run that clones through a mirror is noted with its repository's URL and git credential. Every
`mirror_refresh_seconds`, the mirror of each repository a run used in the last day is fetched by a
child process (`python -m drover.core.mirror`, the credential on its stdin). The credentials live in
this process's memory only, as the secrets of runs it may have to restart do (runs.py); a repository
no run used for a day is forgotten with its credential, and an agentd restart forgets them all."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import sys
import time

from agentd.daemon.config import AgentConfig
from agentd.run.spec import GIT_SSH_KEY, GIT_TOKEN, RunSpec
from drover.core.workspace import redact_url

log = logging.getLogger("agentd.mirrors")
KEEP_SECONDS = 86400.0
"""A repository no run used for this long is no longer refreshed (and its credential is dropped)."""
FETCH_TIMEOUT_SECONDS = 600.0


@dataclasses.dataclass
class Used:
    url: str
    secret: str = dataclasses.field(repr=False)
    at: float


def due(used: dict[str, Used], now: float, keep: float = KEEP_SECONDS) -> list[Used]:
    """The repositories to refresh at `now`; those unused for `keep` seconds are dropped from `used`."""
    for url in [url for url, u in used.items() if now - u.at > keep]:
        del used[url]
    return list(used.values())


class MirrorRefresh:
    def __init__(self, config: AgentConfig) -> None:
        self.root = config.mirrors
        self.interval = config.mirror_refresh_seconds if config.repository_mirrors else 0.0
        self.used: dict[str, Used] = {}
        self.refreshes = 0
        """Fetches done between runs (whether or not they succeeded)."""

    def note(self, spec: RunSpec, secret_env: dict[str, str]) -> None:
        """A run of `spec` clones through its repository's mirror: keep that mirror fresh from now on."""
        if self.interval > 0 and spec.repo and spec.branch:  # a run without a branch clones directly
            secret = secret_env.get(GIT_TOKEN) or secret_env.get(GIT_SSH_KEY, "")
            self.used[spec.repo] = Used(spec.repo, secret, time.monotonic())

    async def run_forever(self) -> None:
        if self.interval <= 0:
            return
        while True:
            await asyncio.sleep(self.interval)
            for used in due(self.used, time.monotonic()):
                await self.refresh(used)

    async def refresh(self, used: Used) -> None:
        from drover.core import mirror

        told = {"mirror": str(mirror.path_for(self.root, used.url)), "url": used.url, "secret": used.secret}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "drover.core.mirror",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
        self.refreshes += 1
        try:
            _, err = await asyncio.wait_for(process.communicate(json.dumps(told).encode()), FETCH_TIMEOUT_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            log.warning("mirror of %s: no answer in %.0f s", redact_url(used.url), FETCH_TIMEOUT_SECONDS)
            return
        if process.returncode:  # the message names no credential (drover/core/mirror.py)
            log.warning("mirror of %s: %s", redact_url(used.url), err.decode(errors="replace").strip()[-500:])

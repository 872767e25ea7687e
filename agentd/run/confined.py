"""The processes of one command started in the sandbox, and how to stop all of them.

bubblewrap forwards no signals, and the command runs in its own session inside its own PID
namespace, so a signal to bwrap's process group reaches none of it. Just before it execs the
command, the launcher (agentd/run/launcher.c, or rlimits.py) sends its namespace's name ("pid:[N]") and a file
descriptor of the namespace itself over the ready channel: every process whose /proc/PID/ns/pid
is that one belongs to the run, whatever it did (setsid, double forks), and the descriptor keeps
the namespace's number from being given to another run's namespace while this one is signalled.
The namespace's init (bwrap's child) ends everything left when the command exits; a SIGKILL to
it, or to bwrap itself (--die-with-parent), ends everything at once. Without a sandbox (agentd
--unsafe-no-sandbox) there is only the command's process group.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import socket
from collections.abc import Callable


def ready_pipe() -> tuple[int, int]:
    """(agentd's end, the launcher's end) of the ready channel, a Unix socket pair (it carries the
    namespace's descriptor). The launcher's end goes to the command (pass_fds); agentd's never blocks."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    ours.setblocking(False)
    return ours.detach(), theirs.detach()


def namespace_members(namespace: str) -> list[tuple[int, bool]]:
    """(pid, is the namespace's init) for every process in `namespace`, as seen from outside it."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "ns" / "pid") != namespace:
                continue
            status = (entry / "status").read_text()
        except OSError:  # gone meanwhile
            continue
        nspid = next((line.split()[-1] for line in status.splitlines() if line.startswith("NSpid:")), "")
        found.append((int(entry.name), nspid == "1"))
    return found


class Confined:
    """A started command: `leader` is bwrap's pid (the launcher's when unsandboxed), `ready` agentd's
    end of the ready channel (None when the command has no namespace of its own), `reaped` answers
    whether the leader was waited for: its pid may be another process's by then, so a sandboxed
    command's group is no longer signalled (its namespace is; unsandboxed, the group is all there is)."""

    def __init__(self, leader: int, ready: int | None, reaped: Callable[[], bool] = lambda: False) -> None:
        self.leader = leader
        self.reaped = reaped
        self.sandboxed = ready is not None
        self.namespace = ""
        self._channel = socket.socket(fileno=ready) if ready is not None else None
        self._pinned: int | None = None  # the namespace's descriptor: its number stays this run's
        self._pending = b""

    @property
    def started(self) -> bool:
        """The sandbox came up and the launcher reached the command (always true without a sandbox)."""
        self.poll_ready()
        return not self.sandboxed or bool(self.namespace)

    def poll_ready(self) -> None:
        """Take what the launcher reported, without waiting."""
        while self._channel is not None:
            try:
                data, fds, _, _ = socket.recv_fds(self._channel, 256, 4)
            except (BlockingIOError, InterruptedError):
                return
            for fd in fds:
                if self._pinned is None:
                    self._pinned = fd
                else:
                    os.close(fd)
            if data:
                self._pending += data
                if b"\n" not in self._pending:
                    continue
                self.namespace = self._pending.split(b"\n", 1)[0].decode(errors="replace")
            # else the channel closed without a word: the launcher never ran, the sandbox did not come up
            self._channel.close()
            self._channel = None

    def terminate(self) -> None:
        """SIGTERM to every process of the command (a graceful stop). The namespace's init is spared:
        it ends the namespace by itself once the command is gone."""
        self.poll_ready()
        if self._known():
            for pid, init in namespace_members(self.namespace):
                if not init:
                    _kill(pid, signal.SIGTERM)
        elif not self._leader_gone():
            _killpg(self.leader, signal.SIGTERM)  # bwrap itself, before the command started

    def kill(self) -> None:
        """SIGKILL to everything of the command."""
        self.poll_ready()
        if self._known():
            for pid, _ in namespace_members(self.namespace):
                _kill(pid, signal.SIGKILL)
        if not self._leader_gone():
            _killpg(self.leader, signal.SIGKILL)

    def alive(self) -> bool:
        """Whether any process of the command is left."""
        if self._known():
            return bool(namespace_members(self.namespace))
        if self._leader_gone():
            return False
        try:
            os.killpg(self.leader, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self._pinned is not None:
            os.close(self._pinned)
            self._pinned = None

    def _leader_gone(self) -> bool:
        return self.sandboxed and self.reaped()

    def _known(self) -> bool:
        """The namespace is named and pinned: signalling its members cannot reach another run."""
        if self._pinned is None or not self.namespace.startswith("pid:["):
            return False
        return f"pid:[{os.fstat(self._pinned).st_ino}]" == self.namespace


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)

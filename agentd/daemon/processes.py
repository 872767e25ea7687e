"""The supervisor processes of runs: each started detached from agentd (its own session), with its secrets
on stdin, and its pid and start time written beside its run so a restarted agentd can tell whether it is
still the same live process."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from agentd import run_dir as run_dir_files
from agentd.daemon.prefork import ANSWER_TIMEOUT as ANSWER_SECONDS
from agentd.daemon.prefork import FORK, LOADED, PRELOAD, READY, start_time

log = logging.getLogger("agentd.processes")
RESTART_SECONDS = 30.0
SUPERVISOR = "agentd.run.supervisor"
"""Every run's supervisor: `python -m agentd.run.supervisor RUN_DIR`, whatever its driver."""
# What the template imports at once: the supervisor and the command driver, and asyncio.to_thread's
# executor (else every forked supervisor imported it, ~0.5 ms). The harness's or a runtime's driver
# (the anthropic SDK: ~3 s of CPU) is imported when this agent first runs one.
BASE_MODULES = (SUPERVISOR, "agentd.drivers.command", "drover.core.gitspace", "concurrent.futures.thread")


def spawn(run_dir: pathlib.Path, secrets: dict[str, Any]) -> subprocess.Popen[bytes]:
    """`python -m agentd.run.supervisor RUN_DIR`, detached, its secrets on stdin (they never touch the disk)."""
    with open(run_dir / run_dir_files.SUPERVISOR_LOG, "ab") as errlog:
        process = subprocess.Popen(
            [sys.executable, "-m", SUPERVISOR, str(run_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
    assert process.stdin is not None
    process.stdin.write(json.dumps(secrets).encode())
    process.stdin.close()
    try:
        (run_dir / run_dir_files.SUPERVISOR_PID).write_text(f"{process.pid} {start_time(process.pid)}")
    except OSError:
        # Without its pid on disk a restarted agentd could not tell the supervisor is alive: stop it
        # now, before it starts anything (the supervisor leads its own process group).
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    return process


def alive(run_dir: pathlib.Path) -> bool:
    """Whether the supervisor whose pid file is in `run_dir` is still that same live process."""
    try:
        pid_text, _, started = (run_dir / run_dir_files.SUPERVISOR_PID).read_text().partition(" ")
    except OSError:
        return False
    return bool(started) and start_time(int(pid_text)) == started


class Template:
    """agentd's end of its supervisor template (agentd/daemon/prefork.py): `fork` starts a run's supervisor
    from it in a few milliseconds. `fork` answers None, and the caller spawns the supervisor instead,
    while the template is not ready: still starting, importing a driver's supervisor the first time
    agentd runs one (asked here, then), or gone (then started again)."""

    def __init__(self, spool: pathlib.Path, modules: tuple[str, ...] = BASE_MODULES) -> None:
        self.spool, self.modules = spool, modules
        self.process: subprocess.Popen[bytes] | None = None
        self.control: socket.socket | None = None
        self.ready = False
        self.loaded: set[str] = set()
        self.preloading = ""
        self.started = 0.0

    def start(self) -> None:
        self.close()
        self.started = time.monotonic()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "agentd.daemon.prefork", "supervisor", str(self.spool), *self.modules],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                close_fds=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
            )
        finally:
            theirs.close()
        ours.setblocking(False)
        self.control, self.ready, self.loaded, self.preloading = ours, False, set(), ""
        log.info("supervisor template started (pid %d)", self.process.pid)

    def fork(self, run_dir: pathlib.Path, module: str, secrets: dict[str, Any]) -> int | None:
        """The pid of a supervisor forked for the run whose driver is `module`, None when the template
        cannot take it now.
        OSError when the supervisor could not set itself up (its errno: ENOSPC for a full spool)."""
        if not self._usable(module):
            return None
        assert self.control is not None and self.process is not None
        ours, theirs = socket.socketpair()
        with ours:
            try:
                with theirs:
                    socket.send_fds(self.control, [FORK], [theirs.fileno()])
            except OSError:  # the template is gone: spawn this one, start it again for the next
                self.process.kill()
                return None
            ours.settimeout(ANSWER_SECONDS)
            ours.sendall(json.dumps({"module": SUPERVISOR, "run_dir": str(run_dir), "secrets": secrets}).encode())
            ours.shutdown(socket.SHUT_WR)
            answer = ours.makefile("rb").readline().decode(errors="replace").split(" ", 2)
        if answer[0] == "ok":
            log.info("run %s: supervisor forked from the template", run_dir.name)
            return int(answer[1])
        if answer[0] == "error" and len(answer) == 3:
            raise OSError(int(answer[1]), answer[2].strip())
        if answer == [""]:  # the template or the child died before a word: nothing of the run started
            log.warning("the supervisor template did not fork the run's supervisor: it is spawned")
            return None
        raise OSError(errno.EIO, f"the supervisor template's fork answered {' '.join(answer)!r}")

    def _usable(self, module: str) -> bool:
        """Ready for a fork of `module` now; asks for its import when it is not loaded yet."""
        if self.process is None or self.control is None:
            return False
        self._read_news()  # what it said before it died counts too: a ready template is started again
        if self.process.poll() is not None:
            if self.ready or time.monotonic() - self.started > RESTART_SECONDS:  # no loop if it cannot start
                log.warning(
                    "the supervisor template exited (%s): this run's supervisor is spawned, the template started again",
                    self.process.returncode,
                )
                self.start()
            return False
        if not self.ready or self.preloading:
            return False  # a fork now would wait for the imports
        if module not in self.loaded:
            with contextlib.suppress(OSError):  # a template that is gone is seen at the next fork
                self.control.send(PRELOAD + module.encode())
                self.preloading = module
            return False
        return True

    def _read_news(self) -> None:
        assert self.control is not None
        while True:
            try:
                news = self.control.recv(16)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if news == READY:
                self.ready, self.loaded = True, set(self.modules)
            elif news == LOADED:
                self.loaded.add(self.preloading)
                self.preloading = ""
            else:
                return  # b"": it is gone; the next fork sees it exited

    def close(self) -> None:
        """Stop the template (the supervisors it forked go on)."""
        if self.control is not None:
            self.control.close()
            self.control = None
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(2)  # it exits when its socket closes
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.process = None

"""A command of a run (the Task's own, or one of the project's setup commands) run in the run's sandbox
with exactly its environment, followed until it ends, is cancelled or times out; its output copied,
stream-tagged and in arrival order, into the run's output."""

from __future__ import annotations

import codecs
import dataclasses
import os
import pathlib
import selectors
import subprocess
import time
from collections.abc import Callable

from agentd.errors import RunEnded
from agentd.run.confined import Confined, ready_pipe
from agentd.run.output import Output
from agentd.run.sandbox import Bind, Sandbox

CHUNK = 64 * 1024


@dataclasses.dataclass(frozen=True)
class Invocation:
    """One command of a run: its argv, where it runs, exactly its environment, what it may change and
    see (agentd/run/sandbox.py), its timeout (0: none) and the prefix of its output lines ("": none)."""

    argv: list[str]
    cwd: pathlib.Path
    env: dict[str, str]
    writable: list[pathlib.Path]
    binds: list[Bind]
    timeout: float = 0.0
    prefix: str = ""


class Command:
    """A command's process in its sandbox, followed until it ends (or is stopped); its output copied,
    stream-tagged and in arrival order, into the run's output."""

    def __init__(self, output: Output, cancelled: Callable[[], bool], kill_grace: float, what: Invocation) -> None:
        self.output = output
        self.cancelled = cancelled
        self.kill_grace = kill_grace
        self.what = what
        self.stderr_tail = ""  # bwrap says why it failed on the command's stderr
        self._line_start = {"stdout": True, "stderr": True}

    def follow(self, sandbox: Sandbox) -> RunEnded:
        child, processes = self._start(sandbox)
        return self._wait(child, processes)

    def _start(self, sandbox: Sandbox) -> tuple[subprocess.Popen[bytes], Confined]:
        """Start the command in its sandbox with exactly its environment."""
        what = self.what
        argv = list(what.argv)
        read, write = ready_pipe() if sandbox.isolated else (None, None)
        try:
            # bwrap runs as root before any namespace exists: it gets a fixed environment in "/", and
            # the Task's env reaches the command alone (agentd/run/launch.py)
            with sandbox.wrap(
                argv, what.cwd, what.env, writable=what.writable, ready_fd=write, binds=what.binds
            ) as launch:
                child = subprocess.Popen(
                    launch.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    **launch.spawn_kwargs(),
                )
        except (OSError, ValueError) as err:
            if read is not None:
                os.close(read)
            why = err.strerror if isinstance(err, OSError) else str(err)
            said = f"cannot start {argv[0]}: {why}"
            raise RunEnded("failed", said, code="start_failed", exit_code=-1, line=said) from None
        finally:
            if write is not None:
                os.close(write)  # the launcher holds it now
        return child, Confined(child.pid, read, lambda: child.returncode is not None)

    def _wait(self, child: subprocess.Popen[bytes], processes: Confined) -> RunEnded:
        """Copy output until the command ends (or is stopped), then say how it ended."""
        timeout = self.what.timeout
        stopped = self._pump(child, processes, timeout)
        code = child.wait()
        processes.kill()  # nothing of the run outlives it (in the sandbox, its init saw to that)
        started = processes.started
        processes.close()
        if not started and not stopped:
            error = (self.stderr_tail.strip().splitlines()[-1:] or [f"bubblewrap exited with {code}"])[0]
            line = f"sandbox: the command did not start: {error}"
            return RunEnded("failed", error, code="sandbox_failed", exit_code=code, line=line)
        if stopped == "timeout":
            return RunEnded("failed", f"timed out after {timeout:.0f} s", code="timeout", exit_code=code)
        if stopped == "cancelled":
            return RunEnded("cancelled", code="cancelled", exit_code=code)
        if code == 0:
            return RunEnded("succeeded", code="", exit_code=0)
        return RunEnded("failed", f"exited with {code}", code="exit_code", exit_code=code)

    def _pump(self, child: subprocess.Popen[bytes], processes: Confined, timeout: float) -> str:
        """Copy output until both pipes close; stop the command's processes on cancel or timeout.
        Answers "timeout", "cancelled" or "" (the command ended by itself)."""
        assert child.stdout is not None and child.stderr is not None
        sel = selectors.DefaultSelector()
        decoders = {}
        for name, pipe in (("stdout", child.stdout), ("stderr", child.stderr)):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ, name)
            decoders[name] = codecs.getincrementaldecoder("utf-8")(errors="replace")
        deadline = time.monotonic() + timeout if timeout > 0 else None
        stopping_since: float | None = None
        stopped = ""
        open_pipes = 2
        while open_pipes:
            now = time.monotonic()
            cancelled = stopping_since is None and self.cancelled()
            if stopping_since is None and (cancelled or (deadline is not None and now >= deadline)):
                stopped = "cancelled" if cancelled else "timeout"
                self.output.write(
                    "system",
                    "cancelled: stopping the process group\n"
                    if cancelled
                    else f"timed out after {timeout:.0f} s: stopping the process group\n",
                )
                processes.terminate()
                stopping_since = now
            if stopping_since is not None and now - stopping_since >= self.kill_grace:
                processes.kill()
                stopping_since = float("inf")
            for key, _ in sel.select(timeout=0.1):
                ready = key.fileobj
                assert not isinstance(ready, int)
                try:
                    data = os.read(ready.fileno(), CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(ready)
                    open_pipes -= 1
                    self._write(key.data, decoders[key.data].decode(b"", final=True))
                    continue
                text = decoders[key.data].decode(data)
                if key.data == "stderr":
                    self.stderr_tail = (self.stderr_tail + text)[-2000:]
                self._write(key.data, text)
            # The leader exited; stragglers that hold the pipes are stopped too (in the sandbox its init
            # has taken them already).
            if child.poll() is not None and stopping_since is None and processes.alive():
                processes.terminate()
                stopping_since = time.monotonic()
        return stopped

    def _write(self, stream: str, text: str) -> None:
        """The command's output, each line after the invocation's prefix (setup's is `[setup] `)."""
        prefix = self.what.prefix
        if prefix and text:
            lines = text.split("\n")
            marked = [
                ("" if i == 0 and not self._line_start[stream] else prefix) + line for i, line in enumerate(lines)
            ]
            if not lines[-1]:
                marked[-1] = ""  # a text ending with its newline: the next line starts fresh
            self._line_start[stream] = not lines[-1]
            text = "\n".join(marked)
        self.output.write(stream, text)

"""The supervisor template: one process per agentd that has imported every supervisor's code and forks
a supervisor per run, so a run starts in milliseconds instead of an interpreter start and a second of
imports (`agentd.drivers.harness.driver` imports the anthropic SDK).

    python -m agentd.daemon.prefork supervisor SPOOL MODULE [MODULE...]

agentd starts it with one end of a SOCK_SEQPACKET socket pair on stdin. The template imports the
MODULEs, says it is ready (READY), then serves messages in order: PRELOAD + a module name imports
that module too (a driver, the first time agentd runs one; LOADED answers); FORK comes
with a descriptor, one end of a socket pair agentd made for one run. For that the template forks; it
reads nothing of the request itself, so no run's secrets are ever in its memory. The child (the run's
supervisor):

1. leaves the template's session (`setsid`): like a supervisor agentd starts itself, it outlives
   agentd and the template, and its process group is the run's;
2. reads the request from the descriptor: `{"module", "run_dir", "secrets"}`, JSON, up to EOF;
3. points stdin and stdout at /dev/null and stderr at RUN_DIR/supervisor.log;
4. writes RUN_DIR/supervisor.pid (pid and start time, as agentd/daemon/processes.py does), then answers
   `ok PID` on the descriptor, or `error ERRNO MESSAGE` if any step failed (and exits);
5. runs the module's `serve(run_dir, secrets)` (agentd.run.supervisor's, whatever the driver), exactly
   what its `python -m` entry point runs.

The template reaps its children when SIGCHLD says they exited; a child puts SIGCHLD back before it
does anything. It exits when agentd's end of its socket closes; the supervisors it forked go on.
Single-threaded throughout: forking a process with threads is not safe.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import importlib
import json
import os
import pathlib
import signal
import socket
import sys
import traceback
from typing import Any

from agentd import run_dir as run_dir_files

READY, LOADED = b"R", b"L"  # template -> agentd: the first MODULEs are imported; a PRELOAD is done
FORK, PRELOAD = b"F", b"P"  # agentd -> template: fork (with a descriptor); import a module (its name follows)
ANSWER_TIMEOUT = 10.0


def start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot ("" when it is gone or a zombie): with the pid,
    it names one process, even after the pid is reused."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rindex(")") + 2 :].split()
    return "" if fields[0] == "Z" else fields[19]


def serve_requests(control: socket.socket) -> None:
    """Fork a supervisor for each descriptor agentd sends, import what it asks, until agentd goes away."""
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 1024, 1)
        except InterruptedError:
            continue
        except OSError:
            return
        if not message:
            return  # agentd closed its end (it stopped, or was killed)
        if message[:1] == FORK and fds:
            pid = os.fork()
            if pid == 0:
                control.close()
                os._exit(_child(fds[0]))
        elif message[:1] == PRELOAD:
            _preload(message[1:].decode())
            gc.freeze()
            control.send(LOADED)
        for fd in fds:
            os.close(fd)


def _preload(module: str) -> None:
    try:
        importlib.import_module(module)
    except Exception:  # its supervisors will fail the same way, and say so in their own logs
        traceback.print_exc()


def _child(fd: int) -> int:
    """The run's supervisor: steps 1-5 above. Answers its exit code."""
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)  # as a fresh interpreter has them (commands inherit ignores)
    os.setsid()
    channel = socket.socket(fileno=fd)
    try:
        channel.settimeout(ANSWER_TIMEOUT)
        request = json.loads(_read_all(channel))
        run_dir = str(request["run_dir"])
        _redirect_stdio(run_dir)
        pid = os.getpid()
        with open(os.path.join(run_dir, run_dir_files.SUPERVISOR_PID), "w") as f:
            f.write(f"{pid} {start_time(pid)}")
        channel.sendall(f"ok {pid}\n".encode())
        channel.close()
    except BaseException as err:
        code = err.errno if isinstance(err, OSError) and err.errno else errno.EIO
        with contextlib.suppress(OSError):
            channel.sendall(f"error {code} {err}\n".encode())
        return 1
    return _serve(str(request["module"]), run_dir, request.get("secrets") or {})


def _read_all(channel: socket.socket) -> bytes:
    chunks = []
    while chunk := channel.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _redirect_stdio(run_dir: str) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    log = os.open(os.path.join(run_dir, run_dir_files.SUPERVISOR_LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for fd, target in ((0, null), (1, null), (2, log)):
        os.dup2(target, fd)
    os.close(null)
    os.close(log)


def _serve(module: str, run_dir: str, secrets: dict[str, Any]) -> int:
    sys.argv = [module, run_dir]
    code = 0
    try:
        importlib.import_module(module).serve(run_dir, secrets)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _reap(_signum: int, _frame: Any) -> None:
    """Wait for every supervisor that has exited: no zombies, and their CPU counts as this process's
    children's (an ignored SIGCHLD would reap them too, but lose that)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[1] != "supervisor":
        sys.exit("usage: python -m agentd.daemon.prefork supervisor SPOOL MODULE [MODULE...]")
    control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    signal.signal(signal.SIGCHLD, _reap)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C to agentd's terminal stops agentd, then this
    for module in sys.argv[3:]:
        importlib.import_module(module)
    gc.freeze()  # the collector leaves the imported objects alone: a child does not copy their pages
    control.sendall(READY)
    serve_requests(control)


if __name__ == "__main__":
    main()

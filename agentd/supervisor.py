"""The supervisor of one run: `python -m agentd.supervisor RUN_DIR`, secrets as JSON on stdin.

It is started detached from agentd (its own session), so a run outlives an agentd
restart. It prepares the workspace, runs the command as a process group with a
minimal environment, and appends every piece of output, stream-tagged and in
arrival order, to RUN_DIR/output.jsonl; the last record is the exit. agentd
tails that file; nothing else is shared between the two.
"""

from __future__ import annotations

import codecs
import json
import os
import pathlib
import selectors
import signal
import subprocess
import sys
import time
from typing import Any, BinaryIO

from agentd import workspace
from agentd.logbatch import RECORD_BYTES

CHUNK = 64 * 1024


class Output:
    """output.jsonl: one JSON record per line, flushed as written, secrets redacted."""

    def __init__(self, path: pathlib.Path, secrets: list[str], limit: int) -> None:
        self._file = open(path, "a", encoding="utf-8")
        self._secrets = sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True)
        self._limit = limit
        self._written = 0
        self._dropped = False

    def write(self, stream: str, text: str) -> None:
        if not text:
            return
        for secret in self._secrets:
            text = text.replace(secret, "***")
        if self._written >= self._limit:
            if not self._dropped:
                self._dropped = True
                self._record({"s": "system", "t": f"agentd: output over {self._limit} bytes is not recorded\n"})
            return
        self._written += len(text.encode())
        data = text.encode()
        while data:  # records stay small so a batch of output never splits one
            piece, data = data[:RECORD_BYTES], data[RECORD_BYTES:]
            while data and piece and (data[0] & 0xC0) == 0x80:  # keep UTF-8 characters whole
                data, piece = piece[-1:] + data, piece[:-1]
            self._record({"s": stream, "t": piece.decode()})

    def exit(self, status: str, exit_code: int, reason: str, error: str = "") -> None:
        for secret in self._secrets:
            error = error.replace(secret, "***")
        self._record({"exit": {"status": status, "exit_code": exit_code, "reason": reason, "error": error}})
        self._file.close()

    def _record(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()


class Supervisor:
    def __init__(self, run_dir: pathlib.Path, secret_env: dict[str, str]) -> None:
        self.run_dir = run_dir
        self.spec = json.loads((run_dir / "assignment.json").read_text())
        self.secret_env = secret_env
        self.output = Output(run_dir / "output.jsonl", list(secret_env.values()),
                             int(self.spec.get("output_limit_bytes", 8 * 1024 * 1024)) + 64 * 1024)
        self.cancel_file = run_dir / "cancel"
        self.child: subprocess.Popen[bytes] | None = None
        self.kill_grace = float(self.spec.get("kill_grace_seconds", 10))

    @property
    def cancelled(self) -> bool:
        """agentd asks for a cancel by creating RUN_DIR/cancel: a file, unlike a signal, cannot arrive
        before this process is ready for it, and it survives an agentd restart."""
        return self.cancel_file.exists()

    def run(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        ws = pathlib.Path(self.spec["workspace_dir"])
        repo_dir, home = ws / "repo", ws / "home"
        try:
            self._run(repo_dir, home)
        finally:
            if not self.spec.get("keep_workspace"):
                workspace.remove(ws)

    def _run(self, repo_dir: pathlib.Path, home: pathlib.Path) -> None:
        spec = self.spec
        if self.cancelled:
            self.output.exit("cancelled", -1, "cancelled")
            return
        if spec.get("repo"):
            self.output.write("system", f"workspace: cloning {workspace.redact_url(spec['repo'])} "
                                        f"at {spec.get('branch') or 'its default branch'}\n")
        token = self.secret_env.get("DROVER_GIT_TOKEN", "")
        try:
            if spec.get("stack"):  # a dependent Task runs on its dependencies' ChangeSets
                from agentd import gitspace
                stack = [gitspace.StackItem(**item) for item in spec["stack"]]
                self.output.write("system", f"workspace: merging {len(stack)} ChangeSets\n")
                commit = gitspace.open_workspace(repo_dir, spec["repo"], spec.get("branch", ""), stack,
                                                 token).start_commit
            else:
                commit = workspace.prepare(repo_dir, spec.get("repo", ""), spec.get("branch", ""), token)
            home.mkdir(parents=True, exist_ok=True)
        except workspace.WorkspaceError as err:
            self.output.write("system", f"workspace: {err}\n")
            conflict = type(err).__name__ == "MergeConflict"
            self.output.exit("failed", -1, "dependency_merge_conflict" if conflict else "workspace_failed", str(err))
            return
        if commit:
            self.output.write("system", f"workspace: at commit {commit}\n")
        if self.cancelled:
            self.output.exit("cancelled", -1, "cancelled")
            return
        env = {"PATH": spec.get("path") or os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
               "LANG": "C.UTF-8", "TZ": "UTC", "HOME": str(home), "DROVER_WORKSPACE": str(repo_dir),
               "DROVER_RUN_ID": spec["run_id"], "DROVER_TASK_KEY": spec.get("task_key", "")}
        env.update(spec.get("env", {}))
        env.update(self.secret_env)
        argv = spec["argv"]
        try:
            self.child = subprocess.Popen(argv, cwd=repo_dir, env=env, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as err:
            self.output.write("system", f"cannot start {argv[0]}: {err.strerror}\n")
            self.output.exit("failed", -1, "start_failed", f"cannot start {argv[0]}: {err.strerror}")
            return
        timeout = float(spec.get("timeout_seconds") or 0)
        stopped = self._pump(self.child, timeout)
        code = self.child.wait()
        self._kill_group(self.child.pid)
        if stopped == "timeout":
            self.output.exit("failed", code, "timeout", f"timed out after {timeout:.0f} s")
        elif stopped == "cancelled":
            self.output.exit("cancelled", code, "cancelled")
        elif code == 0:
            self.output.exit("succeeded", 0, "")
        else:
            self.output.exit("failed", code, "exit_code", f"exited with {code}")

    def _pump(self, child: subprocess.Popen[bytes], timeout: float) -> str:
        """Copy output until both pipes close; stop the group on cancel or timeout.
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
            cancelled = stopping_since is None and self.cancelled
            if stopping_since is None and (cancelled or (deadline is not None and now >= deadline)):
                stopped = "cancelled" if cancelled else "timeout"
                self.output.write("system", "cancelled: stopping the process group\n" if cancelled
                                  else f"timed out after {timeout:.0f} s: stopping the process group\n")
                _signal_group(child.pid, signal.SIGTERM)
                stopping_since = now
            if stopping_since is not None and now - stopping_since >= self.kill_grace:
                _signal_group(child.pid, signal.SIGKILL)
                stopping_since = float("inf")
            for key, _ in sel.select(timeout=0.1):
                pipe: BinaryIO = key.fileobj  # type: ignore[assignment]
                try:
                    data = os.read(pipe.fileno(), CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(pipe)
                    open_pipes -= 1
                    self.output.write(key.data, decoders[key.data].decode(b"", final=True))
                    continue
                self.output.write(key.data, decoders[key.data].decode(data))
            if child.poll() is not None and stopping_since is None:
                # The leader exited; stragglers of its group that hold the pipes are stopped too.
                if _group_alive(child.pid):
                    _signal_group(child.pid, signal.SIGTERM)
                    stopping_since = time.monotonic()
        return stopped

    def _kill_group(self, pgid: int) -> None:
        _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def main() -> None:
    run_dir = pathlib.Path(sys.argv[1])
    secret_env = json.loads(sys.stdin.read() or "{}")
    sys.stdin.close()
    Supervisor(run_dir, secret_env).run()


if __name__ == "__main__":
    main()

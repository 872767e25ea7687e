"""The supervisor of one run: `python -m agentd.run.supervisor RUN_DIR`, secrets as JSON on stdin.

It is started detached from agentd (its own session), so a run outlives an agentd
restart. It prepares the workspace, hands it to the session user, runs the command in
the sandbox the spec names (agentd/run/sandbox.py) with a minimal environment, and appends
every piece of output, stream-tagged and in arrival order, to RUN_DIR/output.jsonl; the
last record is the exit. agentd tails that file; nothing else is shared between the two.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import os
import pathlib
import selectors
import signal
import subprocess
import sys
import time
from typing import Any

from agentd.daemon import cgroups, run_disk
from agentd.run.confined import Confined, ready_pipe
from agentd.run.output import Output
from agentd.run.sandbox import (
    BWRAP,
    UNSANDBOXED,
    Bind,
    Sandbox,
    SandboxPolicy,
    for_mode,
)
from drover.core import workspace

CHUNK = 64 * 1024
GIT_TOKEN = "DROVER_GIT_TOKEN"
"""The secret agentd clones and pushes with; never given to a command."""


class RunEnds(Exception):
    """How the run ended: the exit record's status, exit code, reason and error."""

    def __init__(self, status: str, exit_code: int, reason: str, error: str = "", line: str = "") -> None:
        super().__init__(f"{status}: {reason}")
        self.status, self.exit_code, self.reason, self.error = status, exit_code, reason, error
        self.line = line
        """What the run's system log says about it, if anything."""


class Supervisor:
    def __init__(self, run_dir: pathlib.Path, secret_env: dict[str, str]) -> None:
        self.run_dir = run_dir
        self.spec = json.loads((run_dir / "assignment.json").read_text())
        self.secret_env = secret_env
        self.output = Output(
            run_dir / "output.jsonl",
            list(secret_env.values()),
            int(self.spec.get("output_limit_bytes", 8 * 1024 * 1024)) + 64 * 1024,
        )
        self.cancel_file = run_dir / "cancel"
        self.child: subprocess.Popen[bytes] | None = None
        self.kill_grace = float(self.spec.get("kill_grace_seconds", 10))
        self.stderr_tail = ""  # bwrap says why it failed on the command's stderr

    @property
    def cancelled(self) -> bool:
        """agentd asks for a cancel by creating RUN_DIR/cancel: a file, unlike a signal, cannot arrive
        before this process is ready for it, and it survives an agentd restart. A full disk stops the
        run the same way: its output can no longer be stored (the exit record says disk_full)."""
        return self.cancel_file.exists() or self.output.full

    def run(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        ws = pathlib.Path(self.spec["workspace_dir"])
        repo_dir, home = ws / "repo", ws / "home"
        try:
            self._run(repo_dir, home)
        finally:
            if not self.spec.get("keep_workspace"):
                run_disk.release(ws)
                workspace.remove(ws)

    def _run(self, repo_dir: pathlib.Path, home: pathlib.Path) -> None:
        """Workspace, sandbox, command: each step ends the run with its outcome when it cannot go on."""
        try:
            self._check_cancel()
            self._workspace(repo_dir, home)
            sandbox = self._sandbox(repo_dir)
            self._check_cancel()
            child, processes = self._start(sandbox, repo_dir, home)
            self._wait(child, processes)
        except RunEnds as end:
            if end.line:
                self.output.write("system", f"{end.line}\n")
            hit = limits_hit(self.spec)
            for line in hit:
                self.output.write("system", f"{line}\n")
            self.output.exit(end.status, end.exit_code, end.reason, "; ".join(filter(None, [end.error, *hit])))

    def _check_cancel(self) -> None:
        if self.cancelled:
            raise RunEnds("cancelled", -1, "cancelled")

    def _workspace(self, repo_dir: pathlib.Path, home: pathlib.Path) -> None:
        """Clone the project (merging the dependencies' ChangeSets) and make HOME beside it."""
        spec = self.spec
        if spec.get("repo"):
            self.output.write(
                "system",
                f"workspace: cloning {workspace.redact_url(spec['repo'])} "
                f"at {spec.get('branch') or 'its default branch'}\n",
            )
        token = self.secret_env.get(GIT_TOKEN, "")
        try:
            attach_disk(spec)
            if spec.get("stack"):  # a dependent Task runs on its dependencies' ChangeSets
                from drover.core import gitspace  # pygit2 only for runs that need it: ~60 ms sooner without

                stack = [gitspace.StackItem(**item) for item in spec["stack"]]
                self.output.write("system", f"workspace: merging {len(stack)} ChangeSets\n")
                commit = gitspace.open_workspace(
                    repo_dir, spec["repo"], spec.get("branch", ""), stack, token
                ).start_commit
            else:
                commit = workspace.prepare(repo_dir, spec.get("repo", ""), spec.get("branch", ""), token)
            home.mkdir(parents=True, exist_ok=True)
        except workspace.WorkspaceError as err:
            conflict = type(err).__name__ == "MergeConflict"
            raise RunEnds(
                "failed",
                -1,
                "dependency_merge_conflict" if conflict else "workspace_failed",
                str(err),
                line=f"workspace: {err}",
            ) from None
        if commit:
            self.output.write("system", f"workspace: at commit {commit}\n")

    def _sandbox(self, repo_dir: pathlib.Path) -> Sandbox:
        """The sandbox the spec names, with the workspace handed to its session user."""
        try:
            sandbox = sandbox_for(self.spec, bool(self.spec.get("network")))
            for path in (repo_dir, repo_dir.parent / "home"):  # never the git directory beside them
                workspace.hand_over(path, sandbox.policy.ids())
        except (ValueError, OSError) as err:
            raise RunEnds("failed", -1, "sandbox_failed", str(err), line=f"sandbox: {err}") from None
        if not sandbox.isolated:
            self.output.write("system", f"WARNING: {UNSANDBOXED}\n")
        return sandbox

    def _start(
        self, sandbox: Sandbox, repo_dir: pathlib.Path, home: pathlib.Path
    ) -> tuple[subprocess.Popen[bytes], Confined]:
        """Start the command in its sandbox with exactly its environment."""
        spec = self.spec
        env = {
            "PATH": spec.get("path") or os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            "HOME": str(home),
            "DROVER_WORKSPACE": str(repo_dir),
            "DROVER_RUN_ID": spec["run_id"],
            "DROVER_TASK_KEY": spec.get("task_key", ""),
        }
        binds = []
        if workspace.has_repository(repo_dir):  # git works inside on agentd's repository, read-only
            env.update(workspace.SAFE_DIRECTORY_ENV)
            binds.append(Bind(workspace.git_dir(repo_dir), str(repo_dir / ".git")))
        env.update(spec.get("env", {}))
        # the git token stays with agentd, which clones and pushes: the command never gets it
        env.update({name: value for name, value in self.secret_env.items() if name != GIT_TOKEN})
        argv = spec["argv"]
        read, write = ready_pipe() if sandbox.isolated else (None, None)
        try:
            # bwrap runs as root before any namespace exists: it gets a fixed environment in "/", and
            # the Task's env reaches the command alone (agentd/run/launch.py)
            writable = [repo_dir, home]
            with sandbox.wrap(argv, repo_dir, env, writable=writable, ready_fd=write, binds=binds) as launch:
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
            raise RunEnds(
                "failed", -1, "start_failed", f"cannot start {argv[0]}: {why}", line=f"cannot start {argv[0]}: {why}"
            ) from None
        finally:
            if write is not None:
                os.close(write)  # the launcher holds it now
        self.child = child
        return child, Confined(child.pid, read, lambda: child.returncode is not None)

    def _wait(self, child: subprocess.Popen[bytes], processes: Confined) -> None:
        """Copy output until the command ends (or is stopped), then say how it ended."""
        timeout = float(self.spec.get("timeout_seconds") or 0)
        stopped = self._pump(child, processes, timeout)
        code = child.wait()
        processes.kill()  # nothing of the run outlives it (in the sandbox, its init saw to that)
        started = processes.started
        processes.close()
        if not started and not stopped:
            error = self.stderr_tail.strip().splitlines()[-1:] or [f"bubblewrap exited with {code}"]
            raise RunEnds(
                "failed", code, "sandbox_failed", error[0], line=f"sandbox: the command did not start: {error[0]}"
            )
        if stopped == "timeout":
            raise RunEnds("failed", code, "timeout", f"timed out after {timeout:.0f} s")
        if stopped == "cancelled":
            raise RunEnds("cancelled", code, "cancelled")
        if code == 0:
            raise RunEnds("succeeded", 0, "")
        raise RunEnds("failed", code, "exit_code", f"exited with {code}")

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
            cancelled = stopping_since is None and self.cancelled
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
                    self.output.write(key.data, decoders[key.data].decode(b"", final=True))
                    continue
                text = decoders[key.data].decode(data)
                if key.data == "stderr":
                    self.stderr_tail = (self.stderr_tail + text)[-2000:]
                self.output.write(key.data, text)
            # The leader exited; stragglers that hold the pipes are stopped too (in the sandbox its init
            # has taken them already).
            if child.poll() is not None and stopping_since is None and processes.alive():
                processes.terminate()
                stopping_since = time.monotonic()
        return stopped


def sandbox_for(spec: dict[str, Any], network: bool, **limits: int) -> Sandbox:
    """The sandbox the run's spec names, as its slot's uid or session user, in its cgroups; a spec from
    before modes existed means bubblewrap. ValueError when the user does not exist or a cgroup cannot
    be opened. `limits` replace SandboxPolicy's."""
    groups = spec.get("cgroups") or []
    processes = int(spec.get("run_processes", 512))
    held: dict[str, Any] = {"processes": processes + 16 if groups else processes}  # pids.max stops forks first
    if "run_tmp_bytes" in spec:
        held["tmp_bytes"] = int(spec["run_tmp_bytes"])
    policy = SandboxPolicy(
        network=network,
        user=spec.get("session_user", ""),
        uid=int(spec.get("uid", -1)),
        gid=int(spec.get("gid", -1)),
        seccomp=spec.get("seccomp", True),
        **{**held, **limits},
    )
    policy.ids()  # ValueError for an unknown user
    if groups:
        try:
            fds = cgroups.open_procs(groups)  # held open for the supervisor's life: every command joins them
        except OSError as err:
            raise ValueError(f"cannot open the run's cgroups: {err}") from None
        policy = dataclasses.replace(policy, cgroup_fds=fds)
    return for_mode(spec.get("sandbox", "bubblewrap"), policy, spec.get("bwrap") or BWRAP)


def attach_disk(spec: dict[str, Any]) -> None:
    """Mount the run's own filesystem on its workspace (agentd/daemon/run_disk.py), when it has one.
    WorkspaceError when it cannot."""
    if int(spec.get("run_disk_bytes") or 0) > 0:
        try:
            run_disk.attach(pathlib.Path(spec["workspace_dir"]), int(spec["run_disk_bytes"]))
        except run_disk.DiskFailed as err:
            raise workspace.WorkspaceError(str(err)) from None


def limits_hit(spec: dict[str, Any]) -> list[str]:
    """What of the run's cgroup limits it ran into, a sentence each."""
    groups = spec.get("cgroups") or []
    if not groups:
        return []
    return cgroups.limits_hit(groups, int(spec.get("run_memory_bytes", 0)), int(spec.get("run_processes", 0)))


def serve(run_dir: str, secret_env: dict[str, str]) -> None:
    """Supervise the run in `run_dir` (also what agentd/daemon/prefork.py calls in a forked supervisor)."""
    Supervisor(pathlib.Path(run_dir), secret_env).run()


def main() -> None:
    secret_env = json.loads(sys.stdin.read() or "{}")
    sys.stdin.close()
    serve(sys.argv[1], secret_env)


if __name__ == "__main__":
    main()

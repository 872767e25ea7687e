"""The supervisor of one run: `python -m agentd.run.supervisor RUN_DIR`, secrets as JSON on stdin
({"secret_env", and for a model-driven run "agent_token" and "channel": agentd's ChannelSettings, TLS as
file paths}); they never touch the disk.

One skeleton for every way of working a Task: the run's spec (agentd/run/spec.py) names its driver
(agentd/drivers/: command, harness, claude-code, opencode), and the supervisor walks `workspace ->
setup -> sandbox -> drive -> publish -> exit record` with the driver doing the drive (and choosing its
workspace, setup and sandbox through `Run`). It is started detached from agentd (its own session), so
a run outlives an agentd restart, and appends everything the run says, stream-tagged and in arrival
order, to RUN_DIR/output.jsonl (agentd/run/output.py); the last record is the exit. agentd tails that
file; nothing else is shared between the two. A harness run started again on the same RUN_DIR
resumes from its transcript."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import gzip
import importlib
import json
import os
import pathlib
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agentd import run_dir as run_dir_files
from agentd.daemon import cgroups, run_disk
from agentd.errors import DiskFailed, RunEnded, SandboxFailed, SetupFailed, is_full
from agentd.run import prepared_workspace
from agentd.run.output import Output
from agentd.run.sandbox import BWRAP, UNSANDBOXED, Bind, Sandbox, SandboxPolicy, for_mode
from agentd.run.spec import GIT_SECRETS, GIT_SSH_KEY, GIT_TOKEN, RunSpec
from drover.core import build_outputs, mirror, workspace

if TYPE_CHECKING:
    from agentd.run.control_plane import ControlPlane
    from drover.core import gitspace

PARKED = "WIP: parked while waiting for answers"
MAX_STATE = 3 << 20
"""A parked session's state (gzip) is kept up to this size, else not at all."""
DRIVERS = {
    "command": "agentd.drivers.command",
    "harness": "agentd.drivers.harness.driver",
    "claude-code": "agentd.drivers.runtime",
    "opencode": "agentd.drivers.runtime",
}
"""The module of each way of working a Task; each has `driver(spec) -> Driver`."""


class Driver(Protocol):
    """One way of working a Task (agentd/drivers/)."""

    crash_code: str
    """The run's reason when the driver itself fails (a bug, an unreachable control plane)."""
    output_slack: int
    """Output recorded past the run's limit (a command's exit and system lines)."""

    async def drive(self, run: Run) -> RunEnded:
        """Work the Task in `run`'s workspace and sandbox; answers (or raises) how the run ended."""
        ...


class Run:
    """What every driver gets: the run's spec, secrets and output, and the skeleton's steps."""

    def __init__(self, run_dir: pathlib.Path, secrets: dict[str, Any], output_slack: int = 0) -> None:
        self.run_dir = run_dir
        self.spec = RunSpec.load(run_dir)
        self.secret_env: dict[str, str] = dict(secrets.get("secret_env") or {})
        self.agent_token: str = secrets.get("agent_token", "")
        self.channel: dict[str, Any] = secrets.get("channel") or {"control_plane": ""}
        self.git_secret = self.secret_env.get(GIT_TOKEN) or self.secret_env.get(GIT_SSH_KEY, "")
        """The project's git credential: a token, or an SSH key (drover.core.git_auth)."""
        secrets_shown = [*self.secret_env.values(), *([self.agent_token] if self.agent_token else [])]
        self.hidden = [part for secret in secrets_shown for part in workspace.secret_parts(secret)]
        self.output = Output(run_dir / run_dir_files.OUTPUT, self.hidden, self.spec.output_limit_bytes + output_slack)
        self.cancel_file = run_dir / run_dir_files.CANCEL
        self.ws_dir = self.spec.workspace
        self.repo_dir, self.home = self.ws_dir / "repo", self.ws_dir / "home"
        self.mirrors = pathlib.Path(self.spec.mirror_dir) if self.spec.mirror_dir else None
        """agentd's repository mirrors, the workspace cloned through them (drover/core/mirror.py)."""
        self.workspace: gitspace.Workspace | None = None
        """A Task's workspace that publishes a ChangeSet (None: a command's clone, or no repository)."""
        # how setup went (run, or skipped for a prepared workspace) and what it left untracked (preparation.py)
        self.prepared, self.setup_made = prepared_workspace.Setup(), list[str]()
        self._control_plane: ControlPlane | None = None

    @property
    def cancelled(self) -> bool:
        """agentd asks for a cancel by creating RUN_DIR/cancel: a file, unlike a signal, cannot arrive
        before this process is ready for it, and it survives an agentd restart. A full disk stops the
        run the same way: its output can no longer be stored (the exit record says disk_full)."""
        return self.cancel_file.exists() or self.output.full

    def check_cancel(self) -> None:
        if self.cancelled:
            raise RunEnded("cancelled", code="cancelled", exit_code=-1)

    @property
    def control_plane(self) -> ControlPlane:
        """The run's client of the control plane (reserve, settle, ask, publish, input)."""
        if self._control_plane is None:
            from agentd.run.control_plane import GrpcControlPlane

            self._control_plane = GrpcControlPlane(self.channel, self.agent_token, self.spec.run_id, self.run_dir)
        return self._control_plane

    # --- the workspace ---------------------------------------------------------------------------

    def clone(self) -> None:
        """A command's workspace: the project cloned (the dependencies' ChangeSets merged) and HOME beside it."""
        spec = self.spec
        if spec.repo:
            self.output.write(
                "system",
                f"workspace: cloning {workspace.redact_url(spec.repo)} at {spec.branch or 'its default branch'}\n",
            )
        token = self.git_secret
        self.attach_disk()
        if spec.stack:  # a dependent Task runs on its dependencies' ChangeSets
            from drover.core import gitspace  # pygit2 only for runs that need it: ~60 ms sooner without

            self.output.write("system", f"workspace: merging {len(spec.stack)} ChangeSets\n")
            commit = gitspace.open_workspace(
                self.repo_dir, spec.repo, spec.branch, self._stack(), token, mirror_dir=self.mirrors
            ).start_commit
        else:
            commit = mirror.prepare(self.repo_dir, spec.repo, spec.branch, token, self.mirrors)
        self.home.mkdir(parents=True, exist_ok=True)
        if commit:
            self.output.write("system", f"workspace: at commit {commit}\n")

    def open_task_workspace(self) -> tuple[pathlib.Path | None, bool]:
        """A model-driven Task's workspace by its mode: none, read (a clone), write (a Workspace that
        publishes; resumed as the run left it, or from a parked session's WIP branch). Answers the
        repository's root (None: no repository) and whether the Task may change it."""
        from drover.core import gitspace

        h, spec = self.spec.harness, self.spec
        token = self.git_secret
        state = self.run_dir / run_dir_files.WORKSPACE
        if h.workspace_mode == "none":
            return None, False
        self.attach_disk()
        if h.workspace_mode == "read":
            if not workspace.has_repository(self.repo_dir):
                mirror.prepare(self.repo_dir, spec.repo, spec.branch, token, self.mirrors)
            return self.repo_dir, False
        if h.resume_branch and not state.exists():  # resuming a parked session: its WIP branch
            saved = json.loads(h.resume_workspace_json or "{}")
            self.output.write("system", f"workspace: resuming {h.resume_branch}\n")
            mirror.prepare(self.repo_dir, spec.repo, h.resume_branch, token, self.mirrors)
            gitspace.detach(self.repo_dir)
            state.write_text(json.dumps(saved))
        if state.exists() and workspace.has_repository(self.repo_dir):  # resumed: as the run left it
            saved = json.loads(state.read_text())
            self.workspace = gitspace.Workspace(
                self.repo_dir,
                saved["base_commit"],
                saved["start_commit"],
                saved["stacked_on"],
                token,
                spec.preparation.identity,
                spec.repo,
            )
            return self.repo_dir, True
        stack = self._stack()
        merging = f", merging {len(stack)} ChangeSets" if stack else ""
        self.output.write("system", f"workspace: cloning {workspace.redact_url(spec.repo)} at {spec.branch}{merging}\n")
        self.workspace = gitspace.open_workspace(
            self.repo_dir, spec.repo, spec.branch, stack, token, spec.preparation.identity, self.mirrors
        )
        state.write_text(
            json.dumps(
                {
                    "base_commit": self.workspace.base_commit,
                    "start_commit": self.workspace.start_commit,
                    "stacked_on": self.workspace.stacked_on,
                }
            )
        )
        return self.repo_dir, True

    def _stack(self) -> list[gitspace.StackItem]:
        from drover.core import gitspace

        return [gitspace.StackItem(**dataclasses.asdict(item)) for item in self.spec.stack]

    def attach_disk(self) -> None:
        """Mount the run's own filesystem on its workspace (agentd/daemon/run_disk.py), when it has one."""
        if self.spec.run_disk_bytes > 0:
            try:
                run_disk.attach(self.ws_dir, self.spec.run_disk_bytes)
            except DiskFailed as err:
                raise workspace.WorkspaceError(str(err)) from None

    # --- the sandbox -----------------------------------------------------------------------------

    def sandbox(self, network: bool, hand_over: Sequence[pathlib.Path | None] = (), **limits: int) -> Sandbox:
        """The sandbox the spec names, as the run slot's uid or the session user, in the run's cgroups,
        with `hand_over` (the workspace and HOME, never the git directory beside them) handed to that
        user. `limits` replace SandboxPolicy's. SandboxFailed when it cannot be set up."""
        try:
            sandbox = sandbox_for(self.spec, network, **limits)
            for path in hand_over:
                if path is not None:
                    workspace.hand_over(path, sandbox.policy.ids())
        except (ValueError, OSError) as err:
            raise SandboxFailed(str(err)) from None
        if not sandbox.isolated:
            self.output.write("system", f"WARNING: {UNSANDBOXED}\n")
        return sandbox

    def hand_over(self, path: pathlib.Path, sandbox: Sandbox) -> None:
        """`path` owned by the user the sandbox's commands run as."""
        workspace.hand_over(path, sandbox.policy.ids())

    def command_env(self, root: pathlib.Path | None, home: pathlib.Path) -> tuple[dict[str, str], list[Bind]]:
        """The environment every command of the run starts from, and what git inside needs: agentd's
        repository, read-only at root/.git (the Task's own env and the driver's come on top)."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            "HOME": str(home),
            **self.spec.preparation.env,  # the project's env and DROVER_CHANGE_ID, _TASK_KEY, _BRANCH
            "DROVER_WORKSPACE": str(root or ""),
            "DROVER_RUN_ID": self.spec.run_id,
        }
        binds = []
        if root is not None and workspace.has_repository(root):
            env.update(workspace.SAFE_DIRECTORY_ENV)
            env.update(self.spec.preparation.git_env)  # commits made in the sandbox have the project's identity
            binds.append(Bind(workspace.git_dir(root), str(root / ".git")))
        return env, binds + (self.prepared.binds(root) if root is not None else [])

    @property
    def command_secrets(self) -> dict[str, str]:
        """The run's secrets a command gets: all but the git credentials (agentd clones and pushes)."""
        return {name: value for name, value in self.secret_env.items() if name not in GIT_SECRETS}

    # --- publishing and parking ------------------------------------------------------------------

    @property
    def build_outputs(self) -> list[str]:
        """The patterns of files a ChangeSet leaves out: the project's, else the default ones, and setup's."""
        return [*(self.spec.harness.build_outputs or build_outputs.DEFAULT_BUILD_OUTPUTS), *self.setup_made]

    async def commit_workspace(self, message: str, written: set[str]) -> gitspace.ChangeSetResult:
        """Commit and push the workspace on the Task's branch, build outputs left out unless a write
        tool wrote them (`written`, relative to the root)."""
        assert self.workspace is not None
        s, branch = self.spec, self.spec.preparation.task_branch  # "": drover/<change>/<task>
        publish, outputs = self.workspace.publish, self.build_outputs
        return await asyncio.to_thread(publish, s.change_id, s.task_id, message, outputs, written, branch)

    async def publish(self, ended: RunEnded, written: set[str]) -> RunEnded:
        """The Task's work as its ChangeSet: committed, pushed, published to the control plane."""
        summary = ended.intent.get("summary", "") or ended.reason
        result = await self.commit_workspace(f"{self.spec.task_key}: {summary}"[:500], written)
        left_out = build_outputs.summary(result.left_out, self.build_outputs)
        changeset_id = await self.control_plane.publish(result, summary, ended.intent, left_out)
        left = f"; left out as build outputs: {', '.join(left_out)}" if left_out else ""
        self.output.write(
            "system", f"published ChangeSet {changeset_id} on {result.branch} ({len(result.own_files)} files{left})\n"
        )
        return ended

    def resume_state(self) -> bytes:
        """A parked session's state (gunzipped) when this run resumes one, else b""."""
        packed = self.spec.harness.resume_state
        try:
            return gzip.decompress(packed) if packed else b""
        except (ValueError, OSError, EOFError):
            return b""

    async def park(self, ended: RunEnded, session_id: str, state: bytes | None, written: set[str]) -> RunEnded:
        """Commit the workspace as WIP on the Task's branch (no ChangeSet) and keep the session's state
        (secrets redacted, gzip, at most 3 MiB) for the run that resumes it."""
        parked: dict[str, Any] = {"session_id": session_id}
        if self.workspace is not None:
            result = await self.commit_workspace(PARKED, written)
            parked.update(
                branch=result.branch,
                commit=result.commit,
                workspace={
                    "base_commit": result.base_commit,
                    "start_commit": result.start_commit,
                    "stacked_on": result.stacked_on,
                },
            )
            self.output.write("system", f"parked: the workspace is {result.commit[:12]} on {result.branch}\n")
        if state:
            text = state.decode(errors="replace")
            for secret in sorted((s for s in self.hidden if len(s) >= 4), key=len, reverse=True):
                text = text.replace(secret, "***")
            packed = gzip.compress(text.encode())
            if len(packed) <= MAX_STATE:
                ended.extra["state"] = base64.b64encode(packed).decode()
            else:
                self.output.write("system", f"parked: the session's state ({len(packed)} bytes) is not kept\n")
        ended.extra["parked"] = json.dumps(parked)
        return ended

    # --- the skeleton ----------------------------------------------------------------------------

    async def supervise(self, driver: Driver) -> None:
        """Drive the run to its end, whatever happens, then write the exit record and clean up."""
        try:
            ended = await self._drive(driver)
            self.finish(ended)
        finally:
            if self._control_plane is not None:
                await self._control_plane.close()
            prepared_workspace.release(self.repo_dir)  # a prepared workspace's overlay, when it has one
            if not self.spec.keep_workspace:
                run_disk.release(self.ws_dir)
                workspace.remove(self.ws_dir)
            run_disk.make_spare(self.ws_dir, self.spec.run_disk_bytes)  # after the exit record: for the next run

    async def _drive(self, driver: Driver) -> RunEnded:
        try:
            self.check_cancel()
            return await driver.drive(self)
        except RunEnded as ended:
            return ended
        except workspace.WorkspaceError as err:
            conflict = type(err).__name__ == "MergeConflict"
            code = "dependency_merge_conflict" if conflict else "workspace_failed"
            return RunEnded("failed", str(err), code=code, exit_code=-1, line=f"workspace: {err}")
        except SandboxFailed as err:  # never run the Task's commands any other way
            return RunEnded("failed", str(err), code="sandbox_failed", exit_code=-1, line=f"sandbox: {err}")
        except SetupFailed as err:  # the project's setup, not the Task's work: the run says which command
            return RunEnded("failed", str(err), code="setup_failed", exit_code=err.exit_code, line=f"setup: {err}")
        except Exception as err:  # a bug or an unreachable control plane: end the run, say why
            traceback.print_exc()
            if is_full(err):  # the transcript or the workspace state could not be written
                return RunEnded("failed", f"disk_full: {err}", code="disk_full")
            return RunEnded("failed", f"{driver.crash_code}: {type(err).__name__}: {err}", code=driver.crash_code)

    def finish(self, ended: RunEnded) -> None:
        """The exit record, after what the run's system log should say about how it ended."""
        if ended.line:
            self.output.write("system", f"{ended.line}\n")
        s = self.spec  # what of the run's cgroup limits it ran into, a sentence each
        hit = cgroups.limits_hit(list(s.cgroups), s.run_memory_bytes, s.run_processes) if s.cgroups else []
        for line in hit:
            self.output.write("system", f"{line}\n")
        error = "; ".join(filter(None, ["" if ended.ok else ended.reason, *hit]))
        self.output.exit(ended.status, ended.exit_code, ended.code, error, **self.prepared.reported, **ended.extra)


def sandbox_for(spec: RunSpec, network: bool, **limits: int) -> Sandbox:
    """The sandbox the run's spec names, as its slot's uid or session user, in its cgroups. ValueError
    when the user does not exist or a cgroup cannot be opened. `limits` replace SandboxPolicy's."""
    held: dict[str, Any] = {"processes": spec.run_processes + 16 if spec.cgroups else spec.run_processes}
    if spec.run_tmp_bytes is not None:  # pids.max stops forks first, RLIMIT_NPROC after
        held["tmp_bytes"] = spec.run_tmp_bytes
    policy = SandboxPolicy(
        network=network, user=spec.session_user, uid=spec.uid, gid=spec.gid, seccomp=spec.seccomp, **{**held, **limits}
    )
    policy.ids()  # ValueError for an unknown user
    if spec.cgroups:
        try:
            fds = cgroups.open_procs(list(spec.cgroups))  # held open for the supervisor's life: every command joins
        except OSError as err:
            raise ValueError(f"cannot open the run's cgroups: {err}") from None
        policy = dataclasses.replace(policy, cgroup_fds=fds, cgroup_dirs=tuple(spec.cgroups))
    return for_mode(spec.sandbox, policy, spec.bwrap or BWRAP)


def load_driver(name: str) -> Any:
    """The driver module of `name` (agentd/drivers/)."""
    if name not in DRIVERS:
        raise ValueError(f"no driver {name!r}")
    return importlib.import_module(DRIVERS[name])


def serve(run_dir: str, secrets: dict[str, Any]) -> None:
    """Supervise the run in `run_dir` (also what agentd/daemon/prefork.py calls in a forked supervisor)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    spec = RunSpec.load(pathlib.Path(run_dir))
    driver: Driver = load_driver(spec.driver).driver(spec)
    run = Run(pathlib.Path(run_dir), secrets, driver.output_slack)
    asyncio.run(run.supervise(driver))


def main() -> None:
    secrets = json.loads(sys.stdin.read() or "{}")
    sys.stdin.close()
    serve(sys.argv[1], secrets)


if __name__ == "__main__":
    main()

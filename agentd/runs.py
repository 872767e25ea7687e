"""The runs of this agent: start a supervisor per run, tail its output into the outbox,
re-attach to live runs after a restart. One asyncio task per run, kept by run id."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import time
from typing import Any

from google.protobuf import json_format

from agentd.config import AgentConfig
from agentd.logbatch import LogBatcher
from agentd.outbox import Outbox, RunOutbox

log = logging.getLogger("agentd.runs")
POLL_SECONDS = 0.05
MAX_STARTS = 4  # a harness supervisor is started at most this often for one run (3 resumes)
SUPERVISORS = {"command": "agentd.supervisor", "harness": "agentd.harness.supervisor"}


class Refused(Exception):
    """The agent will not take this run; the reason goes back to the control plane."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass
class RunSlot:
    run_id: str
    dir: pathlib.Path
    box: RunOutbox
    process: subprocess.Popen[bytes] | None = None
    tracker: asyncio.Task[None] | None = None
    driver: str = "command"
    awaiting_resume: bool = False  # a harness whose supervisor died: waiting for its secrets again

    @property
    def live(self) -> bool:
        """The session has not ended yet (it still takes capacity)."""
        return not self.box.finished


def _proc_start_time(pid: int) -> str:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat[stat.rindex(")") + 2:].split()
    return "" if fields[0] == "Z" else fields[19]


class Runs:
    def __init__(self, config: AgentConfig, outbox: Outbox) -> None:
        self.config = config
        self.outbox = outbox
        self.root = config.spool / "runs"
        self.slots: dict[str, RunSlot] = {}
        self.secrets: dict[str, dict[str, str]] = {}

    # --- what hello says ------------------------------------------------------------------------

    def active_ids(self) -> list[str]:
        return [s.run_id for s in self.slots.values() if s.live]

    def undelivered_ids(self) -> list[str]:
        return [s.run_id for s in self.slots.values() if not s.live]

    def resume_ids(self) -> list[str]:
        return [s.run_id for s in self.slots.values() if s.live and s.awaiting_resume]

    @property
    def busy(self) -> int:
        return sum(1 for s in self.slots.values() if s.live)

    # --- recovery after a restart -----------------------------------------------------------------

    def recover(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for run_dir in sorted(self.root.iterdir()):
            if not (run_dir / "assignment.json").exists():
                shutil.rmtree(run_dir, ignore_errors=True)
                continue
            box = RunOutbox(run_dir)
            if box.delivered:
                shutil.rmtree(run_dir, ignore_errors=True)
                continue
            driver = json.loads((run_dir / "assignment.json").read_text()).get("driver", "command")
            slot = RunSlot(run_dir.name, run_dir, box, driver=driver)
            if slot.live and driver == "harness" and not self._supervisor_alive(slot):
                slot.awaiting_resume = self._starts(slot) < MAX_STARTS
            self._add(slot)
            log.info("re-attached to run %s (%s)", slot.run_id, "live" if slot.live else "result undelivered")

    def _add(self, slot: RunSlot) -> None:
        self.slots[slot.run_id] = slot
        self.outbox.add(slot.run_id, slot.box)
        if slot.live:
            slot.tracker = asyncio.create_task(self._track(slot), name=f"track-{slot.run_id}")

    # --- start, cancel, ack ---------------------------------------------------------------------

    def start(self, assignment: Any) -> None:
        """Start a run from its assignment (a drover.v1.RunAssignment), or resume a harness run."""
        existing = self.slots.get(assignment.run_id)
        if existing is not None:
            if assignment.resume and existing.awaiting_resume:
                self._resume(existing, assignment)
            return  # otherwise a duplicate assignment after a reconnect
        if assignment.driver not in SUPERVISORS:
            raise Refused(f"no_driver: this agent has no {assignment.driver!r} driver")
        if self.busy >= self.config.capacity:
            raise Refused("at_capacity")
        if assignment.driver == "command" and not assignment.command.argv:
            raise Refused("no_command")
        run_dir = self.root / assignment.run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        spec = {
            "run_id": assignment.run_id, "driver": assignment.driver, "change_id": assignment.change_id,
            "task_id": assignment.task_id, "task_key": assignment.task_key, "kind": assignment.kind,
            "argv": list(assignment.command.argv), "env": dict(assignment.command.env),
            "timeout_seconds": assignment.command.timeout_seconds or self.config.default_timeout_seconds,
            "repo": assignment.workspace.repo, "branch": assignment.workspace.branch,
            "stack": [json_format.MessageToDict(item, preserving_proto_field_name=True)
                      for item in assignment.workspace.stack],
            "workspace_dir": str((self.config.work_dir / assignment.run_id).resolve()),
            "keep_workspace": self.config.keep_workspaces, "kill_grace_seconds": self.config.kill_grace_seconds,
            "session_user": self.config.session_user,
            "network": assignment.command.network,
        }
        if assignment.limits.get("output_bytes", 0) > 0:  # the supervisors stop recording past it
            spec["output_limit_bytes"] = assignment.limits["output_bytes"]
        if assignment.driver == "harness":
            spec.update(model=assignment.model, base_url=assignment.base_url, tier=assignment.tier,
                        prompt=assignment.harness.prompt,
                        harness=json_format.MessageToDict(assignment.harness, preserving_proto_field_name=True,
                                                          always_print_fields_with_no_presence=True))
        (run_dir / "assignment.json").write_text(json.dumps(spec))
        box = RunOutbox(run_dir)
        slot = RunSlot(assignment.run_id, run_dir, box, driver=assignment.driver)
        box.append("started", end=0)
        self._launch(slot, dict(assignment.secret_env))
        self._add(slot)

    def _launch(self, slot: RunSlot, secret_env: dict[str, str]) -> None:
        secrets: dict[str, Any] = secret_env
        if slot.driver == "harness":
            self.secrets[slot.run_id] = secret_env  # in memory only, to resume a supervisor that died
            secrets = {"secret_env": secret_env, "control_plane": self.config.control_plane,
                       "agent_token": self.config.token_file.read_text().strip()}
        try:
            slot.process = self._spawn(slot.dir, SUPERVISORS[slot.driver], secrets)
            slot.awaiting_resume = False
        except OSError as err:
            slot.box.append("finished", end=slot.box.end, status="failed", exit_code=-1, reason="start_failed",
                            error=f"cannot start the supervisor: {err}")
            self.outbox.changed.set()

    def _resume(self, slot: RunSlot, assignment: Any) -> None:
        log.warning("run %s: resuming its harness from the transcript", slot.run_id)
        self._launch(slot, dict(assignment.secret_env))

    def _starts(self, slot: RunSlot) -> int:
        try:
            return int((slot.dir / "incarnation").read_text())
        except (OSError, ValueError):
            return 1

    def _spawn(self, run_dir: pathlib.Path, module: str, secrets: dict[str, Any]) -> subprocess.Popen[bytes]:
        self.config.work_dir.mkdir(parents=True, exist_ok=True)
        with open(run_dir / "supervisor.log", "ab") as errlog:
            process = subprocess.Popen(
                [sys.executable, "-m", module, str(run_dir)], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=errlog, start_new_session=True, close_fds=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
        assert process.stdin is not None
        process.stdin.write(json.dumps(secrets).encode())  # secrets never touch the disk
        process.stdin.close()
        (run_dir / "supervisor.pid").write_text(f"{process.pid} {_proc_start_time(process.pid)}")
        return process

    def cancel(self, run_id: str) -> None:
        slot = self.slots.get(run_id)
        if slot is None or not slot.live:
            return
        (slot.dir / "cancel").touch()  # the supervisor looks for it every 100 ms
        log.info("run %s: cancel requested", run_id)

    def ack(self, run_id: str, seq: int) -> None:
        slot = self.slots.get(run_id)
        if slot is None:
            return
        slot.box.ack(seq)
        if slot.box.delivered:
            self._forget(slot)

    def forget_applied(self, applied: dict[str, int]) -> None:
        for run_id, seq in applied.items():
            self.ack(run_id, seq)

    def _forget(self, slot: RunSlot) -> None:
        self.slots.pop(slot.run_id, None)
        self.secrets.pop(slot.run_id, None)
        self.outbox.runs.pop(slot.run_id, None)
        if slot.process is not None:
            slot.process.poll()
        shutil.rmtree(slot.dir, ignore_errors=True)

    # --- following a run -------------------------------------------------------------------------

    def _supervisor_pid(self, slot: RunSlot) -> int:
        try:
            pid_text, _, started = (slot.dir / "supervisor.pid").read_text().partition(" ")
        except OSError:
            return 0
        pid = int(pid_text)
        return pid if started and _proc_start_time(pid) == started else 0

    def _supervisor_alive(self, slot: RunSlot) -> bool:
        if slot.process is not None:
            return slot.process.poll() is None
        return self._supervisor_pid(slot) != 0

    async def _track(self, slot: RunSlot) -> None:
        try:
            await self._follow(slot)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.exception("run %s: following its output failed", slot.run_id)
            self.outbox.append(slot.run_id, "finished", status="failed", exit_code=-1, reason="agent_error",
                               error=f"agentd could not follow the run: {err}")

    async def _follow(self, slot: RunSlot) -> None:
        run_id = slot.run_id
        batcher = LogBatcher(lambda stream, text, end: self.outbox.append(run_id, "log", end, stream=stream,
                                                                           text=text),
                             interval=self.config.batch_interval, max_bytes=self.config.batch_bytes)
        path = slot.dir / "output.jsonl"
        offset = slot.box.end
        pending = b""
        dead_checks = 0
        while not slot.box.finished:
            data = b""
            if path.exists():
                with open(path, "rb") as f:
                    f.seek(offset + len(pending))
                    data = f.read(1 << 20)
            now = time.monotonic()
            if data:
                dead_checks = 0
                pending += data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    offset += len(line) + 1
                    record = json.loads(line)
                    if "exit" in record:
                        batcher.flush()
                        self.outbox.append(run_id, "finished", offset, **record["exit"])
                        return
                    batcher.add(record["s"], record["t"], offset, now)
            if batcher.due(now):
                batcher.flush()
            if not data:
                if slot.awaiting_resume:
                    await asyncio.sleep(POLL_SECONDS * 4)
                    continue
                if not self._supervisor_alive(slot):
                    dead_checks += 1
                    if dead_checks >= 3 and slot.driver == "harness" and self._starts(slot) < MAX_STARTS:
                        dead_checks = 0  # the transcript lets a new supervisor go on where this one died
                        if slot.run_id in self.secrets:
                            self._launch(slot, self.secrets[slot.run_id])
                        else:
                            slot.awaiting_resume = True  # the control plane sends the secrets again
                        continue
                    if dead_checks >= 3:  # re-read twice after it died, then give up
                        batcher.flush()
                        self.outbox.append(run_id, "finished", offset, status="failed", exit_code=-1,
                                           reason="supervisor_lost", error="the run's supervisor died")
                        return
                await asyncio.sleep(POLL_SECONDS)

    async def close(self) -> None:
        """Stop following runs (they keep running; a restarted agentd re-attaches)."""
        for slot in self.slots.values():
            if slot.tracker is not None:
                slot.tracker.cancel()
        await asyncio.gather(*(s.tracker for s in self.slots.values() if s.tracker), return_exceptions=True)

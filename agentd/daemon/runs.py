"""The runs of this agent: start a supervisor per run, tail its output into the outbox,
re-attach to live runs after a restart. One asyncio task per run, kept by run id."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import pathlib
import shutil
import subprocess
import time
from typing import Any

from agentd import run_dir as run_dir_files
from agentd.daemon import processes, run_slots
from agentd.daemon.assignment import Assignment, place
from agentd.daemon.config import AgentConfig
from agentd.daemon.connection import ChannelSettings
from agentd.daemon.logbatch import LogBatcher
from agentd.daemon.metrics import SetupTally
from agentd.daemon.outbox import Outbox, RunOutbox, free_bytes, is_full
from agentd.errors import RunRefused
from agentd.run.output import read_records
from agentd.run.spec import RunSpec

log = logging.getLogger("agentd.runs")
POLL_SECONDS = 0.05
MAX_STARTS = 4  # a harness supervisor is started at most this often for one run (3 resumes)
SUPERVISOR_LOST = {
    "status": "failed",
    "exit_code": -1,
    "reason": "supervisor_lost",
    "error": "the run's supervisor died",
}
DRIVERS = {
    "command": "agentd.drivers.command",
    "harness": "agentd.drivers.harness.driver",
    "claude-code": "agentd.drivers.runtime",
    "opencode": "agentd.drivers.runtime",
}
"""The module of each way of working a Task: every run's supervisor (agentd/run/supervisor.py) imports
its driver's; the supervisor template imports it ahead, the first time this agent runs one."""


@dataclasses.dataclass
class RunSlot:
    run_id: str
    dir: pathlib.Path
    box: RunOutbox
    process: subprocess.Popen[bytes] | None = None
    tracker: asyncio.Task[None] | None = None
    driver: str = "command"
    awaiting_resume: bool = False  # a harness whose supervisor died: waiting for its secrets again
    unreadable: str = ""  # why its run dir could not be read after a restart: reported once connected
    slot: int = -1  # its run slot (agentd/daemon/run_slots.py): its uid and cgroup

    @property
    def live(self) -> bool:
        """The session has not ended yet (it still takes capacity)."""
        return not self.box.finished


class Runs:
    def __init__(self, config: AgentConfig, outbox: Outbox) -> None:
        self.config = config
        self.outbox = outbox
        self.root = config.spool / "runs"
        self.slots: dict[str, RunSlot] = {}
        self.secrets: dict[str, dict[str, str]] = {}
        self.removals: set[asyncio.Task[None]] = set()  # run dirs kept until their stopped supervisor exits
        self.template = processes.Template(self.config.spool) if config.prefork else None
        self.places = run_slots.Places(config)
        self.setups = SetupTally()  # agentd's metrics: prepared-workspace hits and misses

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
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            for private in (self.config.spool, self.root):  # transcripts and output: agentd's alone
                os.chmod(private, 0o700)
            run_dirs = sorted(p for p in self.root.iterdir() if p.is_dir())
        except OSError as err:  # e.g. a full disk: new runs are refused until there is room
            log.error("cannot read the spool %s (%s): no runs to re-attach", self.root, err)
            return
        if self.template is not None:
            self.template.start()
        for run_dir in run_dirs:
            try:
                self._recover(run_dir)
            except Exception as err:  # one damaged run dir must not keep agentd from starting
                log.exception("run %s: its directory cannot be read", run_dir.name)
                slot = RunSlot(
                    run_dir.name,
                    run_dir,
                    RunOutbox(run_dir, load=False),
                    unreadable=f"agentd could not read the run's spool directory after a restart: {err}",
                )
                slot.box.finished = True  # listed as undelivered; its result goes out once connected
                self._stop(slot)
                self._add(slot)
        self.places.release_disks({s.run_id for s in self.slots.values() if s.live})

    def _recover(self, run_dir: pathlib.Path) -> None:
        try:
            spec = RunSpec.load(run_dir)
            driver, slot_index = spec.driver, spec.slot
        except (FileNotFoundError, ValueError, TypeError):
            if not (run_dir / run_dir_files.OUTBOX).exists():  # the run never started here
                shutil.rmtree(run_dir, ignore_errors=True)
                return
            driver, slot_index = "command", -1  # torn, yet the run started: follow it, without harness resumes
        box = RunOutbox(run_dir)
        if box.delivered:
            shutil.rmtree(run_dir, ignore_errors=True)
            return
        slot = RunSlot(run_dir.name, run_dir, box, driver=driver, slot=slot_index)
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

    def start(self, assignment: Assignment) -> None:
        """Start a run from its assignment, or resume a harness run."""
        run_id, driver = assignment.run_id, assignment.spec.driver
        existing = self.slots.get(run_id)
        if existing is not None:
            if assignment.resume and existing.awaiting_resume:
                self._resume(existing, assignment)
            return  # otherwise a duplicate assignment after a reconnect
        if driver not in DRIVERS or driver not in self.config.drivers():
            raise RunRefused(f"no_driver: this agent has no {driver!r} driver")
        if self.busy >= self.config.capacity:
            raise RunRefused("at_capacity")
        if driver == "command" and not assignment.spec.argv:
            raise RunRefused("no_command")
        if free_bytes(self.root) < self.config.min_free_spool_bytes:
            raise RunRefused("disk_full")
        run_dir = self.root / run_id
        slot_index, groups = self.places.take(s.slot for s in self.slots.values() if s.live)  # or RunRefused
        spec = place(assignment.spec, self.config, slot_index, groups)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            spec.save(run_dir)
            box = RunOutbox(run_dir)
            slot = RunSlot(run_id, run_dir, box, driver=driver, slot=slot_index)
            box.append("started", end=0)
            self._launch(slot, assignment.secret_env)
        except OSError as err:  # nothing was sent yet: undo the half-made run and refuse it
            self.secrets.pop(run_id, None)
            shutil.rmtree(run_dir, ignore_errors=True)
            shutil.rmtree(spec.workspace_dir, ignore_errors=True)
            log.error("run %s: cannot store it in the spool: %s", run_id, err)
            raise RunRefused("disk_full" if is_full(err) else f"spool_error: {err.strerror}") from err
        self._add(slot)

    def _launch(self, slot: RunSlot, secret_env: dict[str, str]) -> None:
        """Start the run's supervisor. A full spool raises (the caller refuses or fails the run);
        any other failure ends the run as start_failed."""
        try:
            secrets: dict[str, Any] = {"secret_env": secret_env}
            if slot.driver != "command":
                if slot.driver == "harness":
                    self.secrets[slot.run_id] = secret_env  # in memory only, to resume a supervisor that died
                # Its control-plane client dials exactly as agentd does: TLS settings are file paths.
                secrets["channel"] = dataclasses.asdict(ChannelSettings.of(self.config))
                secrets["agent_token"] = self.config.token_file.read_text().strip()
            slot.process = self._spawn(slot.dir, DRIVERS[slot.driver], secrets)
            slot.awaiting_resume = False
        except OSError as err:
            if is_full(err):
                raise
            self._fail(slot, "start_failed", f"cannot start the supervisor: {err}")

    def _resume(self, slot: RunSlot, assignment: Assignment) -> None:
        log.warning("run %s: resuming its harness from the transcript", slot.run_id)
        try:
            self._launch(slot, assignment.secret_env)
        except OSError as err:
            self._fail(slot, "disk_full", f"cannot resume the run, the spool is full: {err}")

    def _starts(self, slot: RunSlot) -> int:
        try:
            return int((slot.dir / run_dir_files.INCARNATION).read_text())
        except (OSError, ValueError):
            return 1

    def _spawn(self, run_dir: pathlib.Path, module: str, secrets: dict[str, Any]) -> subprocess.Popen[bytes] | None:
        """The run's supervisor forked from the template (None: followed by its pid file), or spawned."""
        self.config.work_dir.mkdir(parents=True, exist_ok=True)
        # Listed by agentd alone; the session user may pass through to its own run (unsandboxed mode).
        os.chmod(self.config.work_dir, 0o711)
        if self.template is not None and self.template.fork(run_dir, module, secrets) is not None:
            return None
        return processes.spawn(run_dir, secrets)

    def cancel(self, run_id: str) -> None:
        slot = self.slots.get(run_id)
        if slot is None or not slot.live:
            return
        self._stop(slot)
        log.info("run %s: cancel requested", run_id)

    def _stop(self, slot: RunSlot) -> None:
        try:
            (slot.dir / run_dir_files.CANCEL).touch()  # the supervisor looks for it every 100 ms
        except OSError as err:
            log.error("run %s: cannot ask its supervisor to stop: %s", slot.run_id, err)

    def _fail(self, slot: RunSlot, reason: str, error: str) -> None:
        """End a run as failed here: stop its supervisor and get the result to the control plane."""
        if slot.box.finished:
            return
        if reason == "disk_full":
            # A supervisor told to stop records "cancelled"; this marker lets a restarted agentd,
            # which may never have sent the result below, report the run as disk_full again.
            with contextlib.suppress(OSError):
                (slot.dir / run_dir_files.DISK_FULL).touch()
        if self._supervisor_alive(slot):
            self._stop(slot)
        result = {"status": "failed", "exit_code": -1, "reason": reason, "error": error}
        try:
            slot.box.append("finished", end=slot.box.end, **result)
        except OSError as err:
            # Not durable, on purpose: the spool has no room even for this one line, and the control
            # plane must hear now why the run ended rather than fail it as agent_lost minutes later.
            # If agentd stops before the ack, the restarted agentd reports the run again from what is
            # on disk (the supervisor's own exit, or this disk_full once more).
            log.error("run %s: cannot store its result (%s); sending it from memory", slot.run_id, err)
            slot.box.finish_in_memory(**result)
        log.warning("run %s: failed here: %s: %s", slot.run_id, reason, error)
        self.outbox.changed.set()

    def ack(self, run_id: str, seq: int) -> None:
        slot = self.slots.get(run_id)
        if slot is None:
            return
        slot.box.ack(seq)
        if slot.box.delivered:
            self._forget(slot)

    def forget_applied(self, applied: dict[str, int]) -> None:
        for run_id, seq in applied.items():
            slot = self.slots.get(run_id)
            if slot is not None and slot.unreadable and not slot.box.pending and seq < (1 << 61):
                # Its outbox is lost: the result takes the next seq the control plane expects.
                slot.box.last_seq = slot.box.acked = seq
                slot.box.finish_in_memory(
                    status="failed", exit_code=-1, reason="spool_unreadable", error=slot.unreadable
                )
                self.outbox.changed.set()
                continue
            self.ack(run_id, seq)

    def _forget(self, slot: RunSlot) -> None:
        self.slots.pop(slot.run_id, None)
        self.secrets.pop(slot.run_id, None)
        self.outbox.runs.pop(slot.run_id, None)
        if slot.process is not None:
            slot.process.poll()
        if self._supervisor_alive(slot):
            # A result sent from here (disk_full, an unreadable run dir): the supervisor was told to stop
            # and its cancel file must outlive it, so the run dir goes once it has.
            removal = asyncio.create_task(self._remove_when_stopped(slot), name=f"remove-{slot.run_id}")
            self.removals.add(removal)
            removal.add_done_callback(self.removals.discard)
        else:
            shutil.rmtree(slot.dir, ignore_errors=True)

    async def _remove_when_stopped(self, slot: RunSlot) -> None:
        deadline = time.monotonic() + self.config.kill_grace_seconds + 60
        while self._supervisor_alive(slot) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS * 4)
        shutil.rmtree(slot.dir, ignore_errors=True)

    # --- following a run -------------------------------------------------------------------------

    def _supervisor_alive(self, slot: RunSlot) -> bool:
        if slot.process is not None:
            return slot.process.poll() is None
        return processes.alive(slot.dir)

    async def _track(self, slot: RunSlot) -> None:
        try:
            await self._follow(slot)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if is_full(err):
                self._fail(slot, "disk_full", f"the spool is full, the run's output can no longer be stored: {err}")
                return
            log.exception("run %s: following its output failed", slot.run_id)
            self._fail(slot, "agent_error", f"agentd could not follow the run: {err}")

    async def _follow(self, slot: RunSlot) -> None:
        run_id = slot.run_id
        batcher = LogBatcher(
            lambda stream, text, end: self.outbox.append(run_id, "log", end, stream=stream, text=text),
            interval=self.config.batch_interval,
            max_bytes=self.config.batch_bytes,
        )
        offset = slot.box.end
        dead_checks = 0
        while not slot.box.finished:
            read_to, records = read_records(slot.dir / run_dir_files.OUTPUT, offset, run_id)
            now = time.monotonic()
            for end, record in records:
                if "exit" in record:
                    batcher.flush()
                    self.outbox.append(run_id, "finished", end, **self._exit(slot, record["exit"]))
                    self.places.release(slot.slot)
                    return
                batcher.add(record["s"], record["t"], end, now)
            if batcher.due(now):
                batcher.flush()
            if read_to > offset:
                offset, dead_checks = read_to, 0
                continue
            if slot.awaiting_resume:
                await asyncio.sleep(POLL_SECONDS * 4)
                continue
            if not self._supervisor_alive(slot):
                dead_checks += 1
                if dead_checks >= 3:  # re-read twice after it died
                    batcher.flush()
                    if self._supervisor_died(slot, offset):
                        return
                    dead_checks = 0
                    continue
            await asyncio.sleep(POLL_SECONDS)

    def _supervisor_died(self, slot: RunSlot, offset: int) -> bool:
        """A harness run goes on under a new supervisor (its transcript says where it was); any other
        run ends. Answers whether the run ended."""
        if slot.driver == "harness" and self._starts(slot) < MAX_STARTS:
            if slot.run_id in self.secrets:
                self._launch(slot, self.secrets[slot.run_id])
            else:
                slot.awaiting_resume = True  # the control plane sends the secrets again
            return False
        if free_bytes(self.root) < self.config.min_free_spool_bytes:
            self._fail(slot, "disk_full", "the run's supervisor died while the spool was full")
        else:
            self.outbox.append(slot.run_id, "finished", offset, **SUPERVISOR_LOST)
        # its mounts (its own filesystem, a prepared workspace's overlay) go now, not at agentd's next start
        self.places.release_disks({s.run_id for s in self.slots.values() if s.live and s is not slot})
        return True

    def _exit(self, slot: RunSlot, result: dict[str, Any]) -> dict[str, Any]:
        """The result to report from a supervisor's exit record."""
        self.setups.count(result)
        if result.get("status") == "cancelled" and (slot.dir / run_dir_files.DISK_FULL).exists():
            return {
                **result,
                "status": "failed",
                "reason": "disk_full",
                "error": "the spool was full, the run's output could no longer be stored",
            }
        return result

    async def close(self) -> None:
        """Stop following runs (they keep running; a restarted agentd re-attaches)."""
        for slot in self.slots.values():
            if slot.tracker is not None:
                slot.tracker.cancel()
        for removal in self.removals:
            removal.cancel()  # a restarted agentd removes those run dirs once their result is delivered again
        await asyncio.gather(
            *(s.tracker for s in self.slots.values() if s.tracker), *self.removals, return_exceptions=True
        )
        if self.template is not None:
            self.template.close()
        if not self.busy:  # live runs keep their cgroups across a restart
            self.places.close()

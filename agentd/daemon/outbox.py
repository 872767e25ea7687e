"""The on-disk outbox: every message about a run, numbered, kept until the control plane acks it.

RUN_DIR/outbox.jsonl holds one message per line with its seq and the offset of
output.jsonl it covers up to (`end`), so after a restart agentd resumes reading
output exactly where the last stored message ended: nothing lost, nothing sent
twice under two numbers. RUN_DIR/acked holds the highest acked seq.

A full disk (ENOSPC, EDQUOT) never leaves half a message behind: a write that
fails is cut off again and raises SpoolFull, and a restart reads up to the last
whole, well-formed message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pathlib
from typing import Any

from agentd import run_dir as run_dir_files
from agentd.errors import AgentdError, is_full

log = logging.getLogger("agentd.outbox")


class SpoolFull(OSError, AgentdError):
    """The spool's filesystem has no room left (ENOSPC or EDQUOT); nothing was written."""


def free_bytes(path: pathlib.Path) -> int:
    """Free space on the filesystem of `path` (or of its nearest existing parent), for an unprivileged user."""
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        st = os.statvfs(path)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def _read_acked(path: pathlib.Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as err:
        # Sending again what was acked is harmless: the control plane applies each (run, seq) once.
        log.warning("%s is unreadable (%s); every stored message is sent again", path, err)
        return 0


class RunOutbox:
    """The outbox of one run."""

    def __init__(self, run_dir: pathlib.Path, load: bool = True) -> None:
        self.run_dir = run_dir
        self.path = run_dir / run_dir_files.OUTBOX
        self.pending: list[dict[str, Any]] = []
        self.last_seq = 0
        self.end = 0  # output.jsonl offset covered by stored messages
        self.acked = 0
        self.finished = False
        self.size = 0  # bytes of outbox.jsonl that hold whole messages
        self._ack_saved = True
        if load:
            self._load()

    def _load(self) -> None:
        self.acked = _read_acked(self.run_dir / "acked")
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            for raw in f:
                message = self._parse(raw)
                if message is None:
                    # Torn by a crash or a full disk mid-write, or damaged: that message was never sent
                    # whole, and nothing after it can be trusted to follow on without a gap.
                    break
                self.size += len(raw)
                self.last_seq = message["seq"]
                self.end = message.get("end", self.end)
                self.finished = self.finished or message["kind"] == "finished"
                self.pending.append(message)
            stored = os.fstat(f.fileno()).st_size
        self.acked = min(self.acked, self.last_seq)
        self.pending = [m for m in self.pending if m["seq"] > self.acked]
        if stored != self.size:
            log.warning(
                "%s: dropping %d bytes after message %d (torn or damaged)", self.path, stored - self.size, self.last_seq
            )
            try:
                os.truncate(self.path, self.size)
            except OSError as err:  # the next append overwrites them anyway
                log.warning("%s: cannot cut the damaged tail: %s", self.path, err)

    def _parse(self, raw: bytes) -> dict[str, Any] | None:
        if not raw.endswith(b"\n"):
            return None
        try:
            message = json.loads(raw)
        except ValueError:
            return None
        if (
            not isinstance(message, dict)
            or message.get("seq") != self.last_seq + 1
            or not isinstance(message.get("kind"), str)
        ):
            return None
        return message

    def append(self, kind: str, end: int | None = None, **body: Any) -> dict[str, Any]:
        """Store one message and queue it for sending; SpoolFull (and nothing stored) when there is no room."""
        message = {"seq": self.last_seq + 1, "kind": kind, **body}
        if end is not None:
            message["end"] = end
        self._write((json.dumps(message, ensure_ascii=False) + "\n").encode())
        self._queue(message)
        return message

    def finish_in_memory(self, **body: Any) -> dict[str, Any]:
        """Queue a `finished` message that is not stored: for when the spool has no room for it.
        The caller says why that is acceptable; it is lost if agentd stops before it is acked."""
        message = {"seq": self.last_seq + 1, "kind": "finished", "end": self.end, **body}
        self._queue(message)
        return message

    def _queue(self, message: dict[str, Any]) -> None:
        self.last_seq = message["seq"]
        self.end = message.get("end", self.end)
        self.pending.append(message)
        self.finished = self.finished or message["kind"] == "finished"

    def _write(self, data: bytes) -> None:
        """Write one whole line after the stored messages, or nothing: a failed write is cut off
        again, so a later line never lands behind half of this one."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            written = 0
            try:
                while written < len(data):
                    written += os.pwrite(fd, data[written:], self.size + written)
            except OSError as err:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self.size)
                if is_full(err):
                    raise SpoolFull(err.errno, err.strerror, str(self.path)) from err
                raise
            self.size += written
            if os.fstat(fd).st_size > self.size:  # a damaged tail that could not be cut at load
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self.size)
        finally:
            os.close(fd)

    def ack(self, seq: int) -> None:
        if seq <= self.acked:
            return
        self.acked = min(seq, self.last_seq) if seq < (1 << 61) else self.last_seq
        self.pending = [m for m in self.pending if m["seq"] > self.acked]
        tmp = self.run_dir / "acked.tmp"
        try:
            tmp.write_text(str(self.acked))
            os.replace(tmp, self.run_dir / "acked")
            self._ack_saved = True
        except OSError as err:
            # The ack is kept in memory, which is all a running agentd needs. After a restart the
            # messages it covered are sent again and the control plane, which applies each
            # (run, seq) once, acks them again: nothing is lost or applied twice.
            with contextlib.suppress(OSError):
                tmp.unlink()
            if self._ack_saved:
                log.warning("%s: cannot store the ack of message %d: %s", self.run_dir.name, self.acked, err)
            self._ack_saved = False

    @property
    def delivered(self) -> bool:
        """The result reached the control plane: the run dir may go."""
        return self.finished and not self.pending


class Outbox:
    """Every run's outbox, and a signal for the sender when something is appended."""

    def __init__(self) -> None:
        self.runs: dict[str, RunOutbox] = {}
        self.changed = asyncio.Event()

    def add(self, run_id: str, box: RunOutbox) -> None:
        self.runs[run_id] = box
        self.changed.set()

    def append(self, run_id: str, kind: str, end: int | None = None, **body: Any) -> None:
        self.runs[run_id].append(kind, end, **body)
        self.changed.set()

"""RUN_DIR/output.jsonl: everything a run says, one JSON record per line ({"s": stream, "t": text}, and
last {"exit": ...}), written by the run's supervisor and read by agentd, which is all the two share."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
from typing import Any

from agentd.daemon.logbatch import RECORD_BYTES
from agentd.errors import is_full

RESULT_TEXT_BYTES = 4096
"""A session's final message is kept up to this many bytes of UTF-8 (the rest is dropped)."""

log = logging.getLogger("agentd.output")


class Output:
    """output.jsonl: one JSON record per line, written whole or not at all, secrets redacted.

    When the disk is full (ENOSPC, EDQUOT) the torn record is cut off again, later output is
    dropped, `full` is set (the supervisors stop the run) and the exit record says disk_full."""

    def __init__(self, path: pathlib.Path, secrets: list[str], limit: int) -> None:
        self._path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = _whole_records(path, self._fd)
        self._secrets = sorted((s for s in secrets if len(s) >= 4), key=len, reverse=True)
        self._limit = limit
        self._written = 0
        self._dropped = False
        self.full = False

    def hide(self, secret: str) -> None:
        """Redact `secret` from everything written from now on (a run token made by the supervisor)."""
        if len(secret) >= 4:
            self._secrets = sorted({*self._secrets, secret}, key=len, reverse=True)

    def write(self, stream: str, text: str) -> None:
        if not text or self.full:
            return
        for secret in self._secrets:
            text = text.replace(secret, "***")
        whole = data = text.encode()
        if stream in ("stdout", "stderr") or self._written >= self._limit:
            # A command's output is kept up to the limit and no further (whole characters); an event
            # or a tool record (harness) is kept whole when it starts below the limit.
            data = whole[: max(self._limit - self._written, 0)].decode(errors="ignore").encode()
        self._written += len(data)
        cut = len(data) < len(whole)
        while data and not self.full:  # records stay small so a batch of output never splits one
            piece, data = data[:RECORD_BYTES], data[RECORD_BYTES:]
            while data and piece and (data[0] & 0xC0) == 0x80:  # keep UTF-8 characters whole
                data, piece = piece[-1:] + data, piece[:-1]
            self._record({"s": stream, "t": piece.decode()})
        if cut and not self._dropped:
            self._dropped = True
            self._record({"s": "system", "t": f"agentd: output over {self._limit} bytes is not recorded\n"})

    def exit(self, status: str, exit_code: int, reason: str, error: str = "", **extra: Any) -> None:
        if self.full:  # whatever the run did, its output is incomplete
            status, reason = "failed", "disk_full"
            error = "the spool is full: the run's output could not be stored"
        for secret in self._secrets:
            error = error.replace(secret, "***")
        if isinstance(extra.get("result"), dict):  # the session's final message: Task-written, bounded
            text = str(extra["result"].get("text", ""))
            for secret in self._secrets:
                text = text.replace(secret, "***")
            extra["result"] = {**extra["result"], "text": _bounded(text)}
        self._record({"exit": {"status": status, "exit_code": exit_code, "reason": reason, "error": error, **extra}})
        os.close(self._fd)

    def _record(self, record: dict[str, Any]) -> None:
        data = (json.dumps(record, ensure_ascii=False) + "\n").encode()
        fd = self._fd
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError as err:
            if not is_full(err):
                raise
            self.full = True
            with contextlib.suppress(OSError):  # agentd reads whole lines only: a cut-off record was never seen
                os.ftruncate(fd, self._size)
            return
        self._size += written


def _whole_records(path: pathlib.Path, fd: int) -> int:
    """Cut off a record torn by a crash, which a resumed supervisor would append to; answers the size."""
    size = os.fstat(fd).st_size
    with open(path, "rb") as f:
        f.seek(max(size - RECORD_BYTES * 8, 0))  # a record is at most RECORD_BYTES of text, escaped
        tail = f.read()
    if tail and not tail.endswith(b"\n") and (b"\n" in tail or len(tail) == size):
        size -= len(tail) - tail.rfind(b"\n") - 1
        os.ftruncate(fd, size)
    return size


def read_records(path: pathlib.Path, offset: int, run_id: str) -> tuple[int, list[tuple[int, dict[str, Any]]]]:
    """The whole records of output.jsonl after `offset`, each with the offset it ends at, and the offset
    read to. A torn last record (the supervisor cuts it off when the disk is full) is read again next time;
    a damaged one (torn by a crash, with the next one written after it) is skipped."""
    if not path.exists():
        return offset, []
    with open(path, "rb") as f:
        f.seek(offset)
        *lines, _ = f.read(1 << 20).split(b"\n")
    records = []
    for line in lines:
        offset += len(line) + 1
        try:
            records.append((offset, json.loads(line)))
        except ValueError:
            log.warning("run %s: skipping a damaged output record before offset %d", run_id, offset)
    return offset, records


def _bounded(text: str) -> str:
    """`text` cut to RESULT_TEXT_BYTES of UTF-8, never inside a character."""
    return text.encode()[:RESULT_TEXT_BYTES].decode(errors="ignore")

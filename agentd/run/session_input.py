"""RUN_DIR/inputs.jsonl: the input people sent to a run's session, one JSON record a line
({"seq", "kind", "text", "id"}), written by agentd (each seq once, in order, fsynced before it is
reported received) and read by the run's supervisor, which applies each seq once and records how far
it got in RUN_DIR/inputs.applied."""

from __future__ import annotations

import json
import logging
import os
import pathlib
from typing import Any

from agentd.daemon.outbox import RunOutbox

log = logging.getLogger("agentd.runs")

FILE = "inputs.jsonl"
APPLIED = "inputs.applied"


def read(path: pathlib.Path) -> list[dict[str, Any]]:
    """The whole records in order (a torn last line, from a crash mid-write, is not one)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    records: list[dict[str, Any]] = []
    for line in raw.split(b"\n")[:-1]:
        try:
            record = json.loads(line)
        except ValueError:
            break
        if not isinstance(record, dict) or record.get("seq") != len(records) + 1:
            break
        records.append(record)
    return records


def stored_through(path: pathlib.Path) -> int:
    return len(read(path))


def store(path: pathlib.Path, seq: int, kind: str, text: str, input_id: str, question_id: str = "") -> None:
    record = {"seq": seq, "kind": kind, "text": text, "id": input_id}
    if question_id:
        record["question_id"] = question_id
    line = json.dumps(record, ensure_ascii=False) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.ftruncate(fd, _whole_size(path))  # a torn line from a crash goes before the next is written
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _whole_size(path: pathlib.Path) -> int:
    raw = path.read_bytes() if path.exists() else b""
    end = 0
    for count, line in enumerate(raw.split(b"\n")[:-1], start=1):
        try:
            record = json.loads(line)
        except ValueError:
            break
        if not isinstance(record, dict) or record.get("seq") != count:
            break
        end += len(line) + 1
    return end


def applied_through(run_dir: pathlib.Path) -> int:
    try:
        return int((run_dir / APPLIED).read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def mark_applied(run_dir: pathlib.Path, seq: int) -> None:
    tmp = run_dir / (APPLIED + ".tmp")
    tmp.write_text(str(seq))
    os.replace(tmp, run_dir / APPLIED)


def deliver(run_dir: pathlib.Path, box: RunOutbox, given: Any) -> None:
    """Keep a person's input (a drover.v1.SessionInput) on disk for the run's supervisor, each input_seq
    once and in order, and report it received through the run's outbox."""
    path = run_dir / FILE
    if given.input_seq != stored_through(path) + 1:
        return  # had (and reported) already, or out of order: the next reconnect sends it again
    try:
        store(path, given.input_seq, given.kind, given.text, given.input_id, given.question_id)
        box.append("input_received", input_seq=given.input_seq)
    except OSError as err:
        log.error("run %s: cannot keep input %d: %s", run_dir.name, given.input_seq, err)
        return
    log.info("run %s: input %d (%s) received", run_dir.name, given.input_seq, given.kind)

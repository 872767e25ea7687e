"""RUN_DIR/inputs.jsonl: the input people sent to a run's session, one JSON record a line
({"seq", "kind", "text", "id"}), written by agentd (each seq once, in order, fsynced before it is
reported received) and read by the run's supervisor, which applies each seq once and records how far
it got in RUN_DIR/inputs.applied."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any

from agentd import run_dir as run_dir_files

FILE = run_dir_files.INPUTS
APPLIED = run_dir_files.INPUTS_APPLIED


@dataclasses.dataclass(frozen=True)
class Input:
    """A person's input to a running session: a message waits for the end of the turn; an interrupt
    stops the turn at once, then its text (if any) is the next message; an answer to a question; park
    (the control plane says: held too long, park the session)."""

    kind: str  # message | interrupt | answer | park
    text: str = ""
    id: str = ""
    seq: int = 0
    question_id: str = ""


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


def inputs(run_dir: pathlib.Path, after: int) -> list[Input]:
    """The inputs stored after seq `after`, in order."""
    return [
        Input(
            str(record["kind"]),
            str(record.get("text") or ""),
            str(record.get("id", "")),
            int(record["seq"]),
            str(record.get("question_id", "")),
        )
        for record in read(run_dir / FILE)[after:]
    ]

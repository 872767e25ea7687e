"""The on-disk outbox: every message about a run, numbered, kept until the control plane acks it.

RUN_DIR/outbox.jsonl holds one message per line with its seq and the offset of
output.jsonl it covers up to (`end`), so after a restart agentd resumes reading
output exactly where the last stored message ended: nothing lost, nothing sent
twice under two numbers. RUN_DIR/acked holds the highest acked seq.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
from typing import Any


class RunOutbox:
    """The outbox of one run."""

    def __init__(self, run_dir: pathlib.Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / "outbox.jsonl"
        self.pending: list[dict[str, Any]] = []
        self.last_seq = 0
        self.end = 0          # output.jsonl offset covered by stored messages
        self.acked = 0
        self.finished = False
        self._load()

    def _load(self) -> None:
        acked = self.run_dir / "acked"
        if acked.exists():
            self.acked = int(acked.read_text().strip() or 0)
        if not self.path.exists():
            return
        good = 0
        with open(self.path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # torn by a crash mid-write: that message was never sent
                message = json.loads(raw)
                good += len(raw)
                self.last_seq = message["seq"]
                self.end = message.get("end", self.end)
                self.finished = self.finished or message["kind"] == "finished"
                if message["seq"] > self.acked:
                    self.pending.append(message)
        if good != self.path.stat().st_size:
            with open(self.path, "r+b") as f:
                f.truncate(good)

    def append(self, kind: str, end: int | None = None, **body: Any) -> dict[str, Any]:
        self.last_seq += 1
        message = {"seq": self.last_seq, "kind": kind, **body}
        if end is not None:
            self.end = message["end"] = end
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(message, ensure_ascii=False) + "\n")
        self.pending.append(message)
        self.finished = self.finished or kind == "finished"
        return message

    def ack(self, seq: int) -> None:
        if seq <= self.acked:
            return
        self.acked = min(seq, self.last_seq) if seq < (1 << 61) else self.last_seq
        self.pending = [m for m in self.pending if m["seq"] > self.acked]
        tmp = self.run_dir / "acked.tmp"
        tmp.write_text(str(self.acked))
        os.replace(tmp, self.run_dir / "acked")

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

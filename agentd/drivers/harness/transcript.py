"""The durable transcript of a harness run: RUN_DIR/transcript.jsonl, appended as things happen.

It is the run's source of truth. After a restart the conversation is rebuilt from
it: committed model replies are kept, a tool call that finished keeps its result,
a tool call that started but did not finish is reported to the model as
interrupted (never run again), and a model call in flight is simply asked again.
Entries (one JSON object per line, in order):
  {"kind": "prompt", "text"}                      the opening user message
  {"kind": "reply", "call", "content", "usage"}   a model reply (a committed step)
  {"kind": "partial", "call", "text", "reason"}   the text of a reply whose stream broke off (stall, attempt
                                                  ceiling, dropped connection) and was never completed, ending
                                                  `[response interrupted]`; kept for people, never sent to the model
  {"kind": "tool_started", "id", "name", "input"}
  {"kind": "tool_done", "id", "name", "text", "error"}
  {"kind": "fold", "summary", "through"}          replies up to index `through` are summarised; a fold the
                                                  provider's context-limit rejection forced also has
                                                  "reactive": true
  {"kind": "user", "text", "input_seq"}           a person's message, sent with the next request
  {"kind": "interrupted", "text", "input_seq"}    a person stopped the step under way
  {"kind": "question", "id", "text", "blocking"}  the run asked people (a blocking one holds it)
  {"kind": "answered", "id"}                      its answer came (and goes to the model as a message)
  {"kind": "outcome", "outcome", "reason", "intent"} and "code" when the run's reason is not the outcome
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import posixpath
from typing import Any

RESPONSE_INTERRUPTED = "[response interrupted]"
"""How a partial reply ends in the transcript: the model was cut off, this is not what it finished saying."""

INTERRUPTED = (
    "interrupted: this tool call was under way when the agent restarted, so it was not run "
    "again and its effects are unknown; check the workspace before you go on"
)

WRITES = ("write_file", "edit_file")


@dataclasses.dataclass
class Exchange:
    """One model reply and the results of the tool calls it asked for."""

    reply: dict[str, Any]
    results: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # tool_use id -> tool_done
    started: set[str] = dataclasses.field(default_factory=set)
    said: list[str] = dataclasses.field(default_factory=list)  # people's messages after the reply

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.reply["content"] if b.get("type") == "tool_use"]


class Transcript:
    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.entries: list[dict[str, Any]] = []
        if path.exists():
            with open(path, "rb") as f:
                for raw in f:
                    if raw.endswith(b"\n"):
                        self.entries.append(json.loads(raw))
            self._truncate_torn_tail()

    def _truncate_torn_tail(self) -> None:
        good = sum(len((json.dumps(e, ensure_ascii=False) + "\n").encode()) for e in self.entries)
        if self.path.stat().st_size > good:
            # rewrite what was whole: a crash mid-append leaves half a line
            self._rewrite()

    def _rewrite(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for entry in self.entries:
                f.write(json.dumps(entry, ensure_ascii=False) + "\n")
        os.replace(tmp, self.path)

    def append(self, kind: str, **fields: Any) -> int:
        """Write one entry durably; answers its index (the step number of its event)."""
        entry = {"kind": kind, **fields}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.entries.append(entry)
        return len(self.entries) - 1

    # --- reading it back -------------------------------------------------------------------------

    @property
    def prompt(self) -> str:
        return next((e["text"] for e in self.entries if e["kind"] == "prompt"), "")

    @property
    def outcome(self) -> dict[str, Any] | None:
        return next((e for e in self.entries if e["kind"] == "outcome"), None)

    @property
    def inputs_applied(self) -> int:
        """The last input seq the run took (a message delivered, an interrupt acted on)."""
        return max(
            (int(e.get("input_seq", 0)) for e in self.entries if e["kind"] in ("user", "interrupted")), default=0
        )

    @property
    def open_questions(self) -> dict[str, str]:
        """Blocking questions asked and not answered yet: id -> text."""
        found: dict[str, str] = {}
        for entry in self.entries:
            if entry["kind"] == "question" and entry.get("blocking"):
                found[entry["id"]] = entry["text"]
            elif entry["kind"] == "answered":
                found.pop(entry["id"], None)
        return found

    @property
    def opening_said(self) -> list[str]:
        """People's messages that arrived before the first reply."""
        said = []
        for entry in self.entries:
            if entry["kind"] == "reply":
                break
            if entry["kind"] == "user":
                said.append(entry["text"])
        return said

    @property
    def written(self) -> set[str]:
        """Paths (relative to the workspace root) that write_file or edit_file wrote: a ChangeSet
        keeps them even where they look like build outputs."""
        asked = {e["id"]: e["input"] for e in self.entries if e["kind"] == "tool_started" and e["name"] in WRITES}
        return {
            posixpath.normpath(str(asked[e["id"]].get("path", "")))
            for e in self.entries
            if e["kind"] == "tool_done" and e["id"] in asked and not e.get("error")
        }

    @property
    def model_calls(self) -> int:
        return sum(1 for e in self.entries if e["kind"] == "reply")

    def exchanges(self) -> list[Exchange]:
        out: list[Exchange] = []
        for entry in self.entries:
            if entry["kind"] == "reply":
                out.append(Exchange(entry))
            elif entry["kind"] == "tool_started" and out:
                out[-1].started.add(entry["id"])
            elif entry["kind"] == "tool_done" and out:
                out[-1].results[entry["id"]] = entry
            elif entry["kind"] == "user" and out:
                out[-1].said.append(entry["text"])
        return out

    def last_said(self) -> str:
        """The text of the model's last reply (the session's final message when no tool ended it)."""
        for exchange in reversed(self.exchanges()):
            said = [b.get("text", "") for b in exchange.reply.get("content", []) if b.get("type") == "text"]
            if any(said):
                return "\n".join(filter(None, said))
        return ""

    @property
    def compactions(self) -> int:
        """Folds so far, proactive and reactive."""
        return sum(1 for e in self.entries if e["kind"] == "fold")

    def latest_fold(self) -> dict[str, Any] | None:
        folds = [e for e in self.entries if e["kind"] == "fold"]
        return folds[-1] if folds else None


def tool_result_block(tool_use_id: str, text: str, error: bool) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": text, "is_error": error}


def messages(transcript: Transcript, exchanges: list[Exchange] | None = None) -> list[dict[str, Any]]:
    """The conversation to send: the opening message (with the running summary after a fold), then
    each exchange as an assistant message and a user message of tool results."""
    exchanges = transcript.exchanges() if exchanges is None else exchanges
    fold = transcript.latest_fold()
    opening: list[dict[str, Any]] = [{"type": "text", "text": transcript.prompt}]
    opening += [said_block(text) for text in transcript.opening_said]
    if fold is not None:
        opening.append(
            {"type": "text", "text": "Summary of your work so far (older turns were folded):\n" + fold["summary"]}
        )
        exchanges = exchanges[fold["through"] + 1 :]
    out: list[dict[str, Any]] = [{"role": "user", "content": opening}]
    for ex in exchanges:
        out.append({"role": "assistant", "content": ex.reply["content"]})
        results = [
            tool_result_block(use["id"], ex.results[use["id"]]["text"], ex.results[use["id"]]["error"])
            for use in ex.tool_uses
            if use["id"] in ex.results
        ]
        results += [said_block(text) for text in ex.said]
        if results:
            out.append({"role": "user", "content": results})
    return out


def said_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": f"A person working with you says:\n{text}"}

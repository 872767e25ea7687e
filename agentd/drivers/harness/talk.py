"""What a run's supervisor does for the people behind it (agentd/drivers/harness/supervisor.py and the runtimes'):
input handed to the session once, questions asked and held open, a held session parked and resumed."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import pathlib
from typing import Any

from agentd.drivers.harness.gate import Gate
from agentd.drivers.harness.loop import RunEnded, as_json_line
from agentd.drivers.harness.transcript import Transcript
from agentd.drivers.runtimes import Input
from agentd.run import session_input
from agentd.run.output import Output
from drover.core import build_outputs, gitspace

PARKED = "WIP: parked while waiting for answers"
MAX_STATE = 3 << 20
"""A parked session's state (gzip) is kept up to this size, else not at all."""


class Talk:
    """A mixin of HarnessRun: the state it reads is set up by HarnessRun.__init__."""

    spec: dict[str, Any]
    run_dir: pathlib.Path
    transcript: Transcript
    output: Output
    inputs: asyncio.Queue[Input]
    open_questions: dict[str, str]
    asked: int
    park_requested: bool
    incarnation: int
    hidden: list[str]
    workspace: gitspace.Workspace | None

    async def commit_workspace(self, message: str) -> gitspace.ChangeSetResult:
        """Commit and push the workspace on the Task's branch, build outputs left out (the project's
        patterns, else the default ones) unless a write tool wrote them."""
        assert self.workspace is not None
        return await asyncio.to_thread(
            self.workspace.publish,
            self.spec["change_id"],
            self.spec["task_id"],
            message,
            self.build_outputs,
            self.written(),
        )

    def written(self) -> set[str]:
        """Paths a write tool asked for (relative to the root): a ChangeSet keeps them whatever they look like."""
        return self.transcript.written

    @property
    def build_outputs(self) -> list[str]:
        """The patterns of files a ChangeSet leaves out: the project's, else the default ones."""
        return list(self.spec.get("harness", {}).get("build_outputs") or build_outputs.DEFAULT_BUILD_OUTPUTS)

    def resume_state(self) -> bytes:
        """A parked session's state (gunzipped) when this run resumes one, else b""."""
        packed = self.spec.get("harness", {}).get("resume_state") or ""
        try:
            return gzip.decompress(base64.b64decode(packed)) if packed else b""
        except (ValueError, OSError):
            return b""

    def _restore_transcript(self, path: pathlib.Path) -> bool:
        """A harness run that resumes a parked one starts from its transcript (once: a restart finds it)."""
        if self.spec.get("driver") != "harness" or path.exists():
            return False
        state = self.resume_state()
        if not state:
            return False
        path.write_bytes(state)
        return True

    def held(self) -> bool:
        """A session with an open blocking question waits after its turn instead of ending."""
        return bool(self.open_questions)

    async def ask_question(self, gate: Gate, text: str, blocking: bool) -> str:
        """Ask people through the control plane; the session is held until a blocking one is answered."""
        self.asked += 1
        question_id = await gate.ask(f"q{self.incarnation}-{self.asked}", text, blocking)
        self.transcript.append("question", id=question_id, text=text, blocking=blocking)
        if blocking:
            self.open_questions[question_id] = text
        self.output.write(
            "event", as_json_line({"kind": "question", "id": question_id, "text": text, "blocking": blocking})
        )
        return question_id

    async def feed_inputs(self, applied: int) -> None:
        """Hand each input agentd stored (RUN_DIR/inputs.jsonl) after seq `applied` to the run once, in order."""
        path = self.run_dir / session_input.FILE
        while True:
            for record in session_input.read(path)[applied:]:
                applied = int(record["seq"])
                kind, text = str(record["kind"]), str(record.get("text") or "")
                if kind == "park":
                    self.park_requested = True
                    session_input.mark_applied(self.run_dir, applied)
                    continue
                if kind == "answer":  # delivered as a message; the question no longer holds the session
                    question_id = str(record.get("question_id", ""))
                    asked = self.open_questions.pop(question_id, "")
                    if asked:
                        self.transcript.append("answered", id=question_id)
                    kind, text = "message", (f"Answer to your question ({asked}):\n" if asked else "Answer:\n") + text
                self.inputs.put_nowait(Input(kind, text, str(record["id"]), applied))
                session_input.mark_applied(self.run_dir, applied)
            await asyncio.sleep(0.1)

    async def park(self, ended: RunEnded, session_id: str, state: bytes | None) -> RunEnded:
        """Commit the workspace as WIP on the Task's branch (no ChangeSet) and keep the session's state
        (secrets redacted, gzip, at most 3 MiB) for the run that resumes it."""
        parked: dict[str, Any] = {"session_id": session_id}
        if self.workspace is not None:
            result = await self.commit_workspace(PARKED)
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

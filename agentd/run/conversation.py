"""The people behind a model-driven run (the harness's and the runtimes'): input handed to the session
once and in order, questions asked through the control plane and held open until answered, and the
control plane's word to park a session held too long."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

from agentd.run.control_plane import ControlPlane
from agentd.run.output import Output
from agentd.run.session_input import Input


class QuestionLog(Protocol):
    """Where questions are kept (the run's transcript): a restarted supervisor is still held."""

    @property
    def open_questions(self) -> dict[str, str]: ...

    def append(self, kind: str, **fields: Any) -> int: ...


class Conversation:
    def __init__(self, control_plane: ControlPlane, log: QuestionLog, output: Output, incarnation: int) -> None:
        self.control_plane, self.log, self.output, self.incarnation = control_plane, log, output, incarnation
        self.inputs: asyncio.Queue[Input] = asyncio.Queue()
        self.open_questions: dict[str, str] = log.open_questions
        """Blocking questions not answered yet: id -> text."""
        self.asked = 0
        self.park_requested = False
        """The control plane said: held too long, park."""

    def held(self) -> bool:
        """A session with an open blocking question waits after its turn instead of ending."""
        return bool(self.open_questions)

    async def ask(self, text: str, blocking: bool) -> str:
        """Ask people through the control plane; the session is held until a blocking one is answered."""
        self.asked += 1
        question_id = await self.control_plane.ask(f"q{self.incarnation}-{self.asked}", text, blocking)
        self.log.append("question", id=question_id, text=text, blocking=blocking)
        if blocking:
            self.open_questions[question_id] = text
        event = {"kind": "question", "id": question_id, "text": text, "blocking": blocking}
        self.output.write("event", json.dumps(event, ensure_ascii=False) + "\n")
        return question_id

    async def feed(self, applied: int) -> None:
        """Hand each input after seq `applied` to the session once, in order (forever: cancel it)."""
        while True:
            for given in self.control_plane.inputs(applied):
                applied = given.seq
                if given.kind == "park":
                    self.park_requested = True
                elif given.kind == "answer":  # delivered as a message; the question no longer holds the session
                    asked = self.open_questions.pop(given.question_id, "")
                    if asked:
                        self.log.append("answered", id=given.question_id)
                    prefix = f"Answer to your question ({asked}):\n" if asked else "Answer:\n"
                    self.inputs.put_nowait(Input("message", prefix + given.text, given.id, applied))
                else:
                    self.inputs.put_nowait(Input(given.kind, given.text, given.id, applied))
                self.control_plane.applied(applied)
            await asyncio.sleep(0.1)

"""The Task tools (seed 000): what the model may do, and the text it gets back.

Only implement, migrate and test Tasks have a writable workspace; other kinds read
the canonical commit, and a project without a repository has only complete_task
and fail_task. Every result ends by telling the model how many calls remain."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agentd.drivers.harness import edits, paths
from agentd.errors import AgentdError, SandboxFailed
from agentd.run.confined import Confined, ready_pipe
from agentd.run.sandbox import Bind, Sandbox
from agentd.run.spawn import start as sandboxed
from drover.core import allowlist, filewindow
from drover.core.tool_specs import (
    COMMAND_OUTPUT,
    COMMAND_SECONDS,
    DEFINITIONS,
    MAX_READS,
    TERMINAL,
)

NO_WORKSPACE = "This Task has no workspace"


class Finished(AgentdError):
    """complete_task or fail_task ended the run."""

    def __init__(self, outcome: str, reason: str, intent: dict[str, Any]) -> None:
        super().__init__(f"{outcome}: {reason}")
        self.outcome, self.reason, self.intent = outcome, reason, intent


ASK = "ask_question"
ASK_DEFINITION: dict[str, Any] = {
    "description": "Ask the people behind this Change a question you cannot answer from the repository. "
    "With blocking true (the default) the run waits for the answer once you end your turn without a tool call.",
    "input_schema": {
        "type": "object",
        "properties": {"question": {"type": "string"}, "blocking": {"type": "boolean"}},
        "required": ["question"],
    },
}


@dataclasses.dataclass(frozen=True)
class ToolResult:
    text: str
    error: bool = False


class TaskTools:
    """The tools of one run. `root` is the workspace (or the canonical checkout when read-only);
    `shown` are what commands see read-write (`root` and its home; default `root`), `binds` what
    they see besides (the git directory, read-only at root/.git); `owner` (uid, gid) is the session
    user, given every file and directory the tools make so the commands, which run as it, can
    change them."""

    def __init__(
        self,
        root: pathlib.Path | None,
        writable: bool,
        policy: allowlist.CommandPolicy,
        sandbox: Sandbox | None,
        env: dict[str, str],
        calls_left: Callable[[], int],
        *,
        shown: Sequence[pathlib.Path] | None = None,
        binds: Sequence[Bind] = (),
        owner: tuple[int, int] | None = None,
        ask: Callable[[str, bool], Awaitable[str]] | None = None,
    ) -> None:
        self.root, self.writable, self.policy, self.sandbox = root, writable, policy, sandbox
        self.env, self.calls_left = env, calls_left
        self.shown = list(shown) if shown else ([root] if root is not None else [])
        self.binds, self.owner = list(binds), owner
        self.ask = ask  # asks people through the control plane; answers the question's id
        self.reads = 0

    def names(self) -> list[str]:
        names = list(TERMINAL) if self.root is None else list(DEFINITIONS)
        return [*names, ASK] if self.ask is not None else names

    def definitions(self) -> list[dict[str, Any]]:
        return [{"name": name, **(ASK_DEFINITION if name == ASK else DEFINITIONS[name])} for name in self.names()]

    async def _ask_question(self, args: dict[str, Any]) -> ToolResult:
        assert self.ask is not None
        question = str(args.get("question") or "").strip()
        if not question:
            return ToolResult("ask_question needs a question", True)
        blocking = bool(args.get("blocking", True))
        question_id = await self.ask(question, blocking)
        if blocking:
            return ToolResult(
                f"Question {question_id} was sent. Do what you can without the answer; when you have nothing "
                "more to do, end your turn without calling a tool: the run waits, and the answer arrives as the "
                "next message."
            )
        return ToolResult(f"Question {question_id} was sent; an answer, if any, arrives as a later message.")

    async def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        """Run one tool. complete_task and fail_task raise Finished; others answer a result."""
        if name not in self.names():
            result = ToolResult(f"unknown tool {name!r}; the tools are {', '.join(self.names())}", True)
        else:
            try:
                result = await getattr(self, f"_{name}")(args)
            except (paths.PathEscape, edits.EditError, allowlist.CommandRefused, ValueError, OSError) as err:
                result = ToolResult(str(err), True)
            except KeyError as err:
                result = ToolResult(f"missing argument {err}", True)
            except (TypeError, AttributeError) as err:  # arguments of the wrong type: the API does not check them
                result = ToolResult(f"bad arguments for {name}: {err}", True)
        left = self.calls_left()
        return ToolResult(f"{result.text}\n[{left} model call{' remains' if left == 1 else 's remain'}]", result.error)

    # --- reading -----------------------------------------------------------------------------------

    async def _list_files(self, args: dict[str, Any]) -> ToolResult:
        assert self.root is not None
        return ToolResult("\n".join(paths.list_tree(self.root)) or "(the repository is empty)")

    async def _read_file(self, args: dict[str, Any]) -> ToolResult:
        assert self.root is not None
        if self.reads >= MAX_READS:
            return ToolResult(f"read limit reached: at most {MAX_READS} reads per run", True)
        path = paths.resolve_inside(self.root, args["path"])
        if not path.is_file():
            return ToolResult(f"no file {args['path']!r}", True)
        self.reads += 1
        return ToolResult(filewindow.file_window(path.read_text(errors="replace"), int(args.get("from_line") or 1)))

    # --- writing -----------------------------------------------------------------------------------

    def _writable(self, relative: str) -> pathlib.Path:
        if not self.writable or self.root is None:
            raise ValueError(NO_WORKSPACE)
        return paths.resolve_inside(self.root, relative)

    def _make_dirs(self, directory: pathlib.Path) -> None:
        missing = [d for d in (directory, *directory.parents) if not d.exists()]
        for made in reversed(missing):
            made.mkdir(exist_ok=True)
            self._give(made)

    def _give(self, path: pathlib.Path) -> None:
        if self.owner is not None:
            os.lchown(path, *self.owner)

    async def _write_file(self, args: dict[str, Any]) -> ToolResult:
        path = self._writable(args["path"])
        self._make_dirs(path.parent)
        path.write_text(args["content"])
        self._give(path)
        return ToolResult(f"wrote {args['path']} ({len(args['content'])} characters)")

    async def _edit_file(self, args: dict[str, Any]) -> ToolResult:
        path = self._writable(args["path"])
        if not path.is_file():
            return ToolResult(f"no file {args['path']!r}", True)
        changes = [edits.Edit(e["old_text"], e["new_text"]) for e in args["edits"]]
        path.write_text(edits.apply_edits(path.read_text(), changes))
        self._give(path)
        return ToolResult(f"edited {args['path']} ({len(changes)} edit{'s' if len(changes) != 1 else ''})")

    async def _delete_file(self, args: dict[str, Any]) -> ToolResult:
        path = self._writable(args["path"])
        if not path.is_file():
            return ToolResult(f"no file {args['path']!r}", True)
        path.unlink()
        return ToolResult(f"deleted {args['path']}")

    async def _run_command(self, args: dict[str, Any]) -> ToolResult:
        if not self.writable or self.root is None or self.sandbox is None:
            raise ValueError(NO_WORKSPACE)
        argv = allowlist.parse_command(args["command"])
        allowlist.check_command(argv, self.policy)
        read, write = ready_pipe() if self.sandbox.isolated else (None, None)
        try:
            proc = await sandboxed(
                self.sandbox,
                argv,
                self.root,
                dict(self.env),
                writable=self.shown,
                binds=self.binds,
                ready_fd=write,
                stderr=asyncio.subprocess.STDOUT,
            )
        except BaseException:
            if read is not None:
                os.close(read)
            raise
        finally:
            if write is not None:
                os.close(write)
        processes = Confined(proc.pid, read, lambda: proc.returncode is not None)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), COMMAND_SECONDS)
        except TimeoutError:
            processes.kill()
            await proc.wait()
            return ToolResult(f"the command ran past {COMMAND_SECONDS:.0f} s and was stopped", True)
        except asyncio.CancelledError:
            processes.kill()  # the run was cancelled while the command ran
            raise
        finally:
            started = processes.started
            processes.kill()
            processes.close()
        text = out.decode(errors="replace")
        if not started:  # bwrap said why on the output; the run must not go on unsandboxed or blind
            raise SandboxFailed(f"the sandbox did not start: {text.strip()[-500:] or proc.returncode}")
        if len(text) > COMMAND_OUTPUT:
            text = (
                f"[output cut: the first {len(text) - COMMAND_OUTPUT:,} characters are not shown]\n"
                + text[-COMMAND_OUTPUT:]
            )
        return ToolResult(f"exit code {proc.returncode}\n{text}", proc.returncode != 0)

    # --- ending ------------------------------------------------------------------------------------

    async def _complete_task(self, args: dict[str, Any]) -> ToolResult:
        summary = str(args.get("summary", ""))
        intent = {
            "summary": summary,
            "files_changed": _strings(args.get("files_changed")),
            "tests_run": _strings(args.get("tests_run")),
            "follow_ups": _strings(args.get("follow_ups")),
        }
        raise Finished("completed", summary, intent)

    async def _fail_task(self, args: dict[str, Any]) -> ToolResult:
        raise Finished("failed", str(args.get("reason", "")), {})


def _strings(value: Any) -> list[str]:
    """A list of strings from what the model sent (a lone string is one item, not its characters)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]

"""docs/architecture.md stays true: its picture of the layers names every part tests/test_architecture.py
checks, and its "A run's walk" names, step by step, modules and functions that exist and call each other in
the order shown.

When code moves, update WALK (and CALLS) below and the diagram together: the test says which line is wrong.
The run side of agentd (agentd/run/, agentd/drivers/) is the part most likely to be renamed.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re

import pytest

from tests.conftest import ROOT

WALK: list[tuple[str, str, tuple[str, ...]]] = [
    # (step, module path, the names the diagram shows on that line: `Class.method` or a module-level name)
    ("submit", "controlplane/api/change_service.py", ("ChangeService.SubmitChange",)),
    ("submit", "controlplane/services/change_lifecycle.py", ("submit_change",)),
    ("route", "controlplane/dispatch/dispatcher.py", ("Dispatcher.run_forever",)),
    ("route", "controlplane/dispatch/router.py", ("Router.route_pending", "Router.route")),
    ("packet", "controlplane/dispatch/packet_pipeline.py", ("prepare", "compile_for")),
    ("packet", "controlplane/domain/packet.py", ("compile_packet",)),
    ("assignment", "controlplane/dispatch/dispatcher.py", ("Dispatcher.dispatch_once", "assign_queued", "_assign_one")),
    ("assignment", "controlplane/services/run_lifecycle.py", ("assign",)),
    ("assignment", "controlplane/dispatch/assignments.py", ("build",)),
    ("assignment", "controlplane/api/agent_stream.py", ("AgentSessions.send",)),
    ("agentd", "agentd/daemon/daemon.py", ("Agent._assign",)),
    ("agentd", "agentd/daemon/runs.py", ("Runs.start", "Runs._launch", "Runs._spawn")),
    ("supervisor", "agentd/run/supervisor.py", ("serve", "Run.supervise", "Run._drive")),
    ("sandbox", "agentd/run/supervisor.py", ("Run.sandbox", "sandbox_for")),
    ("sandbox", "agentd/run/sandbox.py", ("for_mode", "BubblewrapSandbox")),
    ("driver", "agentd/drivers/harness/driver.py", ("HarnessDriver.drive",)),
    ("driver", "agentd/drivers/harness/loop.py", ("Harness.run",)),
    ("model call", "agentd/drivers/harness/meter.py", ("Meter.reserve", "Meter.settle")),
    ("model call", "agentd/run/gateway.py", ("Gateway.serve",)),
    ("model call", "agentd/run/control_plane.py", ("GrpcControlPlane.reserve", "GrpcControlPlane.settle")),
    (
        "model call",
        "controlplane/api/agent_service.py",
        ("AgentService.ReserveModelCall", "AgentService.SettleModelCall"),
    ),
    ("model call", "controlplane/services/call_batches.py", ("apply_many",)),
    ("model call", "controlplane/services/model_calls.py", ("reserve", "settle")),
    ("publish", "agentd/run/supervisor.py", ("Run.publish",)),
    ("publish", "agentd/run/control_plane.py", ("GrpcControlPlane.publish",)),
    ("publish", "controlplane/api/agent_service.py", ("AgentService.PublishChangeSet",)),
    ("publish", "controlplane/services/changesets.py", ("publish",)),
    ("finished", "agentd/run/supervisor.py", ("Run.finish",)),
    ("finished", "agentd/daemon/runs.py", ("Runs._follow",)),
    ("finished", "controlplane/api/agent_stream.py", ("AgentSessions._apply",)),
    ("finished", "controlplane/services/run_lifecycle.py", ("apply_run_message", "finish_run")),
    ("candidate", "controlplane/dispatch/composer.py", ("Composer.run_forever", "Composer.compose")),
    ("candidate", "controlplane/services/change_lifecycle.py", ("finish_composition",)),
]
STEPS = [
    "submit", "route", "packet", "assignment", "agentd", "supervisor", "sandbox", "driver", "model call",
    "publish", "finished", "candidate",
]  # fmt: skip
"""The walk of the issue: submit -> route -> packet -> assignment -> agentd -> supervisor -> sandbox/driver ->
model gateway/reserve/settle -> publish -> finished (then the candidate)."""

CALLS: list[tuple[str, str, tuple[str, ...]]] = [
    # (module path, caller, names its body uses, in this order of first use): the hand-offs between the
    # diagram's lines. Within one line, `A -> B` is checked the same way without being listed here. A name
    # given as a string counts (an RPC named by its method: `self._call("ReserveModelCall", ...)`).
    ("controlplane/api/change_service.py", "ChangeService.SubmitChange", ("submit_change",)),
    ("controlplane/dispatch/dispatcher.py", "Dispatcher.run_forever", ("route_pending", "dispatch_once")),
    ("controlplane/dispatch/router.py", "Router.route", ("prepare",)),
    ("controlplane/dispatch/packet_pipeline.py", "compile_for", ("compile_packet",)),
    ("controlplane/dispatch/dispatcher.py", "_assign_one", ("assign", "build")),
    ("controlplane/dispatch/dispatcher.py", "Dispatcher.dispatch_once", ("assign_queued", "send")),
    ("agentd/daemon/daemon.py", "Agent._assign", ("start",)),
    ("agentd/daemon/runs.py", "Runs._launch", ("_spawn", "DRIVERS")),
    ("agentd/run/supervisor.py", "serve", ("load_driver", "supervise")),
    (
        "agentd/drivers/harness/driver.py",
        "HarnessDriver.drive",
        ("open_task_workspace", "_meter", "Harness", "publish"),
    ),
    ("agentd/drivers/harness/meter.py", "Meter.reserve", ("reserve",)),
    ("agentd/drivers/harness/meter.py", "Meter.settle", ("settle",)),
    ("agentd/run/control_plane.py", "GrpcControlPlane.reserve", ("ReserveModelCall",)),
    ("agentd/run/control_plane.py", "GrpcControlPlane.settle", ("SettleModelCall",)),
    ("controlplane/api/agent_service.py", "AgentService.ReserveModelCall", ("reserve",)),
    ("controlplane/api/agent_service.py", "AgentService.SettleModelCall", ("settle",)),
    ("agentd/run/supervisor.py", "Run.publish", ("commit_workspace", "publish")),
    ("agentd/run/control_plane.py", "GrpcControlPlane.publish", ("PublishChangeSet",)),
    ("controlplane/api/agent_service.py", "AgentService.PublishChangeSet", ("publish",)),
    ("agentd/run/supervisor.py", "Run.supervise", ("_drive", "finish")),
    ("agentd/daemon/runs.py", "Runs._follow", ("finished",)),
    ("controlplane/api/agent_stream.py", "AgentSessions.__init__", ("apply_run_message",)),
    ("controlplane/services/run_lifecycle.py", "apply_run_message", ("finish_run",)),
    ("controlplane/dispatch/composer.py", "Composer.compose", ("finish_composition",)),
]

NAME = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?"
LINE = re.compile(
    rf"^(?P<step>[a-z][a-z ]*[a-z])?[\s│]+(?P<path>(?:controlplane|agentd|sdk)/\S+\.py)\s+"
    rf"(?P<names>{NAME}(?:(?: -> |, ){NAME})*)"
)


def walk_block(text: str) -> str:
    found = re.search(r"^## A run's walk\n.*?^```text\n(.*?)^```", text, re.M | re.S)
    assert found, "docs/architecture.md has no '## A run's walk' section with a ```text diagram"
    return found.group(1)


def shown(block: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(step, path, names) of each line of the diagram that names a module; a line without a step word
    belongs to the step above it."""
    rows: list[tuple[str, str, tuple[str, ...]]] = []
    step = ""
    for line in block.splitlines():
        row = LINE.match(line)
        if row is None:
            assert not re.search(r"\S+\.py\b", line), f"a line naming a module the test cannot read: {line!r}"
            continue
        step = row.group("step") or step
        rows.append((step, row.group("path"), tuple(re.split(r" -> |, ", row.group("names")))))
    return rows


def arrows(block: str) -> list[tuple[str, str, str]]:
    """(path, caller, callee) of every `A -> B` on one line of the diagram."""
    found = []
    for line in block.splitlines():
        row = LINE.match(line)
        if row is not None:
            names = re.split(r"( -> |, )", row.group("names"))
            found += [
                (row.group("path"), a, b)
                for a, sep, b in zip(names[::2], names[1::2], names[2::2], strict=False)
                if sep == " -> "
            ]
    return found


@functools.cache
def tree(path: str, root: pathlib.Path = ROOT) -> ast.Module:
    return ast.parse((root / path).read_text())


def definition(path: str, name: str, root: pathlib.Path = ROOT) -> ast.AST | None:
    """The module-level class or function `name` of `path`, or `Class.method`."""
    scope: list[ast.stmt] = tree(path, root).body
    found: ast.AST | None = None
    for part in name.split("."):
        found = next(
            (
                node
                for node in scope
                if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.name == part
            ),
            None,
        )
        if found is None:
            return None
        scope = getattr(found, "body", [])
    return found


def first_uses(node: ast.AST, names: tuple[str, ...]) -> dict[str, int]:
    """The first line where the body of `node` uses each of `names` (a name, an attribute or a string)."""
    seen: dict[str, int] = {}
    for child in ast.walk(node):
        used = (
            child.id
            if isinstance(child, ast.Name)
            else child.attr
            if isinstance(child, ast.Attribute)
            else child.value
            if isinstance(child, ast.Constant) and isinstance(child.value, str)
            else None
        )
        line = getattr(child, "lineno", 0)
        if used in names and (used not in seen or line < seen[used]):
            seen[used] = line
    return seen


def calls_in_order(path: str, caller: str, callees: tuple[str, ...], root: pathlib.Path = ROOT) -> str:
    """ "" when `caller` of `path` uses each of `callees` (their last dotted part), first uses in this order."""
    node = definition(path, caller, root)
    if node is None:
        return f"{path}: no {caller}"
    names = tuple(c.rsplit(".", 1)[-1] for c in callees)
    seen = first_uses(node, names)
    missing = [n for n in names if n not in seen]
    if missing:
        return f"{path}: {caller} does not use {missing}"
    lines = [seen[n] for n in names]
    if lines != sorted(lines):
        return f"{path}: {caller} uses {list(names)} in another order (lines {lines})"
    return ""


def architecture() -> str:
    return (ROOT / "docs" / "architecture.md").read_text()


def test_the_diagram_shows_the_walk_of_the_table() -> None:
    rows = shown(walk_block(architecture()))
    assert rows == WALK, "docs/architecture.md's walk and WALK differ; update both together"
    assert list(dict.fromkeys(step for step, _, _ in rows)) == STEPS


def test_every_module_and_name_of_the_walk_exists() -> None:
    missing = [
        f"{path}: {name}"
        for _, path, names in WALK
        for name in names
        if not (ROOT / path).is_file() or definition(path, name) is None
    ]
    assert not missing, "named in the run's walk but not in the code:\n" + "\n".join(missing)


def test_each_step_calls_the_next_in_the_order_shown() -> None:
    checks = [(path, a, (b,)) for path, a, b in arrows(walk_block(architecture()))] + CALLS
    assert len(checks) >= 30, f"only {len(checks)} hand-offs are checked: the parsing is broken"
    wrong = [problem for check in checks if (problem := calls_in_order(*check))]
    assert not wrong, "the code no longer walks as the diagram says:\n" + "\n".join(wrong)


def test_the_layer_diagram_names_every_part_test_architecture_checks() -> None:
    """Every part of the control plane (a sub-package) and each of agentd's sides appears in the layers."""
    from tests.test_architecture import AGENTD_SIDES, MODULES

    text = architecture()
    parts = {name.split(".")[1] for name, path in MODULES.items() if name.count(".") == 1 and path.stem == "__init__"}
    assert {"api", "web", "services", "dispatch", "context", "store", "domain"} <= parts
    layers = text[: text.index("## A run's walk")]
    missing = [f"{p}/" for p in sorted(parts) if f"{p}/" not in layers]
    missing += [f"`{side.replace('.', '/')}/`" for side in AGENTD_SIDES if f"`{side.replace('.', '/')}/`" not in text]
    assert not missing, f"docs/architecture.md's layers do not name: {missing}"


@pytest.mark.parametrize(
    ("caller_source", "callees", "problem"),
    [
        ("def f():\n    a()\n    b.c()\n", ("a", "c"), ""),
        ("def f():\n    b.c()\n    a()\n", ("a", "c"), "another order"),
        ("def f():\n    a()\n", ("a", "gone"), "does not use ['gone']"),
        ("def f():\n    call('RPC')\n", ("RPC",), ""),
    ],
)
def test_a_broken_hand_off_is_reported(
    tmp_path: pathlib.Path, caller_source: str, callees: tuple[str, ...], problem: str
) -> None:
    (tmp_path / "m.py").write_text(caller_source)
    found = calls_in_order("m.py", "f", callees, tmp_path)
    assert (problem in found) if problem else found == ""


def test_the_diagram_is_read_line_by_line() -> None:
    block = (
        "submit      controlplane/a.py   A.b -> c   what it does\n"
        "   │        agentd/d.py         e, F.g     (more)\n"
        "   ▼\n"
        "route       sdk/h.py            i\n"
    )
    assert shown(block) == [
        ("submit", "controlplane/a.py", ("A.b", "c")),
        ("submit", "agentd/d.py", ("e", "F.g")),
        ("route", "sdk/h.py", ("i",)),
    ]
    assert arrows(block) == [("controlplane/a.py", "A.b", "c")]

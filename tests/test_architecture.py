"""The layering the folders name, checked on every run: no import cycle between modules; the domain is pure
(no sqlalchemy, grpc or protobuf in its import lines, and none of them, anthropic or pygit2 in sys.modules
after importing it); `import drover` loads no grpc, protobuf or yaml; only controlplane.api touches the
generated stubs; controlplane and agentd never import each other (what both need lives in drover.core); agentd's
daemon side (agentd.daemon) and run side (agentd.run, agentd.drivers) import each other only where listed; no
module over 400 lines and no function over 60."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = {"controlplane": ROOT / "controlplane", "agentd": ROOT / "agentd", "drover": ROOT / "sdk" / "drover"}
GENERATED = ("drover.v1",)
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [package, *rel.parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(parts)
            if name.startswith(GENERATED) or ".migrations" in name:
                continue
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: pathlib.Path) -> set[str]:
    """Every module `name` imports, at any depth of the file (function-level imports count too)."""
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def _internal(imported: set[str]) -> set[str]:
    """The project's own modules among `imported` (a `from pkg import module` names the module)."""
    return {m for m in imported if m in MODULES}


GRAPH = {name: _internal(_imports(name, path)) - {name} for name, path in MODULES.items()}


def _cycle() -> list[str]:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for child in sorted(GRAPH.get(node, ())):
            if child.startswith(node + ".") or (node.startswith(child + ".") and MODULES[child].name == "__init__.py"):
                continue  # a package and its own modules
            if state.get(child) == 1:
                return stack[stack.index(child) :] + [child]
            if not state.get(child):
                found = visit(child)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(GRAPH):
        if not state.get(node):
            found = visit(node)
            if found:
                return found
    return []


def test_no_import_cycle_between_modules() -> None:
    assert _cycle() == []


def _unit(module: str) -> str:
    """The control plane's part a module belongs to: its sub-package (api, web, services, dispatch, context,
    store, domain) or, for a top-level module (config, metrics, server, cli...), the module itself."""
    return module.split(".")[1]


def _package_graph() -> dict[str, dict[str, list[str]]]:
    """Part -> the parts it imports -> the module imports behind each edge (any depth of the file)."""
    graph: dict[str, dict[str, list[str]]] = {}
    for name, imported in GRAPH.items():
        if not name.startswith("controlplane."):
            continue
        for target in imported:
            # `from controlplane import metrics` names the package too; the module is the edge.
            if target.startswith("controlplane.") and _unit(target) != _unit(name):
                graph.setdefault(_unit(name), {}).setdefault(_unit(target), []).append(f"{name} -> {target}")
    return graph


def _package_cycles(graph: dict[str, dict[str, list[str]]]) -> list[str]:
    """Each group of parts that import each other (a strongly connected component), with the edges
    inside it; empty when the parts form layers."""

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), {}):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reaches = {part: reach(part) for part in graph}
    groups = {
        tuple(sorted(p for p in graph if p == part or (p in reaches[part] and part in reaches[p])))
        for part in graph
        if part in reaches[part]
    }

    def edge(a: str, b: str) -> str:
        why = sorted(graph[a][b])
        return f"  {a} -> {b} ({why[0]}{f', +{len(why) - 1} more' if len(why) > 1 else ''})"

    return [
        " <-> ".join(group) + ":\n" + "\n".join(edge(a, b) for a in group for b in sorted(graph[a]) if b in group)
        for group in sorted(groups)
    ]


def test_no_import_cycle_between_packages() -> None:
    """Module cycles are not the only loops: `api` importing `web` while `web` imports `api` is one too,
    though no single module cycle shows it. The composition root (controlplane/server.py) sits above both."""
    cycles = _package_cycles(_package_graph())
    assert cycles == [], "parts of the control plane that import each other:\n" + "\n".join(cycles)


def test_the_store_imports_only_the_domain() -> None:
    """The store reports to metrics through hooks (store/metric_hooks.py), never by importing them."""
    upwards = [
        line
        for line in _importers("controlplane.store", ("controlplane",))
        if not line.split(" imports ")[1].startswith(("controlplane.store", "controlplane.domain"))
    ]
    assert upwards == [], "\n".join(upwards)


def _importers(prefix: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{name} imports {m}"
        for name, path in MODULES.items()
        if name.startswith(prefix)
        for m in _imports(name, path)
        if m == forbidden or m.startswith(forbidden) or any(m == f or m.startswith(f + ".") for f in forbidden)
    )


def test_the_domain_is_pure() -> None:
    assert (
        _importers(
            "controlplane.domain",
            (
                "sqlalchemy",
                "grpc",
                "google.protobuf",
                "drover.v1",
                "controlplane.store",
                "controlplane.services",
                "controlplane.api",
                "controlplane.dispatch",
                "controlplane.context",
                "asyncio",
            ),
        )
        == []
    )


def test_the_domain_imports_nothing_above_it() -> None:
    upwards = [
        line
        for line in _importers("controlplane.domain", ("controlplane",))
        if not line.split(" imports ")[1].startswith("controlplane.domain")
    ]
    assert upwards == []


def _loaded_after(*modules: str) -> set[str]:
    """What a fresh interpreter holds in sys.modules after importing `modules` (import lines miss what
    a package's `__init__` or a dependency's pulls in; this does not)."""
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules) + "print(*sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(done.stdout.split())


def _heavy(loaded: set[str], heavy: set[str]) -> list[str]:
    """Which of `heavy` were loaded (a package is in sys.modules whenever one of its modules is)."""
    return sorted(heavy & loaded)


def test_importing_the_domain_loads_no_io_library() -> None:
    domain = sorted(
        name for name in MODULES if name == "controlplane.domain" or name.startswith("controlplane.domain.")
    )
    assert len(domain) > 10, domain
    loaded = _loaded_after(*domain)
    assert _heavy(loaded, {"grpc", "google.protobuf", "sqlalchemy", "anthropic", "pygit2"}) == []
    assert "drover.v1" not in loaded


def test_import_drover_loads_no_grpc_protobuf_or_yaml() -> None:
    """The servers' domain raises drover.errors: importing the SDK's package must not cost the client."""
    assert _heavy(_loaded_after("drover"), {"grpc", "google.protobuf", "yaml"}) == []
    assert _heavy(_loaded_after("drover.errors"), {"grpc", "google.protobuf", "yaml"}) == []


def test_only_the_api_layer_touches_the_generated_stubs() -> None:
    # The web console is the API's other edge: it calls the same servicers with the same requests.
    offenders = [
        line
        for line in _importers("controlplane", ("drover.v1", "grpc", "google.protobuf"))
        if not line.startswith(("controlplane.api", "controlplane.web"))
    ]
    assert offenders == []


def test_controlplane_and_agentd_never_import_each_other() -> None:
    assert _importers("controlplane", ("agentd",)) == []
    assert _importers("agentd", ("controlplane",)) == []
    assert _importers("drover", ("controlplane", "agentd")) == []


# agentd's folders name its processes: agentd.daemon is the long-lived daemon, agentd.run a run's
# supervisor process and agentd.drivers the ways that supervisor works a Task. Neither side imports the
# other's code, except these imports across the process boundary, each with its reason. An entry that
# is no longer imported fails too, so the list only shrinks.
ACROSS_THE_PROCESS_BOUNDARY = {
    # the daemon writes and reads the RUN_DIR files the supervisor owns
    ("agentd.daemon.assignment", "agentd.run.spec"): "decodes the assignment into the RunSpec it writes",
    ("agentd.daemon.runs", "agentd.run.spec"): "writes assignment.json, reads it back after a restart",
    ("agentd.daemon.runs", "agentd.run.output"): "read_records: output.jsonl, streamed to the control plane",
    ("agentd.daemon.daemon", "agentd.run.session_input"): "appends people's input to inputs.jsonl",
    ("agentd.daemon.mirrors", "agentd.run.spec"): "a run's repository, branch and git credential's names",
    ("agentd.daemon.isolation", "agentd.run.sandbox"): "the start-up check runs bubblewrap as runs will",
    # the supervisor side uses daemon helpers
    ("agentd.run.output", "agentd.daemon.logbatch"): "RECORD_BYTES: the record size both sides agree on",
    ("agentd.run.supervisor", "agentd.daemon.cgroups"): "joins and reads the cgroups the daemon made",
    ("agentd.run.supervisor", "agentd.daemon.run_disk"): "mounts and releases the run's own filesystem",
    ("agentd.run.prepared_workspace", "agentd.daemon.run_disk"): "unmounts a prepared workspace's overlay as the "
    "sweep of a dead supervisor's mounts does",
    ("agentd.run.control_plane", "agentd.daemon.connection"): "open_channel: dials the control plane as agentd does",
}


AGENTD_SIDES = {"agentd.daemon": "daemon", "agentd.run": "run", "agentd.drivers": "run"}


def _side(module: str) -> str:
    """Which process agentd `module` runs in: "daemon", "run" (a run's supervisor) or "" (agentd's root)."""
    return next((side for top, side in AGENTD_SIDES.items() if module == top or module.startswith(top + ".")), "")


def _across_the_process_boundary() -> set[tuple[str, str]]:
    found = set()
    for name, path in MODULES.items():
        imported = _internal(_imports(name, path))
        for module in imported:
            if any(other.startswith(module + ".") for other in imported):
                continue  # `from agentd.daemon import outbox` names the package only to reach the module
            if _side(name) and _side(module) and _side(name) != _side(module):
                found.add((name, module))
    return found


def test_agentd_daemon_and_run_sides_import_each_other_only_where_listed() -> None:
    found = _across_the_process_boundary()
    assert len(found) > 5  # the check sees the imports it is about
    assert sorted(found - ACROSS_THE_PROCESS_BOUNDARY.keys()) == []
    assert sorted(ACROSS_THE_PROCESS_BOUNDARY.keys() - found) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_and_functions_stay_small(name: str) -> None:
    path = MODULES[name]
    text = path.read_text()
    assert text.count("\n") <= MAX_MODULE_LINES, f"{path.relative_to(ROOT)} has {text.count(chr(10))} lines"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == [], f"{path.relative_to(ROOT)}: {long}"


# --- agentd's run side: one skeleton, drivers behind one Protocol, protobuf stopped at the edge -------

PROTOBUF_AT_THE_EDGE = {
    "agentd.daemon.connection": "the stream to the control plane",
    "agentd.daemon.daemon": "dispatches the control plane's messages; decodes each assignment",
    "agentd.run.control_plane": "GrpcControlPlane: the supervisor's unary calls",
}


def test_protobuf_stops_at_agentds_edge() -> None:
    """Past the edge a run is a RunSpec (agentd/run/spec.py), never a message or a dict of one."""
    found = {line.split(" imports ")[0] for line in _importers("agentd", ("drover.v1", "google.protobuf"))}
    assert found == PROTOBUF_AT_THE_EDGE.keys()


def test_no_string_key_lookups_of_a_runs_spec() -> None:
    """Every field of the assignment is an attribute of RunSpec or HarnessSpec, with its default there."""
    lookups = [
        f"{name}: {line.strip()}"
        for name, path in MODULES.items()
        if name.startswith(("agentd.run", "agentd.drivers"))
        for line in path.read_text().splitlines()
        if any(pattern in line for pattern in ('spec["', "spec.get(", 'harness["', "h.get(", 'h["'))
    ]
    assert lookups == []


def test_a_runs_supervisor_loads_no_grpc_protobuf_or_database() -> None:
    """A command run's supervisor never dials the control plane: nothing of grpc is imported for it."""
    loaded = _loaded_after("agentd.run", "agentd.run.supervisor", "agentd.drivers.command")
    assert _heavy(loaded, {"grpc", "google.protobuf", "sqlalchemy", "anthropic", "drover.v1"}) == []


def test_every_driver_is_one_module_behind_the_driver_protocol() -> None:
    from agentd.daemon.runs import DRIVERS as STARTED
    from agentd.run.supervisor import DRIVERS, Driver, load_driver

    assert STARTED == DRIVERS
    for name in DRIVERS:
        module = load_driver(name)
        assert callable(module.driver), name
        cls = module.driver.__annotations__["return"]
        made = getattr(module, cls)
        for member in ("drive", "crash_code", "output_slack"):
            assert hasattr(made, member), (name, member)
    assert set(Driver.__dict__) >= {"drive"}


def _classes() -> dict[str, tuple[str, list[str]]]:
    """agentd's classes: name -> (module, names of its bases); a name defined twice is kept as module:name."""
    found = {}
    for name, path in MODULES.items():
        if name.startswith("agentd"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    bases = [b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in node.bases]
                    found[f"{name}:{node.name}" if node.name in found else node.name] = (name, bases)
    return found


def test_agentd_has_one_exception_hierarchy() -> None:
    """Every exception agentd raises of its own derives from agentd.errors.AgentdError; no two share a name."""
    classes = _classes()

    def is_exception(name: str, seen: frozenset[str] = frozenset()) -> bool:
        bases = classes.get(name, ("", []))[1]
        return any(b in ("Exception", "OSError") or (b in classes and is_exception(b, seen | {name})) for b in bases)

    def under_root(name: str) -> bool:
        return name == "AgentdError" or any(under_root(b) for b in classes.get(name, ("", []))[1] if b in classes)

    exceptions = [name for name in classes if is_exception(name)]
    assert len(exceptions) > 10
    assert [name for name in exceptions if ":" in name] == []  # one class of each name
    assert [name for name in exceptions if not under_root(name)] == []


def test_no_inheritance_chains_in_agentd() -> None:
    """A class of agentd derives from another of agentd's only to join the exception hierarchy."""
    classes = _classes()

    def depth(name: str) -> int:
        own = [b for b in classes[name][1] if b in classes]
        return 1 + max((depth(b) for b in own), default=0)

    chains = {name: depth(name) for name, (module, _) in classes.items() if module != "agentd.errors"}
    deep = {name: d for name, d in chains.items() if d > 1 and "AgentdError" not in classes[name][1]}
    assert deep == {}

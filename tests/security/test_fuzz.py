"""Every request message of every service, driven with generated values (hypothesis) against a running
control plane on SQLite and on PostgreSQL: the answer is never UNKNOWN or INTERNAL, a refused call
writes nothing (row counts before and after), and the server stays SERVING.

Values come from the messages' descriptors, so a field added to the proto is fuzzed without a change
here; strings mix arbitrary text with what attacks look like (NUL, path escapes, SQL, huge strings) and
the ids of rows that exist, so calls reach past the first check. Run with -s to see the tally."""

from __future__ import annotations

import collections
import math
from typing import Any

import grpc
import pytest
import sqlalchemy
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.api import validation
from drover.errors import DroverError
from drover.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    change_pb2,
    change_pb2_grpc,
    operations_pb2,
    operations_pb2_grpc,
    project_pb2,
    project_pb2_grpc,
    token_pb2,
    token_pb2_grpc,
    types_pb2,
)
from tests.conftest import Fleet, python_command, task

EXAMPLES = 100
"""Generated requests per method per database."""
ALLOWED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}  # the last: our own deadline on a stream that is rightly open
TABLES = (
    "changes",
    "tasks",
    "runs",
    "run_logs",
    "events",
    "agents",
    "tokens",
    "projects",
    "model_calls",
    "changesets",
    "meters",
    "meter_reservations",
    "decision_receipts",
    "claims",
    "conflicts",
)
NASTY = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "../../",
    "..",
    ".",
    "/",
    "/etc/passwd",
    "%",
    "_",
    "'; DROP TABLE changes; --",
    "\n",
    "A=B",
    "table:",
    "x" * 300,
    "x" * 70_000,
    "\u202e",
    "\ud7ff",
    "☃",
    "NaN",
    "-1",
    "fuzz",
    "web",
]
TALLY: collections.Counter[str] = collections.Counter()


def _strings(known: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=40),
        st.sampled_from(NASTY + known),
        st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True),
    )


def _scalar(field: FieldDescriptor, known: list[str]) -> st.SearchStrategy[Any]:
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        return _strings(known)
    if t == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=40)
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.sampled_from([0.0, -0.0, 1.0, 1e308, -1e308, 5e-324, math.nan, math.inf, 10_001.0]),
        )
    if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        return st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31)]))
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        return st.integers(0, 2**32 - 1)
    if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return st.integers(0, 2**64 - 1)
    if t == FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values])
    return st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63)]))


def message(descriptor: Any, known: list[str], depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """A dict of field values for a message (every field maybe left out)."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            key_f, value_f = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            fields[field.name] = st.dictionaries(_scalar(key_f, known), _scalar(value_f, known), max_size=4)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth > 2:
                continue
            inner = message(field.message_type, known, depth + 1)
            fields[field.name] = st.lists(inner, max_size=3) if field.is_repeated else inner
        elif field.is_repeated:
            fields[field.name] = st.one_of(st.lists(_scalar(field, known), max_size=5), st.just(["a"] * 1001))
        else:
            fields[field.name] = _scalar(field, known)
    return st.fixed_dictionaries({}, optional=fields)


def nearly_valid_change(known: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """A SubmitChange that would be accepted, with one field perhaps replaced by a generated value, so the
    calls get past the first check and into the store."""
    good_task = st.fixed_dictionaries(
        {
            "key": st.from_regex(r"[a-z0-9][a-z0-9._-]{0,10}", fullmatch=True),
            "kind": st.just("test"),
            "objective": st.text(min_size=1, max_size=30).filter(str.strip),
            "command": st.just(["true"]),
        },
        optional={
            "files": st.lists(st.sampled_from(["a.py", "src/b.py", "./c//d.py", "src/*.py"]), max_size=3),
            "resources": st.lists(st.sampled_from(["table:users", "Endpoint:/api", "queue:jobs"]), max_size=2),
            "env": st.dictionaries(
                st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True), st.text(max_size=20), max_size=3
            ),
            "timeout_seconds": st.integers(0, 3600),
            "size": st.sampled_from(["", "small", "medium", "large"]),
            "risk": st.sampled_from(["", "low", "high"]),
        },
    )
    base = st.fixed_dictionaries(
        {
            "project": st.just("fuzz"),
            "goal": st.text(min_size=1, max_size=40).filter(str.strip),
            "tasks": st.lists(good_task, min_size=1, max_size=3, unique_by=lambda t: t["key"]),
        },
        optional={"budget_usd": st.floats(0, 100), "criteria": st.lists(st.text(max_size=20), max_size=3)},
    )
    noisy = message(types_pb2.Task.DESCRIPTOR, known)

    def mutate(draw_base: dict[str, Any], noise: dict[str, Any], which: int) -> dict[str, Any]:
        if noise and which % 2 == 0:  # one Task takes some generated fields
            draw_base["tasks"][0] = {**draw_base["tasks"][0], **noise}
        return draw_base

    return st.builds(mutate, base, noisy, st.integers(0, 3))


def nearly_valid_admin(name: str, known: list[str]) -> st.SearchStrategy[dict[str, Any]] | None:
    """Project and token requests that would be accepted but for a generated field or two, so the calls
    reach the service functions and the store (a random Project name or update mask stops at the edge)."""
    names = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True)
    noise = message(project_pb2.Project.DESCRIPTOR, known).map(
        lambda d: {k: v for k, v in d.items() if k not in ("name", "repo", "git_token_file", "env")}
    )
    shown_only = ("git_credential", "forge_credential", "webhook_secret")
    settings = sorted(f.name for f in project_pb2.Project.DESCRIPTOR.fields if f.name not in shown_only)
    if name == "CreateProject":
        return st.builds(lambda n, extra: {"project": {"name": n, **extra}}, names, noise)
    if name == "UpdateProject":
        mask = st.lists(st.sampled_from([*settings, "nope"]), min_size=1, max_size=3)
        return st.builds(
            lambda extra, paths: {"project": {"name": "fuzz", **extra}, "update_mask": {"paths": paths}}, noise, mask
        )
    if name == "SetGitCredential":
        kind = st.sampled_from(["token", "ssh_key"])
        return st.fixed_dictionaries({"project": st.just("fuzz"), "kind": kind, "secret": st.text(max_size=60)})
    if name == "SetForgeCredential":
        ids = st.one_of(st.just(0), st.integers(1, 2**53), st.integers(2**53, 2**63 - 1))
        pem = st.sampled_from(["-----BEGIN RSA PRIVATE KEY-----\nZ2FyYmFnZQ==\n-----END RSA PRIVATE KEY-----"])
        return st.fixed_dictionaries(
            {
                "project": st.sampled_from(["fuzz", "nope"]),
                "kind": st.sampled_from(["token", "app"]),
                "secret": st.one_of(st.text(max_size=60), pem),
                "app_id": ids,
                "installation_id": ids,
            }
        )
    if name in ("DeleteForgeCredential", "RotateWebhookSecret"):
        return st.fixed_dictionaries({"project": st.sampled_from(["fuzz", "nope", *known])})
    if name == "CreateToken":
        return st.fixed_dictionaries(
            {"name": names},
            optional={
                "kind": st.sampled_from(["", "user", "agent"]),
                "role": st.sampled_from(["", "submit", "run.manage", "admin"]),
                "projects": st.lists(st.sampled_from(["fuzz", "nope", *known]), max_size=2),
                "pool": st.sampled_from(["", "gpu"]),
                "monthly_budget_usd": st.floats(0, 1e10),
                "expires_in": st.sampled_from(["", "1d", "12h", "0s", "1d12h", "soon", "99999999999999w"]),
            },
        )
    return None


def build(cls: type[Message], values: dict[str, Any]) -> Message:
    out = cls()
    for name, value in values.items():
        field = out.DESCRIPTOR.fields_by_name[name]
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
            getattr(out, name).update(value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            sub = GetMessageClass(field.message_type)
            if field.is_repeated:
                getattr(out, name).extend(build(sub, v) for v in value)
            else:
                getattr(out, name).CopyFrom(build(sub, value))
        elif field.is_repeated:
            getattr(out, name).extend(value)
        else:
            setattr(out, name, value)
    return out


COUNT_ROWS = "SELECT " + ", ".join(f"(SELECT count(*) FROM {t})" for t in TABLES)
"""Every table's row count in one statement: one round trip per check, not one per table."""


def counts(engine: sqlalchemy.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return dict(zip(TABLES, conn.exec_driver_sql(COUNT_ROWS).one(), strict=True))


SERVICE_MODULES = (change_pb2, operations_pb2, agent_pb2, project_pb2, token_pb2)


def test_every_served_service_is_fuzzed() -> None:
    """A service added to the API without being added here would go unfuzzed."""
    from controlplane.api.endpoint import SERVICE_NAMES

    fuzzed = {s.full_name for m in SERVICE_MODULES for s in m.DESCRIPTOR.services_by_name.values()}
    assert set(SERVICE_NAMES) <= fuzzed


def _methods() -> list[tuple[str, Any, str]]:
    out = []
    for module, stub in (
        (change_pb2, change_pb2_grpc.ChangeServiceStub),
        (operations_pb2, operations_pb2_grpc.OperationsServiceStub),
        (agent_pb2, agent_pb2_grpc.AgentServiceStub),
        (project_pb2, project_pb2_grpc.ProjectServiceStub),
        (token_pb2, token_pb2_grpc.TokenServiceStub),
    ):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                if method.client_streaming:
                    continue  # Connect: test_fuzz_the_agent_stream
                out.append((service.name, stub, method.name))
    return out


def _fuzz(fleet: Fleet, url: str) -> None:
    plane = fleet.start_plane()
    plane.add_project("fuzz")
    with plane.client() as client:
        change = client.submit_change("fuzz", "seed", [task("a", python_command("pass"), files=["a.py"])])
    known = [change.id, change.tasks[0].id, change.tasks[0].latest_run_id, "fuzz", "a"]
    engine = sqlalchemy.create_engine(url)
    channel = grpc.insecure_channel(plane.target, options=[("grpc.max_send_message_length", 64 << 20)])
    tokens = {"user": plane.admin_token, "agent": plane.agent_token_file.read_text().strip()}
    health = health_pb2_grpc.HealthStub(channel)
    try:
        for service, stub_cls, name in _methods():
            stub = stub_cls(channel)
            method = getattr(stub, name)
            descriptor = _service_descriptor(service).methods_by_name[name]
            token = tokens["agent" if service == "AgentService" else "user"]

            _fuzz_method(engine, service, name, method, descriptor, token, known)
            status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
            assert status == health_pb2.HealthCheckResponse.SERVING, f"not serving after {name}"
    finally:
        channel.close()
        engine.dispose()


def _fuzz_method(
    engine: Any, service: str, name: str, method: Any, descriptor: Any, token: str, known: list[str]
) -> None:
    """Throw generated requests at one method: every answer is an allowed code, and a refusal writes nothing."""
    request_cls = GetMessageClass(descriptor.input_type)
    strategy = message(descriptor.input_type, known)
    if name == "SubmitChange":
        strategy = st.one_of(strategy, nearly_valid_change(known))
    admin = nearly_valid_admin(name, known)
    if admin is not None:
        strategy = st.one_of(strategy, admin)

    @settings(
        max_examples=EXAMPLES * (3 if name == "SubmitChange" else 1),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def one(values: dict[str, Any]) -> None:
        request = build(request_cls, values)
        if name == "SubmitChange":  # no harness Tasks: a routed run would write rows in the background
            for t in request.tasks:
                if not t.command:
                    t.command.append("true")
        before = counts(engine)
        code, details = _call(method, request, token, descriptor.server_streaming)
        TALLY[f"{name} {code.name}"] += 1
        TALLY[code.name] += 1
        assert code in ALLOWED, f"{service}/{name} answered {code.name}: {details!r} to {request!r:.300}"
        assert "select " not in details.lower() and "insert " not in details.lower(), details
        if code != grpc.StatusCode.OK and code != grpc.StatusCode.DEADLINE_EXCEEDED:
            assert counts(engine) == before, f"{service}/{name} refused ({code.name}) but wrote rows"

    one()


def _service_descriptor(name: str) -> Any:
    for module in SERVICE_MODULES:
        if name in module.DESCRIPTOR.services_by_name:
            return module.DESCRIPTOR.services_by_name[name]
    raise KeyError(name)


def _call(method: Any, request: Message, token: str, streaming: bool) -> tuple[grpc.StatusCode, str]:
    metadata = (("authorization", f"Bearer {token}"),)
    try:
        if streaming:
            for i, _ in enumerate(method(request, metadata=metadata, timeout=1.5)):
                if i >= 3:
                    break
        else:
            method(request, metadata=metadata, timeout=10)
    except grpc.RpcError as err:
        return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


WHOLE_API_TIMEOUT = 600
"""About 3,400 generated requests, each with a row count before and after: 40-80 s on an idle 2-core
machine, twice that on a loaded one; the suite's 120 s guard against a hang is too tight for it."""


@pytest.mark.timeout(WHOLE_API_TIMEOUT)
def test_fuzz_every_request_on_sqlite(fleet: Fleet) -> None:
    _fuzz(fleet, f"sqlite:///{fleet.plane.data_dir / 'drover.db'}")
    print("\nfuzz tally (sqlite):", dict(TALLY))


@pytest.mark.timeout(WHOLE_API_TIMEOUT)
def test_fuzz_every_request_on_postgresql(pg_fleet: Fleet, pg_url: str) -> None:
    _fuzz(pg_fleet, pg_url)
    print("\nfuzz tally (postgresql):", dict(TALLY))


def agent_names(engine: sqlalchemy.Engine) -> set[str]:
    with engine.connect() as conn:
        return {name for (name,) in conn.exec_driver_sql("SELECT name FROM agents")}


def valid(message: Message) -> bool:
    """What the control plane's own validator says of a message (the oracle for "refused")."""
    try:
        validation.check(message)
    except DroverError:
        return False
    return True


@pytest.mark.parametrize("db", ["sqlite"])
def test_fuzz_the_agent_stream(fleet: Fleet, db: str) -> None:
    """Hello and run messages on the Connect stream: a refusal names the field, and nothing is stored."""
    plane = fleet.start_plane()
    engine = sqlalchemy.create_engine(f"sqlite:///{plane.data_dir / 'drover.db'}")
    token = plane.agent_token_file.read_text().strip()
    channel = grpc.insecure_channel(plane.target)
    stub = agent_pb2_grpc.AgentServiceStub(channel)

    @settings(max_examples=EXAMPLES * 2, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        message(agent_pb2.Hello.DESCRIPTOR, ["fuzz"]),
        st.lists(message(agent_pb2.RunMessage.DESCRIPTOR, []), max_size=2),
    )
    def one(hello: dict[str, Any], runs: list[dict[str, Any]]) -> None:
        first = agent_pb2.AgentMessage(hello=build(agent_pb2.Hello, hello))
        rest = [agent_pb2.AgentMessage(run=build(agent_pb2.RunMessage, r)) for r in runs]
        agents_before = agent_names(engine)
        code = grpc.StatusCode.OK
        try:
            for _ in stub.Connect(iter([first, *rest]), metadata=(("authorization", f"Bearer {token}"),), timeout=1.5):
                pass
        except grpc.RpcError as err:
            code = err.code()
        TALLY[f"Connect {code.name}"] += 1
        TALLY[code.name] += 1
        assert code in ALLOWED | {grpc.StatusCode.CANCELLED}, code
        if code == grpc.StatusCode.INVALID_ARGUMENT and not valid(first):
            # A refused hello registers nothing. (A valid hello registers its agent before a bad run
            # message after it is refused, and an earlier example's agent may still be registering.)
            assert first.hello.name not in agent_names(engine) - agents_before

    try:
        one()
    finally:
        channel.close()
        engine.dispose()

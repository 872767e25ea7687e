"""Round two, finding 7 (its input part): request bytes that do not decode answered `UNKNOWN:
Unexpected DecodeError`, and `argv[0]` containing `=` was accepted at submit and failed at run time.

Every method the control plane lists through server reflection (its own services, health and
reflection itself; unary and streaming) gets bytes that are no protobuf message of any type,
sent through a raw channel: each answers INVALID_ARGUMENT naming the message type, a caller
without a token UNAUTHENTICATED, and nothing is stored. An undecodable message in the middle of
the agent stream ends it with INVALID_ARGUMENT. A command agentd could not start is refused at
submit naming the field, by one rule (drover/core/commands.py) that a Change file and agentd's
sandbox ask too; a command at that rule's edge is accepted and runs.
"""

from __future__ import annotations

import collections
import json
import pathlib
import threading
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

import drover
from agentd.run.sandbox import BubblewrapSandbox, PlainSandbox, SandboxPolicy
from drover import changefile
from drover.v1 import agent_pb2, change_pb2, change_pb2_grpc, operations_pb2, operations_pb2_grpc
from tests.conftest import Fleet, task

INVALID = grpc.StatusCode.INVALID_ARGUMENT
# Bytes no message type can decode: each breaks the wire format itself, whatever the fields are.
GARBAGE = {
    "truncated varint": b"\x08\xff",
    "varint of 11 bytes": b"\x08" + b"\xff" * 10 + b"\x01",
    "length past the end": b"\x0a\x05ab",
    "wire type 6": b"\x0e\x00",
    "wire type 7": b"\x0f\x00",
    "end-group without a group": b"\x0c",
    "field number 0": b"\x00",
    "truncated tag": b"\x80",
}


def _tag(field: FieldDescriptor, wire_type: int) -> bytes:
    number = (field.number << 3) | wire_type
    out = bytearray()
    while number > 0x7F:
        out.append(number & 0x7F | 0x80)
        number >>= 7
    return bytes(out + bytes([number]))


def wrong_inside(message: Descriptor) -> dict[str, bytes]:
    """Well-framed bytes with a wrong inside, for the fields this type has: a string that is not UTF-8,
    a nested message that is itself corrupt."""
    out = {}
    strings = [f for f in message.fields if f.type == FieldDescriptor.TYPE_STRING]
    nested = [f for f in message.fields if f.type == FieldDescriptor.TYPE_MESSAGE]
    if strings:
        out[f"{strings[0].name}: not UTF-8"] = _tag(strings[0], 2) + b"\x02\xff\xfe"
    if nested:
        out[f"{nested[0].name}: corrupt inside"] = _tag(nested[0], 2) + b"\x02\x08\xff"
    return out


Method = tuple[str, Descriptor, bool, bool]  # path, input type, client streams, server streams


def listed_methods(channel: grpc.Channel) -> list[Method]:
    """Every method of every service the server lists through reflection."""
    database = ProtoReflectionDescriptorDatabase(channel)
    pool = descriptor_pool.DescriptorPool(database)
    methods = []
    for name in database.get_services():
        service = pool.FindServiceByName(name)
        for m in service.methods:
            methods.append((f"/{service.full_name}/{m.name}", m.input_type, m.client_streaming, m.server_streaming))
    return methods


def raw_call(channel: grpc.Channel, method: Method, payload: bytes, token: str) -> grpc.RpcError | None:
    """`payload` as the request of `method`, untouched; the error it ends with (None: it succeeded)."""
    path, _, client_streams, server_streams = method
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    kind = ("stream" if client_streams else "unary") + "_" + ("stream" if server_streams else "unary")
    call = getattr(channel, kind)(path)  # no serializers: bytes in, bytes out
    request = iter([payload]) if client_streams else payload
    try:
        answer = call(request, metadata=metadata, timeout=15)
        if server_streams:
            list(answer)
    except grpc.RpcError as err:
        return err
    return None


@pytest.fixture(scope="module")
def fleet7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """One control plane (and project "web") for the whole module: starting one is most of a test's time."""
    fleet = Fleet(tmp_path_factory.mktemp("r27"))
    fleet.start_plane().add_project("web")
    yield fleet
    fleet.stop()


def stored(channel: grpc.Channel, admin: str) -> tuple[int, int]:
    """How many Changes and Change events the control plane holds."""
    metadata = (("authorization", f"Bearer {admin}"),)
    changes = change_pb2_grpc.ChangeServiceStub(channel).ListChanges(change_pb2.ListChangesRequest(), metadata=metadata)
    events = operations_pb2_grpc.OperationsServiceStub(channel).ListEvents(
        operations_pb2.ListEventsRequest(kind="change.", page_size=1000), metadata=metadata
    )
    return len(changes.changes), len(events.events)


def token_for(path: str, admin: str, agent: str) -> str:
    if path.startswith("/drover.v1.AgentService/"):
        return agent
    return admin if path.startswith("/drover.v1.") else ""


def test_every_listed_method_refuses_undecodable_bytes_as_invalid_argument(fleet7: Fleet) -> None:
    """Before: UNKNOWN "Unexpected <class 'google.protobuf.message.DecodeError'>" on every method,
    and on every protected one for a caller without any token too."""
    plane = fleet7.plane
    admin, agent = plane.admin_token, plane.agent_token_file.read_text().strip()
    tally: collections.Counter[str] = collections.Counter()
    wrong = []
    with grpc.insecure_channel(plane.target) as channel:
        before = stored(channel, admin)
        methods = listed_methods(channel)
        services = {path.split("/")[1] for path, *_ in methods}
        assert {
            "drover.v1.AgentService",
            "drover.v1.ChangeService",
            "drover.v1.OperationsService",
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        } <= services
        assert len(methods) >= 34 and any(m[2] and m[3] for m in methods)  # Connect streams both ways
        for method in methods:
            path, message = method[0], method[1]
            for what, payload in {**GARBAGE, **wrong_inside(message)}.items():
                err = raw_call(channel, method, payload, token_for(path, admin, agent))
                got = err.code() if err is not None else grpc.StatusCode.OK
                details = err.details() if err is not None else ""
                tally[got.name] += 1
                if got != INVALID or message.full_name not in details:
                    wrong.append(f"{path} {what}: {got.name} {details[:160]!r}")
            if path.startswith("/drover.v1."):  # no token: refused as such, whatever the bytes
                err = raw_call(channel, method, GARBAGE["truncated varint"], "")
                if err is None or err.code() != grpc.StatusCode.UNAUTHENTICATED:
                    wrong.append(f"{path} without a token: {err.code().name if err else 'OK'}")
        print(f"\n{len(methods)} methods, undecodable requests answered: {dict(tally)}")
        assert not wrong, f"{len(wrong)} answered wrongly:\n" + "\n".join(wrong)
        assert stored(channel, admin) == before


def test_an_undecodable_message_on_the_agent_stream_ends_it_with_invalid_argument(fleet7: Fleet) -> None:
    """Before: the stream ended UNKNOWN (the DecodeError escaped `context.read()` in the servicer)."""
    plane = fleet7.plane
    token = plane.agent_token_file.read_text().strip()
    welcomed = threading.Event()
    hello = agent_pb2.AgentMessage(hello=agent_pb2.Hello(name="raw", capacity=1, drivers=["command"]))

    def requests() -> Iterator[bytes]:
        yield hello.SerializeToString()
        welcomed.wait(15)  # the garbage is read by the stream's reader, after the hello was taken
        yield GARBAGE["length past the end"]

    received = []
    with grpc.insecure_channel(plane.target) as channel:
        stream = channel.stream_stream("/drover.v1.AgentService/Connect")(
            requests(), metadata=(("authorization", f"Bearer {token}"),), timeout=30
        )
        with pytest.raises(grpc.RpcError) as caught:
            for raw in stream:
                received.append(agent_pb2.ControlMessage.FromString(raw))
                welcomed.set()
    assert received and received[0].WhichOneof("body") == "welcome"
    assert caught.value.code() == INVALID, caught.value
    assert "drover.v1.AgentMessage" in (caught.value.details() or "")


BAD_COMMANDS: list[tuple[list[str], dict[str, str], str, str]] = [
    # argv, env, the field named (under tasks[i]), what the message says
    (["A=b"], {}, "command[0]", "must not contain '='"),
    (["/usr/bin/env", "true"], {"B": "\U0001f600" * 32768}, 'env["B"]', "at most 131071"),  # 32 Ki characters
    (["", "x"], {}, "command[0]", "the program must not be empty"),
]


def test_a_command_agentd_cannot_start_is_refused_at_submit_naming_the_field(fleet7: Fleet) -> None:
    """Before: argv[0] 'A=b' and a 32 Ki-character env value of 4-byte characters (E2BIG at exec)
    were accepted, and their runs failed at start."""
    plane = fleet7.plane
    with grpc.insecure_channel(plane.target) as channel, plane.client() as client:
        before = stored(channel, plane.admin_token)
        for argv, env, field, says in BAD_COMMANDS:
            tasks = [task("a", ["true"]), task("b", ["true"]), task("c", argv, env=env)]
            with pytest.raises(drover.InvalidArgument) as caught:
                client.submit_change("web", "bad argv", tasks)
            assert caught.value.field == f"tasks[2].{field}", caught.value
            assert says in str(caught.value)
        assert stored(channel, plane.admin_token) == before


@pytest.mark.parametrize("argv,env,field,says", BAD_COMMANDS)
def test_a_change_file_and_agentd_refuse_the_same_commands(
    tmp_path: pathlib.Path, argv: list[str], env: dict[str, str], field: str, says: str
) -> None:
    path = tmp_path / "change.json"
    path.write_text(_change_json(argv, env))
    with pytest.raises(drover.InvalidArgument) as caught:
        changefile.load(path)
    assert "tasks[0]." + field.split("[")[0] in str(caught.value) and says in str(caught.value)
    for sandbox in (BubblewrapSandbox(SandboxPolicy()), PlainSandbox(SandboxPolicy())):
        with pytest.raises(ValueError, match=f"{field.split('[')[0]}.*{says[:20]}"):
            sandbox.wrap(argv, tmp_path, env)


def _change_json(argv: list[str], env: dict[str, str]) -> str:
    task_spec = {"key": "c", "kind": "test", "objective": "o", "command": argv, "env": env}
    return json.dumps({"project": "web", "goal": "g", "tasks": [task_spec]})


def test_a_command_at_the_edge_of_the_rule_is_accepted_and_runs(fleet7: Fleet) -> None:
    """The rule refuses only what cannot start: '=' past argv[0] and the longest env value exec
    takes are accepted at submit, and the run succeeds."""
    plane = fleet7.plane
    fleet7.agent("edge")
    longest = "\U0001f600" * 32767  # "B=" + 131,068 bytes + NUL: exactly MAX_ARG_STRLEN
    argv = ["/bin/sh", "-c", 'printf "%s %s\\n" "$1" "${#B}"', "sh", "A=b"]
    with plane.client() as client:
        change = client.submit_change("web", "edge", [task("edge", argv, env={"B": longest, "LANG": "C.UTF-8"})])
        list(client.watch(change.id))
        run_id = client.get_change(change.id).tasks[0].latest_run_id
        run = client.get_run(run_id)
        out = "".join(line.text for line in client.run_logs(run_id) if line.stream == "stdout")
    assert run.state == "succeeded", (run.state, run.reason)
    assert out.split() == ["A=b", str(len(longest.encode()))] or out.split() == ["A=b", str(len(longest))], out[:200]

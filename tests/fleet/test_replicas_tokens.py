"""Token lookups are cached for half a second on each replica: a token revoked through one replica's
API, or by the host, is refused within a second by every replica, two real control planes on one
PostgreSQL; an agent token and a user token alike."""

from __future__ import annotations

import pathlib
import time

import grpc
import pytest

from drover.v1 import agent_pb2, agent_pb2_grpc, change_pb2, change_pb2_grpc, token_pb2, token_pb2_grpc
from tests.conftest import ControlPlane


def reserve_code(target: str, token: str) -> grpc.StatusCode:
    """An agent's call with `token`: NOT_FOUND (no such run) once the token is let in."""
    with grpc.insecure_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        request = agent_pb2.ReserveModelCallRequest(run_id="run_none", key="k", model="claude-sonnet-5-5")
        with pytest.raises(grpc.RpcError) as caught:
            stub.ReserveModelCall(request, metadata=(("authorization", f"Bearer {token}"),), timeout=10)
        return caught.value.code()


def change_code(target: str, token: str) -> grpc.StatusCode:
    """A user's call with `token`: NOT_FOUND (no such Change) once the token is let in."""
    with grpc.insecure_channel(target) as channel:
        stub = change_pb2_grpc.ChangeServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.GetChange(
                change_pb2.GetChangeRequest(change_id="chg_none"),
                metadata=(("authorization", f"Bearer {token}"),),
                timeout=10,
            )
        return caught.value.code()


@pytest.mark.timeout(180)
def test_a_revoked_agent_token_is_refused_within_a_second_on_every_replica(tmp_path: pathlib.Path, pg_url: str) -> None:
    replicas = [ControlPlane(tmp_path / f"cp{i}", pg_url) for i in range(2)]
    try:
        for plane in replicas:  # the first creates the schema and the tokens; the other joins it
            plane.start()
        first = replicas[0]
        token = first.cli("token", "create", "--kind", "agent", "--name", "doomed").stdout.strip()
        for plane in replicas:  # let in, and now in each replica's cache
            assert reserve_code(plane.target, token) == grpc.StatusCode.NOT_FOUND
        with grpc.insecure_channel(first.target) as channel:
            revoke = token_pb2_grpc.TokenServiceStub(channel).RevokeToken
            answer = revoke(
                token_pb2.RevokeTokenRequest(name="doomed"),
                metadata=(("authorization", f"Bearer {first.admin_token}"),),
                timeout=10,
            )
        revoked = time.monotonic()
        assert answer.revoked == 1
        for plane in replicas:
            while (code := reserve_code(plane.target, token)) != grpc.StatusCode.UNAUTHENTICATED:
                assert code == grpc.StatusCode.NOT_FOUND
                assert time.monotonic() - revoked < 1.0, f"{plane.target} still lets the revoked token in"
        # A revocation the host makes (no replica tells the others) holds once the cache entry is old.
        other = first.cli("token", "create", "--kind", "agent", "--name", "host-revoked").stdout.strip()
        assert reserve_code(replicas[1].target, other) == grpc.StatusCode.NOT_FOUND
        first.cli("token", "revoke", "--name", "host-revoked")
        revoked = time.monotonic()
        while (code := reserve_code(replicas[1].target, other)) != grpc.StatusCode.UNAUTHENTICATED:
            assert time.monotonic() - revoked < 1.0, "the host's revocation is not seen within a second"
        # A user token: cached as well, so revoked the same ways, within the same second.
        user = first.cli("token", "create", "--kind", "user", "--name", "ann", "--role", "submit").stdout.strip()
        for plane in replicas:
            assert change_code(plane.target, user) == grpc.StatusCode.NOT_FOUND
        first.cli("token", "revoke", "--name", "ann")
        revoked = time.monotonic()
        for plane in replicas:
            while (code := change_code(plane.target, user)) != grpc.StatusCode.UNAUTHENTICATED:
                assert code == grpc.StatusCode.NOT_FOUND
                assert time.monotonic() - revoked < 1.0, f"{plane.target} still lets the revoked user token in"
    finally:
        for plane in replicas:
            plane.stop()

"""TLS and mTLS between agentd, the SDK and the control plane; plaintext only on loopback by default."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from drover import Unavailable
from tests.conftest import Fleet, task, tls_client, wait_for


def test_agentd_and_the_sdk_speak_mtls_and_plaintext_is_refused(
    fleet: Fleet, pki: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    plane = fleet.start_plane(
        "--tls-cert",
        str(pki / "server.pem"),
        "--tls-key",
        str(pki / "server.key"),
        "--tls-client-ca",
        str(pki / "ca.pem"),
    )
    plane.add_project("secure")
    config = tmp_path / "agentd.toml"
    config.write_text(
        f'tls = true\nca_file = "{pki / "ca.pem"}"\ntls_cert = "{pki / "client.pem"}"\n'
        f'tls_key = "{pki / "client.key"}"\n'
    )
    fleet.agent("tls-agent", extra=("--config", str(config)), wait=False)
    with tls_client(plane, pki) as client:
        wait_for(lambda: any(a.connected for a in client.list_agents()), 30, what="agentd over mTLS")
        change = client.submit_change("secure", "over TLS", [task("hello", ["true"])])
        list(client.watch(change.id))
        assert client.get_change(change.id).status == "succeeded"
    with plane.client() as plaintext, pytest.raises(Unavailable):
        plaintext.list_agents()
    with tls_client(plane, pki, with_cert=False) as no_cert, pytest.raises(Unavailable):
        no_cert.list_agents()


def test_plaintext_is_served_only_on_loopback_unless_allowed(tmp_path: pathlib.Path) -> None:
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "controlplane.cli",
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--data-dir",
            str(tmp_path / "cp"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "refusing plaintext on 0.0.0.0:0" in refused.stderr
    allowed = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controlplane.cli",
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--allow-plaintext",
            "--data-dir",
            str(tmp_path / "cp"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert allowed.stdout is not None
        assert any("listening on 0.0.0.0:" in allowed.stdout.readline() for _ in range(20))
    finally:
        allowed.terminate()
        allowed.wait(15)

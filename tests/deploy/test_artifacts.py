"""deploy/ as an operator uses it, checked by the real validators: docker-compose's own `config`,
`systemd-analyze verify` and the Kubernetes OpenAPI schemas (kubernetes-validate). Each check is also
shown to reject a broken copy, so a validator that accepts anything cannot pass this file."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"


def run(*argv: str | pathlib.Path, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_docker_build_context_leaves_out_the_venv_and_data() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".drover", ".git"} <= set(ignored)


def compose_config(path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    assert shutil.which("docker-compose"), "docker-compose (Debian package) is needed: .ci/run installs it"
    return run("docker-compose", "-f", path, "config", cwd=path.parent)


def test_compose_is_valid_and_production_shaped(tmp_path: pathlib.Path) -> None:
    done = compose_config(DEPLOY / "compose.yaml")
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    long_lived = [name for name in services if name != "agent-token"]
    assert all(services[s]["restart"] == "unless-stopped" for s in long_lived)
    assert "healthcheck" in services["postgres"] and "healthcheck" in services["controlplane"]
    assert services["controlplane"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    ports = services["controlplane"]["ports"]  # docker-compose 1.29 prints the short form
    assert [str(p).split(":")[0] for p in ports] == ["127.0.0.1"] * 2, ports  # plaintext on loopback only
    assert [str(p).split(":")[2].split("/")[0] for p in ports] == ["50051", "8080"]  # gRPC and the console
    assert "ANTHROPIC_API_KEY" in services["controlplane"]["environment"]
    agents = {s: services[s] for s in services if s.startswith("agent-") and s != "agent-token"}
    names = {spec["command"][spec["command"].index("--name") + 1] for spec in agents.values()}
    spools = {v.split(":")[0] for spec in agents.values() for v in spec["volumes"] if v.split(":")[1] == "/spool"}
    assert len(agents) >= 2 and len(names) == len(spools) == len(agents)  # stable names, own spools

    broken = tmp_path / "compose.yaml"
    broken.write_text(
        (DEPLOY / "compose.yaml").read_text().replace("    restart: unless-stopped\n", "    restrat: no\n", 1)
    )
    assert compose_config(broken).returncode != 0


def verify_unit(unit: pathlib.Path, tmp_path: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """systemd-analyze verify, with ExecStart pointed at this venv (the unit's /opt/drover path is
    where an operator installs it; verify checks that the executable exists)."""
    assert shutil.which("systemd-analyze"), "systemd-analyze is needed: .ci/run installs systemd"
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text().replace("/opt/drover/.venv/bin", str(pathlib.Path(sys.executable).parent)))
    return run("systemd-analyze", "verify", copy)


@pytest.mark.parametrize("name", ["controlplane.service", "agentd.service"])
def test_systemd_units_verify(name: str, tmp_path: pathlib.Path) -> None:
    unit = DEPLOY / "systemd" / name
    done = verify_unit(unit, tmp_path)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    text = unit.read_text()
    assert "User=drover" in text if name == "controlplane.service" else "User=root" in text
    if name == "agentd.service":  # a refused token stops agentd (exit 4); systemd must not loop on it
        assert "RestartPreventExitStatus=4" in text
    broken = tmp_path / "broken" / name
    broken.parent.mkdir()
    broken.write_text(text.replace("Restart=always", "Restart=sometimes"))
    assert "restart specifier" in verify_unit(broken, tmp_path / "broken").stderr


def test_kubernetes_manifests_validate(tmp_path: pathlib.Path) -> None:
    manifests = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
    assert [m.name for m in manifests] == ["agentd.yaml", "controlplane.yaml"]
    tool = pathlib.Path(sys.executable).parent / "kubernetes-validate"
    done = run(tool, "--strict", *manifests)
    assert done.returncode == 0, done.stdout + done.stderr
    agents = next(
        d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "agentd.yaml").read_text()) if d["kind"] == "StatefulSet"
    )
    assert agents["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "spool"
    env = agents["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "DROVER_AGENTD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in env
    plane = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "controlplane.yaml").read_text()))
    container = next(d for d in plane if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--http-listen") + 1] == "0.0.0.0:8443" and "--tls-cert" in args  # the console, TLS
    service = next(d for d in plane if d["kind"] == "Service")
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {"grpc": "grpc", "console": "console"}

    broken = tmp_path / "broken.yaml"
    broken.write_text(
        (DEPLOY / "kubernetes" / "controlplane.yaml").read_text().replace("containerPort:", "containerPrt:")
    )
    assert run(tool, "--strict", broken).returncode != 0

"""The sandbox on real commands: bubblewrap and the plain fallback, run as the supervisor runs them."""

from __future__ import annotations

import json
import os
import pathlib
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Iterator

import pytest

import agentd.rlimits
from agentd.sandbox import BubblewrapSandbox, PlainSandbox, Sandbox, SandboxPolicy, detect
from tests.conftest import wait_for

MiB = 1024 * 1024
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TZ": "UTC", "HOME": "/nonexistent"}
KINDS = [BubblewrapSandbox, PlainSandbox]


def run(sandbox: Sandbox, argv: list[str], workspace: pathlib.Path,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """As the supervisor does: its own process group, stopped whole afterwards."""
    args, child_env = sandbox.wrap(argv, workspace, dict(ENV if env is None else env))
    proc = subprocess.Popen(args, env=child_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_detect_finds_bubblewrap_here() -> None:
    sandbox = detect(SandboxPolicy())
    assert isinstance(sandbox, BubblewrapSandbox), getattr(sandbox, "reason", "")
    assert sandbox.warning() == ""


@pytest.mark.parametrize("bwrap", ["/nonexistent/bwrap", "/bin/false"])
def test_detect_falls_back_loudly_when_bubblewrap_is_missing_or_broken(bwrap: str) -> None:
    sandbox = detect(SandboxPolicy(), bwrap=bwrap)
    assert isinstance(sandbox, PlainSandbox)
    warning = sandbox.warning()
    assert warning.startswith("bubblewrap is not available")
    assert "WITHOUT a sandbox" in warning and "no filesystem or network isolation" in warning
    assert bwrap in warning  # says why


def test_the_bubblewrap_command_line(tmp_path: pathlib.Path) -> None:
    argv, env = BubblewrapSandbox(SandboxPolicy()).wrap(["git", "status"], tmp_path, {"A": "1"})
    assert env == {"A": "1"}
    bwrap = argv.index("/usr/bin/bwrap")
    launcher, command = argv[:bwrap], argv[bwrap:]
    assert launcher[:4] == [sys.executable, "-I", "-S", agentd.rlimits.__file__]
    assert launcher[-1] == "--"
    for flag in ("--unshare-all", "--die-with-parent", "--new-session"):
        assert flag in command
    assert "--share-net" not in command
    assert command[command.index("--cap-drop") + 1] == "ALL"
    assert command[command.index("--bind") + 1:command.index("--bind") + 3] == [str(tmp_path)] * 2
    assert command[command.index("--chdir") + 1] == str(tmp_path)
    bound = {command[i + 1] for i, a in enumerate(command) if a in ("--bind", "--ro-bind")}
    assert not bound & {"/", "/root", "/home", str(pathlib.Path.home())}
    assert {"/usr", "/etc"} <= bound
    assert command[-2:] == ["git", "status"]
    networked, _ = BubblewrapSandbox(SandboxPolicy(network=True)).wrap(["true"], tmp_path, {})
    assert "--share-net" in networked


def test_a_command_writes_and_reads_its_workspace(tmp_path: pathlib.Path) -> None:
    done = run(BubblewrapSandbox(SandboxPolicy()), python(
        "import os, pathlib\n"
        "pathlib.Path('made.txt').write_text('from inside')\n"
        "print(os.getcwd(), pathlib.Path('made.txt').read_text())\n"), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{tmp_path} from inside"
    assert (tmp_path / "made.txt").read_text() == "from inside"


def test_a_command_cannot_write_outside_its_workspace(tmp_path: pathlib.Path) -> None:
    workspace, sibling = tmp_path / "workspace", tmp_path / "sibling"
    workspace.mkdir()
    sibling.mkdir()
    name = f"drover-sandbox-{uuid.uuid4().hex}"
    targets = [sibling / name, pathlib.Path("/etc") / name, pathlib.Path.home() / name,
               pathlib.Path("/") / name, pathlib.Path("/usr") / name]
    try:
        for target in targets:
            done = run(BubblewrapSandbox(SandboxPolicy()), python(f"open({str(target)!r}, 'w').write('x')"),
                       workspace)
            assert done.returncode != 0, target
            assert "Error" in done.stderr, done.stderr
            assert not target.exists(), target
    finally:
        for target in targets:
            target.unlink(missing_ok=True)


def test_home_directories_are_not_visible(tmp_path: pathlib.Path) -> None:
    """Only the way down to this Python's own directories, which commands need, shows."""
    homes = sorted({"/root", "/home", str(pathlib.Path.home())})
    done = run(BubblewrapSandbox(SandboxPolicy()), python(
        f"import json, os\nprint(json.dumps({{h: sorted(os.listdir(h)) if os.path.isdir(h) else None "
        f"for h in {homes!r}}}))"), tmp_path)
    assert done.returncode == 0, done.stderr
    pythons = {f(p) for p in (sys.prefix, sys.base_prefix) for f in (os.path.abspath, os.path.realpath)}
    for home, inside in json.loads(done.stdout).items():
        leads_to_python = {pathlib.Path(p).relative_to(home).parts[0] for p in pythons
                           if p.startswith(home.rstrip("/") + "/")}
        assert inside is None or set(inside) <= leads_to_python, (home, inside)
        assert inside is None or set(inside) != set(os.listdir(home)), home


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


@pytest.mark.parametrize("network", [False, True])
def test_the_network_only_when_the_policy_allows_it(tmp_path: pathlib.Path, listener: int, network: bool) -> None:
    done = run(BubblewrapSandbox(SandboxPolicy(network=network)), python(
        f"import socket\nsocket.create_connection(('127.0.0.1', {listener}), 2).close()\nprint('connected')"),
        tmp_path)
    if network:
        assert done.returncode == 0 and done.stdout.strip() == "connected", done.stderr
    else:
        assert done.returncode != 0 and "ConnectionRefusedError" in done.stderr, done.stderr


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("env", [ENV, {"PATH": "/usr/bin:/bin"},
                                 {**ENV, "PWD": "/somewhere", "SECRET": "s3cr=t\nx"}])
def test_the_command_sees_exactly_the_env_given(tmp_path: pathlib.Path, kind: type, env: dict[str, str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DROVER_TEST_LEAK", "from the test process")
    done = run(kind(SandboxPolicy()), ["/usr/bin/env", "-0"], tmp_path, env)
    assert done.returncode == 0, done.stderr
    seen = dict(entry.split("=", 1) for entry in done.stdout.split("\0") if entry)
    assert seen == env


@pytest.mark.parametrize("kind", KINDS)
def test_the_file_size_limit(tmp_path: pathlib.Path, kind: type) -> None:
    sandbox = kind(SandboxPolicy(file_bytes=1 * MiB))
    small = run(sandbox, python("open('small', 'wb').write(b'x' * 512 * 1024)"), tmp_path)
    assert small.returncode == 0, small.stderr
    big = run(sandbox, python("f = open('big', 'wb')\nf.write(b'x' * 2 * 1024 * 1024)\nf.close()"), tmp_path)
    assert big.returncode != 0 and "File too large" in big.stderr, big.stderr
    assert (tmp_path / "big").stat().st_size <= 1 * MiB


@pytest.mark.parametrize("kind", KINDS)
def test_the_memory_limit(tmp_path: pathlib.Path, kind: type) -> None:
    sandbox = kind(SandboxPolicy(memory_bytes=256 * MiB))
    fits = run(sandbox, python("b = bytearray(64 * 1024 * 1024)\nprint(len(b))"), tmp_path)
    assert fits.returncode == 0, fits.stderr
    too_big = run(sandbox, python("b = bytearray(512 * 1024 * 1024)\nprint(len(b))"), tmp_path)
    assert too_big.returncode != 0 and "MemoryError" in too_big.stderr, too_big.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_the_cpu_limit(tmp_path: pathlib.Path, kind: type) -> None:
    started = time.monotonic()
    done = run(kind(SandboxPolicy(cpu_seconds=1)), python("while True: pass"), tmp_path)
    assert done.returncode != 0
    assert time.monotonic() - started < 30


def test_plain_sandbox_runs_in_the_workspace_without_isolation(tmp_path: pathlib.Path) -> None:
    outside = tmp_path / "outside.txt"
    (tmp_path / "ws").mkdir()
    done = run(PlainSandbox(SandboxPolicy()), python(
        f"import os\nopen({str(outside)!r}, 'w').write('x')\nprint(os.getcwd())"), tmp_path / "ws")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "ws") and outside.exists()  # hence the warning


def test_a_group_kill_ends_everything_in_the_sandbox(tmp_path: pathlib.Path) -> None:
    """The supervisor's cancel: a signal to the process group also ends what the command
    detached into its own session inside the sandbox."""
    marker = f"{time.time() % 1000 + 1000:.6f}"
    argv, env = BubblewrapSandbox(SandboxPolicy()).wrap(
        ["/bin/sh", "-c", f"setsid sleep {marker} & sleep {marker}"], tmp_path, ENV)
    proc = subprocess.Popen(argv, env=env, start_new_session=True)

    def sleepers() -> int:
        found = 0
        for entry in pathlib.Path("/proc").iterdir():
            try:
                found += (entry / "cmdline").read_bytes() == f"sleep\0{marker}\0".encode()
            except OSError:
                pass
        return found

    wait_for(lambda: sleepers() == 2, what="both sleepers")
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=10)
    wait_for(lambda: sleepers() == 0, timeout=10, what="the sandbox to end")


@pytest.fixture
def nobody_workspace() -> Iterator[pathlib.Path]:
    """A workspace the user `nobody` owns (tmp_path is under a directory only root may enter)."""
    if os.geteuid() != 0:
        pytest.skip("running as another user needs root")
    path = pathlib.Path(tempfile.mkdtemp(prefix="drover-sandbox-"))
    entry = pwd.getpwnam("nobody")
    os.chown(path, entry.pw_uid, entry.pw_gid)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_the_command_runs_as_the_policy_user(nobody_workspace: pathlib.Path) -> None:
    policy = SandboxPolicy(user="nobody")
    sandbox = detect(policy)
    done = run(sandbox, ["/bin/sh", "-c", "id -u; id -G; touch made"], nobody_workspace)
    nobody = pwd.getpwnam("nobody")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(nobody.pw_uid), str(nobody.pw_gid)]
    assert (nobody_workspace / "made").stat().st_uid == nobody.pw_uid


def test_the_process_limit(nobody_workspace: pathlib.Path) -> None:
    """RLIMIT_NPROC counts a user's processes, so it binds only a user other than root."""
    sandbox = detect(SandboxPolicy(user="nobody", processes=20))
    many = run(sandbox, ["/bin/sh", "-c", "for i in $(seq 40); do sleep 5 & done; wait"], nobody_workspace)
    assert many.returncode != 0 and "fork" in many.stderr, many.stderr


def test_an_unknown_user_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        BubblewrapSandbox(SandboxPolicy(user="no-such-user-here")).wrap(["true"], tmp_path, {})

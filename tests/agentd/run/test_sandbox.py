"""The sandbox on real commands: bubblewrap (as root, and through a user namespace) and the unsafe
plain mode, run as the supervisor runs them."""

from __future__ import annotations

import json
import os
import pathlib
import pwd
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator

import pytest

import agentd.run.launcher
import agentd.run.rlimits
from agentd.daemon import isolation, run_slots
from agentd.daemon.config import AgentConfig
from agentd.errors import StartRefused
from agentd.run import etc_view
from agentd.run.confined import Confined, ready_pipe
from agentd.run.etc_view import ETC_ALLOWED
from agentd.run.sandbox import (
    LAUNCHER_INSIDE,
    NATIVE_INSIDE,
    BubblewrapSandbox,
    PlainSandbox,
    Sandbox,
    SandboxPolicy,
    for_mode,
)
from tests.conftest import ROOT, wait_for

MiB = 1024 * 1024
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "TZ": "UTC", "HOME": "/nonexistent"}
KINDS = [BubblewrapSandbox, PlainSandbox]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="running as another user needs root")


def run(
    sandbox: Sandbox,
    argv: list[str],
    workspace: pathlib.Path,
    env: dict[str, str] | None = None,
    writable: pathlib.Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """As the supervisor does: its own process group, everything of the command stopped afterwards."""
    read, write = ready_pipe() if sandbox.isolated else (None, None)
    with sandbox.wrap(argv, workspace, dict(ENV if env is None else env), writable=writable, ready_fd=write) as launch:
        args = launch.argv
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **launch.spawn_kwargs(),
        )
    if write is not None:
        os.close(write)
    processes = Confined(proc.pid, read)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        processes.kill()
        processes.close()
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def holding(marker: str) -> list[int]:
    """Host pids of processes whose command line holds `marker`."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (OSError, ValueError):
            pass
    return found


# --- the mode: bubblewrap, or nothing when agentd was told so --------------------------------------


def test_the_probe_finds_bubblewrap_here() -> None:
    assert BubblewrapSandbox(SandboxPolicy()).probe() == ""
    if os.geteuid() == 0:
        assert BubblewrapSandbox(SandboxPolicy(user="nobody")).probe() == ""


@pytest.mark.parametrize("bwrap", ["/nonexistent/bwrap", "/bin/false", "/bin/true"])
def test_the_probe_says_why_bubblewrap_is_missing_or_broken(bwrap: str) -> None:
    """/bin/true exits 0 but never starts the launcher: only the launcher's report proves the sandbox."""
    reason = BubblewrapSandbox(SandboxPolicy(), bwrap=bwrap).probe()
    assert bwrap in reason and ("not installed" in reason or "cannot create namespaces" in reason)


def test_a_run_gets_the_sandbox_its_spec_names_and_never_a_weaker_one() -> None:
    assert isinstance(for_mode("bubblewrap", SandboxPolicy(), "/nonexistent/bwrap"), BubblewrapSandbox)
    assert isinstance(for_mode("none", SandboxPolicy()), PlainSandbox)
    with pytest.raises(ValueError, match="unknown sandbox mode"):
        for_mode("auto", SandboxPolicy())


@pytest.mark.parametrize(
    "configured, euid, expected",
    [
        ("", 0, True),  # root: each run slot its own uid
        ("builder", 0, False),  # one configured session user, shared by all runs (weaker)
        ("", 1000, False),  # not root: runs execute as agentd's own user
    ],
)
def test_who_runs_execute_as(configured: str, euid: int, expected: bool) -> None:
    assert run_slots.slotted(configured, euid) is expected


def test_agentd_decides_at_start_and_refuses_without_a_working_sandbox() -> None:
    ready = isolation.prepare(AgentConfig())
    assert "each in bubblewrap" in ready.said and not ready.warning and not ready.config.unsafe_no_sandbox
    if os.geteuid() == 0:
        base = AgentConfig().uid_base  # the default spool's own block, from 2,000,000,000
        assert f"each run slot executes as a uid of its own ({base}..{base})" in ready.said and base >= 2_000_000_000
    with pytest.raises(StartRefused, match="apt-get install bubblewrap") as refused:
        isolation.prepare(AgentConfig(bwrap="/nonexistent/bwrap"))
    assert "--unsafe-no-sandbox" in str(refused.value)
    unsafe = isolation.prepare(AgentConfig(bwrap="/nonexistent/bwrap", unsafe_no_sandbox=True))
    assert "WITHOUT a sandbox" in unsafe.said and "WITHOUT a sandbox" in unsafe.warning
    with pytest.raises(StartRefused, match="does not exist"):
        isolation.prepare(AgentConfig(session_user="no-such-user-here"))


# --- the command line ------------------------------------------------------------------------------


def _bound(command: list[str]) -> dict[str, str]:
    """destination -> source of every bind."""
    return {command[i + 2]: command[i + 1] for i, a in enumerate(command) if a in ("--bind", "--ro-bind")}


@pytest.mark.parametrize(
    ("mode", "size", "expected"),
    [
        (stat.S_IFREG | 0o644, 3_000, True),
        (stat.S_IFREG | 0o444, 3_000, True),
        (stat.S_IFREG | 0o640, 3_000, False),  # the host keeps it from others: bound, its mode kept
        (stat.S_IFREG | 0o600, 3_000, False),
        (stat.S_IFREG | 0o644, etc_view.COPY_BYTES + 1, False),
        (stat.S_IFDIR | 0o755, 4_096, False),
    ],
)
def test_an_etc_file_is_copied_only_when_anyone_may_read_it_already(mode: int, size: int, expected: bool) -> None:
    assert etc_view.copied(os.stat_result((mode, 1, 1, 1, 0, 0, size, 0, 0, 0))) is expected


def test_the_bubblewrap_command_line_as_root(tmp_path: pathlib.Path) -> None:
    with BubblewrapSandbox(SandboxPolicy(user="nobody"), privileged=True).wrap(
        ["git", "status"], tmp_path / "repo", {"A": "1"}, writable=tmp_path
    ) as launch:
        argv = launch.argv
        # bwrap, root outside any namespace, gets a fixed environment in "/"; the command's own
        # environment is in a memory file only the launcher reads
        assert launch.env == {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"} and launch.cwd == "/"
        env_fd = int(argv[argv.index("--env-fd") + 1])
        # and the seccomp filter (agentd/run/seccomp.py) in another, which bwrap reads
        filter_fd = int(argv[argv.index("--seccomp") + 1])
        # and each small file of the /etc allowlist in one more, its content copied into the sandbox
        copied = {argv[i + 2]: int(argv[i + 1]) for i, a in enumerate(argv) if a == "--file"}
        assert launch.owned == (env_fd, filter_fd, *copied.values()) and set(launch.owned) <= set(launch.pass_fds)
        assert os.pread(env_fd, 100, 0) == b"A=1\0"
        assert "/etc/passwd" in copied and set(copied) <= {f"/etc/{name}" for name in ETC_ALLOWED}
        for path, fd in copied.items():
            assert os.pread(fd, 1 << 20, 0) == pathlib.Path(path).read_bytes()
        assert all(argv[i - 2 : i] == ["--perms", "0444"] for i, a in enumerate(argv) if a == "--file")
    end = argv.index("--")
    command, inside = argv[:end], argv[end + 1 :]
    assert command[0] == "/usr/bin/bwrap"
    # no user namespace (setgroups() would fail in it): each namespace by name, and no network
    assert "--unshare-all" not in command and "--unshare-user" not in command
    for flag in (
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",
        "--die-with-parent",
        "--new-session",
    ):
        assert flag in command
    caps = [command[i + 1] for i, a in enumerate(command) if a in ("--cap-drop", "--cap-add")]
    assert caps == ["ALL", "CAP_SETUID", "CAP_SETGID"]  # only for the launcher to drop to the user
    assert command[command.index("--perms") + 1 : command.index("--perms") + 3] == ["0755", "--dir"]
    tmpfs = command.index("/tmp") - 1
    assert command[tmpfs - 4 : tmpfs + 2] == ["--perms", "1777", "--size", str(1024**3), "--tmpfs", "/tmp"]
    shm = command.index("/dev/shm") - 1
    assert command[shm - 4 : shm + 2] == ["--perms", "1777", "--size", str(1024**3), "--tmpfs", "/dev/shm"]
    bound = _bound(command)
    assert bound[str(tmp_path)] == str(tmp_path) and command[command.index("--bind") + 2] == str(tmp_path)
    assert inside[inside.index("--chdir") + 1] == str(tmp_path / "repo")  # once it is the user
    assert bound[NATIVE_INSIDE] == agentd.run.launcher.binary()  # the native launcher, built here
    assert not set(bound) & {"/", "/etc", "/root", "/home", "/run", str(pathlib.Path.home())}
    etc = {path.removeprefix("/etc/") for path in [*bound, *copied] if path.startswith("/etc/")}
    assert "/usr" in bound and etc and etc <= set(ETC_ALLOWED)
    assert "/etc/ssl/certs" in bound  # a directory is bound, read-only
    for secret in ("shadow", "gshadow", "sudoers", "ssh", "drover", "ssl/private"):
        assert not any(name == secret or name.startswith(secret + "/") for name in ETC_ALLOWED)
    # the launcher runs inside: limits, then the user, then the command
    nobody = pwd.getpwnam("nobody")
    assert inside[:1] == [NATIVE_INSIDE]
    assert inside[inside.index("--uid") + 1] == str(nobody.pw_uid)
    assert inside[-2:] == ["git", "status"]
    networked = BubblewrapSandbox(SandboxPolicy(network=True), privileged=True).wrap(["true"], tmp_path, {}).argv
    assert "--unshare-net" not in networked and "--cap-add" not in networked  # no user to drop to


def test_without_a_c_compiler_the_python_launcher_runs_inside(tmp_path: pathlib.Path) -> None:
    """The native launcher (agentd/run/launcher.c) is the same steps as rlimits.py; without it, rlimits.py."""
    sandbox = BubblewrapSandbox(SandboxPolicy(user="nobody"), privileged=True, native=False)
    with sandbox.wrap(["true"], tmp_path, {}) as launch:
        argv = launch.argv
    assert _bound(argv)[LAUNCHER_INSIDE] == agentd.run.rlimits.__file__
    assert argv[argv.index("--") + 1 :][:4] == [sys.executable, "-I", "-S", LAUNCHER_INSIDE]
    assert NATIVE_INSIDE not in _bound(argv)


def test_the_bubblewrap_command_line_as_another_user(tmp_path: pathlib.Path) -> None:
    argv = BubblewrapSandbox(SandboxPolicy(), privileged=False).wrap(["true"], tmp_path, {}).argv
    command = argv[: argv.index("--")]
    assert "--unshare-all" in command and "--share-net" not in command and "--cap-add" not in command
    networked = BubblewrapSandbox(SandboxPolicy(network=True), privileged=False).wrap(["true"], tmp_path, {}).argv
    assert "--share-net" in networked


# --- what a command can do -------------------------------------------------------------------------


def test_a_command_writes_and_reads_its_workspace(tmp_path: pathlib.Path) -> None:
    (tmp_path / "repo").mkdir()
    done = run(
        BubblewrapSandbox(SandboxPolicy()),
        python(
            "import os, pathlib\n"
            "pathlib.Path('made.txt').write_text('from inside')\n"
            "pathlib.Path('../home').mkdir()\n"
            "print(os.getcwd(), pathlib.Path('made.txt').read_text())\n"
        ),
        tmp_path / "repo",
        writable=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{tmp_path / 'repo'} from inside"
    assert (tmp_path / "repo" / "made.txt").read_text() == "from inside" and (tmp_path / "home").is_dir()


def test_a_command_cannot_write_outside_its_workspace(tmp_path: pathlib.Path) -> None:
    workspace, sibling = tmp_path / "workspace", tmp_path / "sibling"
    workspace.mkdir()
    sibling.mkdir()
    name = f"drover-sandbox-{uuid.uuid4().hex}"
    targets = [
        sibling / name,
        pathlib.Path("/etc") / name,
        pathlib.Path.home() / name,
        pathlib.Path("/") / name,
        pathlib.Path("/usr") / name,
        pathlib.Path("/tmp") / name,
    ]
    try:
        for target in targets:
            done = run(BubblewrapSandbox(SandboxPolicy()), python(f"open({str(target)!r}, 'w').write('x')"), workspace)
            assert not target.exists(), target  # /tmp is the sandbox's own: the write lands there
            if target.parent != pathlib.Path("/tmp"):
                assert done.returncode != 0 and "Error" in done.stderr, (target, done.stderr)
    finally:
        for target in targets:
            target.unlink(missing_ok=True)


def test_home_directories_are_not_visible(tmp_path: pathlib.Path) -> None:
    """Only the way down to this Python's own directories, which commands need, shows."""
    homes = sorted({"/root", "/home", str(pathlib.Path.home())})
    done = run(
        BubblewrapSandbox(SandboxPolicy()),
        python(
            f"import json, os\nprint(json.dumps({{h: sorted(os.listdir(h)) if os.path.isdir(h) else None "
            f"for h in {homes!r}}}))"
        ),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    pythons = {f(p) for p in (sys.prefix, sys.base_prefix) for f in (os.path.abspath, os.path.realpath)}
    for home, inside in json.loads(done.stdout).items():
        leads_to_python = {
            pathlib.Path(p).relative_to(home).parts[0] for p in pythons if p.startswith(home.rstrip("/") + "/")
        }
        assert inside is None or set(inside) <= leads_to_python, (home, inside)
        assert inside is None or set(inside) != set(os.listdir(home)), home


def test_etc_shows_only_its_allowlist_and_tmp_is_private(tmp_path: pathlib.Path) -> None:
    marker = tmp_path.parent / f"drover-marker-{uuid.uuid4().hex}"
    marker.write_text("outside")
    try:
        done = run(
            BubblewrapSandbox(SandboxPolicy()),
            python(
                "import json, os\n"
                "found = []\n"
                "for parent, dirs, files in os.walk('/etc'):\n"
                "    found += [os.path.relpath(os.path.join(parent, n), '/etc') for n in dirs + files]\n"
                f"print(json.dumps([found, oct(os.stat('/tmp').st_mode), os.path.exists({str(marker)!r})]))"
            ),
            tmp_path,
        )
    finally:
        marker.unlink()
    assert done.returncode == 0, done.stderr
    found, tmp_mode, sees_marker = json.loads(done.stdout)

    def allowed(path: str) -> bool:  # an allowlisted entry, inside one, or a directory leading to one
        return any(path == a or path.startswith(a + "/") or a.startswith(path + "/") for a in ETC_ALLOWED)

    assert found and all(allowed(f) for f in found), [f for f in found if not allowed(f)]
    assert not {"shadow", "gshadow", "sudoers", "ssh", "drover"} & set(found)
    assert tmp_mode == oct(0o41777) and not sees_marker


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


@pytest.mark.parametrize("network", [False, True])
def test_the_network_only_when_the_policy_allows_it(tmp_path: pathlib.Path, listener: int, network: bool) -> None:
    done = run(
        BubblewrapSandbox(SandboxPolicy(network=network)),
        python(f"import socket\nsocket.create_connection(('127.0.0.1', {listener}), 2).close()\nprint('connected')"),
        tmp_path,
    )
    if network:
        assert done.returncode == 0 and done.stdout.strip() == "connected", done.stderr
    else:
        assert done.returncode != 0 and "ConnectionRefusedError" in done.stderr, done.stderr


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("env", [ENV, {"PATH": "/usr/bin:/bin"}, {**ENV, "PWD": "/somewhere", "SECRET": "s3cr=t\nx"}])
def test_the_command_sees_exactly_the_env_given(
    tmp_path: pathlib.Path, kind: type, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
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
    done = run(
        PlainSandbox(SandboxPolicy()),
        python(f"import os\nopen({str(outside)!r}, 'w').write('x')\nprint(os.getcwd())"),
        tmp_path / "ws",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "ws") and outside.exists()  # hence --unsafe-no-sandbox


# --- nothing outlives the command ------------------------------------------------------------------


def test_what_the_command_detached_dies_when_it_ends(tmp_path: pathlib.Path) -> None:
    """setsid and a double fork both stay in the PID namespace, which ends with the command."""
    marker = f"{time.time() % 1000 + 2000:.6f}"
    done = run(
        BubblewrapSandbox(SandboxPolicy()),
        [
            "/bin/sh",
            "-c",
            f"(setsid sleep {marker} >/dev/null 2>&1 &); (sh -c 'sleep {marker} &' >/dev/null 2>&1 &); "
            f"sleep 0.3; echo left",
        ],
        tmp_path,
    )
    assert done.returncode == 0 and done.stdout == "left\n", done.stderr
    wait_for(lambda: not holding(f"sleep\0{marker}"), timeout=10, what="the detached sleepers to be gone")


def test_killing_bubblewrap_ends_everything_in_the_sandbox(tmp_path: pathlib.Path) -> None:
    marker = f"{time.time() % 1000 + 1000:.6f}"
    with BubblewrapSandbox(SandboxPolicy()).wrap(
        ["/bin/sh", "-c", f"setsid sleep {marker} & sleep {marker}"], tmp_path, ENV
    ) as launch:
        proc = subprocess.Popen(launch.argv, **launch.spawn_kwargs())
    wait_for(lambda: len(holding(f"sleep\0{marker}")) == 2, what="both sleepers")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    wait_for(lambda: not holding(f"sleep\0{marker}"), timeout=10, what="the sandbox to end")


def test_terminate_reaches_every_process_of_the_namespace_and_lets_them_finish(tmp_path: pathlib.Path) -> None:
    """bwrap forwards no signal and the command is in its own session: the supervisor signals the
    namespace's processes themselves, and the command gets to clean up."""
    marker = f"{time.time() % 1000 + 3000:.6f}"
    read, write = ready_pipe()
    with BubblewrapSandbox(SandboxPolicy()).wrap(
        ["/bin/sh", "-c", f"trap 'echo cleaned up; exit 3' TERM; (setsid sleep {marker} &); sleep {marker} & wait"],
        tmp_path,
        ENV,
        ready_fd=write,
    ) as launch:
        proc = subprocess.Popen(launch.argv, stdout=subprocess.PIPE, text=True, **launch.spawn_kwargs())
    os.close(write)
    processes = Confined(proc.pid, read)
    wait_for(lambda: len(holding(f"sleep\0{marker}")) == 2, what="both sleepers")
    assert processes.started and processes.namespace.startswith("pid:[")
    assert processes.namespace != os.readlink("/proc/self/ns/pid")
    processes.terminate()
    out, _ = proc.communicate(timeout=10)
    processes.close()
    assert out == "cleaned up\n" and proc.returncode == 3
    wait_for(lambda: not holding(f"sleep\0{marker}"), timeout=10, what="the namespace to end")


def test_a_sandbox_that_does_not_come_up_is_told_apart_from_a_failing_command(tmp_path: pathlib.Path) -> None:
    failing = run(BubblewrapSandbox(SandboxPolicy()), ["/bin/sh", "-c", "exit 1"], tmp_path)
    assert failing.returncode == 1
    read, write = ready_pipe()
    with BubblewrapSandbox(SandboxPolicy()).wrap(["true"], tmp_path / "missing", ENV, ready_fd=write) as launch:
        proc = subprocess.Popen(launch.argv, stderr=subprocess.PIPE, text=True, **launch.spawn_kwargs())
    os.close(write)
    _, err = proc.communicate(timeout=10)
    processes = Confined(proc.pid, read)
    assert proc.returncode != 0 and "bwrap" in err and not processes.started


# --- the session user ------------------------------------------------------------------------------


@pytest.fixture
def nobody_workspace(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A workspace the user `nobody` owns. As root bubblewrap binds it whatever its parents allow."""
    if os.geteuid() != 0:
        pytest.skip("running as another user needs root")
    entry = pwd.getpwnam("nobody")
    os.chown(tmp_path, entry.pw_uid, entry.pw_gid)
    return tmp_path


def test_the_command_runs_as_the_policy_user_without_capabilities(nobody_workspace: pathlib.Path) -> None:
    done = run(
        BubblewrapSandbox(SandboxPolicy(user="nobody")),
        ["/bin/sh", "-c", "id -u; id -G; grep -E '^(CapPrm|CapEff|CapAmb|NoNewPrivs):' /proc/self/status; touch made"],
        nobody_workspace,
    )
    nobody = pwd.getpwnam("nobody")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines[:2] == [str(nobody.pw_uid), str(nobody.pw_gid)]
    status = dict(line.split(":\t") for line in lines[2:] if line)
    assert status == {"CapPrm": "0" * 16, "CapEff": "0" * 16, "CapAmb": "0" * 16, "NoNewPrivs": "1"}
    assert (nobody_workspace / "made").stat().st_uid == nobody.pw_uid


def test_the_process_limit(nobody_workspace: pathlib.Path) -> None:
    """RLIMIT_NPROC counts a user's processes, so it binds only a user other than root."""
    sandbox = BubblewrapSandbox(SandboxPolicy(user="nobody", processes=20))
    many = run(sandbox, ["/bin/sh", "-c", "for i in $(seq 40); do sleep 5 & done; wait"], nobody_workspace)
    assert many.returncode != 0 and "fork" in many.stderr, many.stderr


def test_an_unknown_user_is_refused(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        BubblewrapSandbox(SandboxPolicy(user="no-such-user-here")).wrap(["true"], tmp_path, {})


AGENTD_PATHS = [str(ROOT), str(ROOT / "sdk"), sysconfig.get_paths()["purelib"]]
"""agentd and what it imports (drover.core, and through it grpc): this checkout and this environment's
packages, for a Python the user nobody can run."""


def run_as_nobody(code: str) -> subprocess.CompletedProcess[str]:
    """`code` in the system's Python as the user nobody: agentd as a user that is not root."""
    nobody = pwd.getpwnam("nobody")
    return subprocess.run(
        ["/usr/bin/python3", "-I", "-c", code],
        capture_output=True,
        text=True,
        user=nobody.pw_uid,
        group=nobody.pw_gid,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "TMPDIR": "/tmp"},
        timeout=60,
    )


UNPRIVILEGED = """
import json, os, pathlib, subprocess, sys, tempfile
sys.path[:0] = {paths!r}
from agentd.run.sandbox import BubblewrapSandbox, SandboxPolicy
sandbox = BubblewrapSandbox(SandboxPolicy())
work = pathlib.Path(tempfile.mkdtemp())
launch = sandbox.wrap(["/bin/sh", "-c", "id -u; ls /proc | grep -c '^[0-9]'"], work, {{"PATH": "/usr/bin:/bin"}})
done = subprocess.run(launch.argv, capture_output=True, text=True, **launch.spawn_kwargs())
print(json.dumps([sandbox.privileged, sandbox.probe(), done.returncode, done.stdout, done.stderr]))
"""


@needs_root
@pytest.mark.skipif(not os.path.exists("/usr/bin/python3"), reason="needs a Python the user nobody can run")
def test_agentd_that_is_not_root_sandboxes_through_a_user_namespace() -> None:
    nobody = pwd.getpwnam("nobody")
    done = run_as_nobody(UNPRIVILEGED.format(paths=AGENTD_PATHS))
    assert done.returncode == 0, done.stderr
    privileged, probe, code, out, err = json.loads(done.stdout)
    assert not privileged and probe == "" and code == 0, err
    uid, processes = out.split()
    assert uid == str(nobody.pw_uid) and int(processes) <= 5  # its own PID namespace: init, sh, ls, grep


@needs_root
def test_multiprocessing_works_as_the_runs_user(nobody_workspace: pathlib.Path) -> None:
    """POSIX semaphores live in /dev/shm: a private one the run's user may write (it was root's 0755)."""
    code = "import multiprocessing as m; lock = m.Lock(); print(m.Pool(2).map(abs, [-1, -2]))"
    done = run(BubblewrapSandbox(SandboxPolicy(user="nobody")), python(code), nobody_workspace)
    assert done.returncode == 0 and done.stdout == "[1, 2]\n", done.stderr

"""Real processes on loopback: a control plane, agentd daemons, git repositories in tmp_path."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
import pygit2
import pytest
import sqlalchemy

from drover import Client
from drover.testing import fake_anthropic as fake

T = TypeVar("T")
ROOT = pathlib.Path(__file__).resolve().parent.parent
"""The repository's top folder."""
PG_ADMIN_URL = os.environ.get("DROVER_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

SLOW_FOLDERS = ("fleet", "security")
"""Whole-system tests: a control plane and agentds as processes, real runtimes, fresh virtual environments."""
SLOW_FIXTURES = frozenset({"fleet", "pg_fleet"})
"""Fixtures that start real daemons; a test using one is slow wherever it lives."""
SLOW_MODULES = frozenset(
    {
        "test_packaging.py",  # pip installs the checkout into a fresh virtual environment
        "test_startup_time.py",  # times every console script, best of 3
        "test_refusals.py",  # agentd processes against a control plane
        "test_cli_habits.py",
        "test_cli.py",
        "test_token_files.py",
        "test_benchmarks.py",  # runs every benchmark once
        "test_budget_concurrency.py",  # 50 reserver processes against one meter, SQLite and PostgreSQL
        "test_notification_replicas.py",  # control-plane replicas as processes, the leader killed mid-delivery
    }
)


SHARED_FIXTURE_MODULES = frozenset(
    {
        "test_console.py",  # a fleet for the module
        "test_packaging.py",  # a fresh venv for the module
        "test_2_command_task_cannot_escape.py",
        "test_r2_1_task_env_never_reaches_root.py",
        "test_r2_3_runs_cannot_starve_each_other.py",
        "test_r2_7_seccomp.py",
        "test_r2_7_undecodable_and_argv.py",
    }
)
"""Modules whose tests share a module-scoped fleet or venv: kept on one worker (an xdist_group), so the
fixture is made once, not once per worker."""
RETRY_DELAY_SECONDS = "0.5"
"""`--retry-delay-seconds` of the control planes tests start (the default, 5 s, is the production one)."""
WORKERS = 2 if (os.cpu_count() or 1) >= 2 else 0
"""Parallel workers of `pytest` (pytest-xdist) unless -n is given (docs/development.md). On 2 cores the whole
suite took 21:21 with 2 workers against 41 minutes serially (3,269 tests, 2026-12-04): its whole-system
tests spend much of their time waiting on daemons, not computing. A third worker only adds CPU load under
the timing-sensitive tests (startup times, 50 reserver processes, daemons that must start within 60 s)."""


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """`pytest` runs WORKERS workers, tests spread one by one except an xdist_group's, which share one
    worker. `-n N` chooses another count, `-n 0` or `-p no:xdist` runs serially in this process."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if config.option.numprocesses is None and not config.option.collectonly and not config.option.usepdb:
        config.option.numprocesses = WORKERS
    if config.option.dist == "no" and config.option.numprocesses:
        config.option.dist = "loadgroup"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`pytest -m "not slow"` is the fast set a developer runs while working; CI runs everything."""
    tests = ROOT / "tests"
    for item in items:
        parts = item.path.relative_to(tests).parts
        fixtures = set(getattr(item, "fixturenames", ()))
        if parts[0] in SLOW_FOLDERS or item.path.name in SLOW_MODULES or fixtures & SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)
        if item.path.name in SHARED_FIXTURE_MODULES:
            item.add_marker(pytest.mark.xdist_group(item.path.name))


def wait_for(check: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, what: str = "") -> T:
    """Poll `check` until it returns something truthy; fail the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or check}")
        time.sleep(interval)


def holds(check: Callable[[], object], seconds: float, interval: float = 0.05, what: str = "") -> None:
    """Assert `check` stays truthy for `seconds`: for the event that must not come (a reconnect, a model
    call, a death) where no later event rules it out. Fails as soon as it comes, saying what broke."""
    deadline = time.monotonic() + seconds
    while True:
        if not check():
            raise AssertionError(
                f"no longer true after {seconds - (deadline - time.monotonic()):.1f} s: {what or check}"
            )
        if time.monotonic() > deadline:
            return
        time.sleep(interval)


def _log_tail(path: pathlib.Path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def terminate(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def make_repo(path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    """A git repository at `path` with `files` in one commit on main."""
    repo = pygit2.init_repository(str(path), initial_head="main")
    for name, text in files.items():
        (path / name).write_text(text)
    repo.index.add_all()
    repo.index.write()
    sig = pygit2.Signature("Test", "test@drover.invalid")
    repo.create_commit("HEAD", sig, sig, "initial", repo.index.write_tree(), [])
    return path


@dataclasses.dataclass
class ControlPlane:
    data_dir: pathlib.Path
    database_url: str = ""
    args: tuple[str, ...] = ()
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    extra_env: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def admin_token(self) -> str:
        return (self.data_dir / "tokens" / "admin.token").read_text().strip()

    @property
    def agent_token_file(self) -> pathlib.Path:
        return self.data_dir / "tokens" / "agent.token"

    def env(self) -> dict[str, str]:
        # A retry starts half a second after the failed run, not 5 s: tests wait on the retry, not the delay.
        env = dict(os.environ, DROVER_LOG_LEVEL="INFO", DROVER_RETRY_DELAY_SECONDS=RETRY_DELAY_SECONDS)
        if self.database_url:
            env["DROVER_DATABASE_URL"] = self.database_url
        env.update(self.extra_env)
        return env

    def start(self) -> ControlPlane:
        self.starts += 1
        log = self.data_dir / f"controlplane-{self.starts}.log"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "controlplane.cli",
                    "serve",
                    "--data-dir",
                    str(self.data_dir),
                    "--listen",
                    f"127.0.0.1:{self.port}",
                    *self.args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
            )

        def listening() -> int:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"control plane exited {self.proc.returncode}:\n{_log_tail(log)}")
            found = re.search(r"listening on 127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
            return int(found.group(1)) if found else 0

        self.port = wait_for(listening, 60, what="the control plane to listen")
        return self

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "controlplane.cli", *args, "--data-dir", str(self.data_dir)],
            capture_output=True,
            text=True,
            env=self.env(),
            check=True,
        )

    def add_project(self, name: str, repo: str = "", branch: str = "main", pool: str = "") -> None:
        args = ["project", "add", name, "--repo", repo, "--branch", branch]
        if pool:
            args += ["--pool", pool]
        self.cli(*args)

    def client(self, token: str | None = None) -> Client:
        return Client(self.target, token=token if token is not None else self.admin_token)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        terminate(self.proc)


@dataclasses.dataclass
class AgentD:
    name: str
    plane: ControlPlane
    root: pathlib.Path
    capacity: int = 1
    labels: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    token_file: pathlib.Path | None = None
    """The agent token; default: the one the control plane wrote on first start (the default pool)."""

    @property
    def spool(self) -> pathlib.Path:
        return self.root / "spool"

    @property
    def work_dir(self) -> pathlib.Path:
        return self.root / "work"

    def start(self) -> AgentD:
        self.starts += 1
        self.root.mkdir(parents=True, exist_ok=True)
        args = [
            sys.executable,
            "-m",
            "agentd.cli",
            "--control-plane",
            self.plane.target,
            "--name",
            self.name,
            "--token-file",
            str(self.token_file or self.plane.agent_token_file),
            "--capacity",
            str(self.capacity),
            "--work-dir",
            str(self.work_dir),
            "--spool-dir",
            str(self.spool),
            *self.extra,
        ]
        for label in self.labels:
            args += ["--label", label]
        # This interpreter's directory first, so `python` inside the sandbox is the one with pytest.
        env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', '')}")
        with open(self.root / f"agentd-{self.starts}.log", "wb") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        return self

    def log(self) -> str:
        return "\n".join(_log_tail(p) for p in sorted(self.root.glob("agentd-*.log")))

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        terminate(self.proc)


class Fleet:
    """A control plane and its agents for one test; everything is stopped at the end."""

    def __init__(self, tmp: pathlib.Path, database_url: str = "") -> None:
        self.tmp = tmp
        self.plane = ControlPlane(tmp / "cp", database_url)
        self.agents: list[AgentD] = []

    def start_plane(self, *args: str) -> ControlPlane:
        self.plane.args = args
        return self.plane.start()

    def agent(
        self,
        name: str,
        capacity: int = 1,
        labels: tuple[str, ...] = (),
        extra: tuple[str, ...] = (),
        wait: bool = True,
        pool: str = "",
    ) -> AgentD:
        """An agentd; one of `pool` P (or labelled pool=P) gets an agent token of pool P of its own."""
        pool = pool or next((label.split("=", 1)[1] for label in labels if label.startswith("pool=")), "")
        root = self.tmp / f"agent-{name}"
        token_file = None
        if pool:
            token_file = root / "agent.token"
            self.plane.cli(
                "token", "create", "--kind", "agent", "--name", name, "--pool", pool, "--out", str(token_file)
            )
        agent = AgentD(name, self.plane, root, capacity, labels, extra, token_file=token_file).start()
        self.agents.append(agent)
        if wait:
            self.wait_connected(name)
        return agent

    def wait_connected(self, name: str, timeout: float = 30) -> None:
        with self.plane.client() as client:
            wait_for(
                lambda: any(a.name == name and a.connected for a in client.list_agents()),
                timeout,
                what=f"agent {name} to connect",
            )

    def stop_supervisors(self) -> None:
        """Supervisors are detached on purpose (runs outlive agentd); end this test's ones."""
        subprocess.run(["pkill", "-9", "-f", f"supervisor {self.tmp}"], check=False)

    def stop(self) -> None:
        for agent in self.agents:
            agent.stop()
        self.plane.stop()
        self.stop_supervisors()
        unmount_under(self.tmp)


def unmount_under(root: pathlib.Path) -> None:
    """Unmount the run filesystems a test's killed supervisors left (agentd's next start would)."""
    prefix = str(root.resolve()) + "/"
    with open("/proc/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, stdin=subprocess.DEVNULL)


@pytest.fixture
def fleet(tmp_path: pathlib.Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path)
    yield f
    f.stop()


@pytest.fixture
def git_repo(tmp_path: pathlib.Path) -> pathlib.Path:
    """A git repository with one commit on main."""
    return make_repo(tmp_path / "origin", {"README.md": "# sample\n", "app.py": "print('hello')\n"})


@contextlib.contextmanager
def fresh_pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database on 127.0.0.1:5432, dropped afterwards. Fails (never skips) when
    PostgreSQL is unreachable: the store must be proved on it."""
    name = f"drover_{uuid.uuid4().hex[:12]}"
    admin = sqlalchemy.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database (`fresh_pg_database`)."""
    with fresh_pg_database() as url:
        yield url


def host_processes(marker: str) -> list[int]:
    """Host pids of live processes (bwrap left out) whose command line holds `marker`: pids printed
    inside a sandbox are its PID namespace's, not the host's, so tests find a run's processes this way."""
    found = []
    for entry in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker.encode() in b"\0".join(argv) and not argv[0].endswith(b"bwrap") and state != "Z":
            found.append(int(entry.name))
    return found


def python_command(code: str) -> list[str]:
    """argv running a Python snippet with this interpreter."""
    return [sys.executable, "-c", code]


def task(key: str, command: list[str], depends_on: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    return {
        "key": key,
        "kind": "test",
        "objective": f"run {key}",
        "command": command,
        "depends_on": list(depends_on),
        **extra,
    }


@pytest.fixture
def pg_fleet(tmp_path: pathlib.Path, pg_url: str) -> Iterator[Fleet]:
    """A fleet whose control plane keeps its state in PostgreSQL."""
    f = Fleet(tmp_path, database_url=pg_url)
    yield f
    f.stop()


API_KEY = "sk-ant-test-never-leaks-0123456789"


@pytest.fixture
def model() -> Iterator[fake.FakeAnthropic]:
    """The scripted fake Messages API server; tests add the replies."""
    server = fake.FakeAnthropic(api_key=API_KEY).start()
    yield server
    server.stop()


@pytest.fixture
def calc_repo(tmp_path: pathlib.Path) -> pathlib.Path:
    """A git repository whose add() subtracts, with a test that says so."""
    return make_repo(
        tmp_path / "calc",
        {
            "calc.py": "def add(a, b):\n    return a - b\n",
            "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
        },
    )


@pytest.fixture
def small_disk() -> Iterator[Callable[[pathlib.Path, str], pathlib.Path]]:
    """mount(path, size): a real, small filesystem (a tmpfs of `size`, e.g. "2M") at `path`, unmounted at
    the end of the test. Skips the test, saying why, where mounting is not permitted (it needs root)."""
    mounted: list[pathlib.Path] = []

    def mount(path: pathlib.Path, size: str) -> pathlib.Path:
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a {size} tmpfs to fill (mount needs root): {done.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "--lazy", str(path)], check=False)  # lazy: a stopped run may still hold a file


def openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path: pathlib.Path) -> pathlib.Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl."""
    d = tmp_path / "pki"
    d.mkdir()
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=drover test CA",
        cwd=d,
    )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={name}",
            cwd=d,
        )
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            cwd=d,
        )
    return d


def tls_client(plane, pki: pathlib.Path, with_cert: bool = True) -> Client:
    creds = grpc.ssl_channel_credentials(
        (pki / "ca.pem").read_bytes(),
        (pki / "client.key").read_bytes() if with_cert else None,
        (pki / "client.pem").read_bytes() if with_cert else None,
    )
    return Client(plane.target, token=plane.admin_token, credentials=creds)

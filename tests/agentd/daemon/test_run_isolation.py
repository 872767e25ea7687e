"""Run slots, cgroups and run filesystems (agentd/daemon/run_slots.py, cgroups.py, run_disk.py): the pure parts
on made-up inputs, the kernel parts for real where the host allows them (root, cgroup v1 here)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

import agentd.run.rlimits
from agentd.daemon import cgroups, isolation, run_disk, run_slots
from agentd.daemon.config import AgentConfig, load
from agentd.errors import CgroupsUnavailable, RunRefused, StartRefused
from agentd.run import cgroup_lock
from agentd.run.sandbox import BubblewrapSandbox, SandboxPolicy
from tests.agentd.daemon.slot_commands import command_in

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

# --- slots ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "taken, count, expected",
    [([], 2, 0), ([0], 2, 1), ([1], 2, 0), ([0, 1], 2, None), ([2, 0], 4, 1), ([-1], 1, 0)],
)
def test_a_run_takes_the_lowest_free_slot(taken: list[int], count: int, expected: int | None) -> None:
    assert run_slots.lowest_free(taken, count) == expected


def test_slot_ids_and_those_a_user_or_group_already_has() -> None:
    assert run_slots.ids(2_000_000_000, 3) == (2_000_000_003, 2_000_000_003)
    users, groups = {1001: "builder"}, {1000: "staff"}
    found = run_slots.owned_ids(1000, 3, lambda u: users.get(u, ""), lambda g: groups.get(g, ""))
    assert found == ["gid 1000 is group 'staff'", "uid 1001 is user 'builder'"]
    assert run_slots.owned_ids(2_000_000_000, 2, lambda u: "", lambda g: "") == []


def test_agentd_refuses_run_slot_ids_that_belong_to_a_user() -> None:
    if os.geteuid() != 0:
        pytest.skip("slots exist only as root")
    with pytest.raises(StartRefused, match=r"run_uid_base: .*uid 65534 is user 'nobody'"):
        isolation.prepare(AgentConfig(run_uid_base=65534, capacity=1))


def test_the_run_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="run_memory_bytes: must be positive"):
        load(None, {"DROVER_AGENTD_RUN_MEMORY_BYTES": "0"}, {})
    with pytest.raises(ValueError, match="run_uid_base"):
        load(None, {"DROVER_AGENTD_RUN_UID_BASE": str(2**32 - 2)}, {"capacity": 4})
    with pytest.raises(ValueError, match="run_uid_base: set it when capacity is more than 4096"):
        load(None, {}, {"capacity": 4097})
    config = load(None, {"DROVER_AGENTD_CGROUPS": "false", "DROVER_AGENTD_RUN_DISK_BYTES": "0"}, {})
    assert not config.cgroups and config.run_disk_bytes == 0 and config.run_processes == 512


@root_only
def test_what_a_previous_run_of_the_slot_left_is_killed() -> None:
    uid = 2_000_000_000 + 900  # out of any test agent's slots
    left = subprocess.Popen(["sleep", "60"], user=uid, group=uid, start_new_session=True)
    try:
        assert left.pid in run_slots.processes_of(uid)
        assert run_slots.kill_leftovers(uid) == 1
        assert left.wait(5) == -9
        assert run_slots.processes_of(uid) == []
    finally:
        left.kill()


# --- cgroups: reading the host -----------------------------------------------------------------------

MOUNTS = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""


def test_v1_hierarchies_are_found_by_their_mount_options(tmp_path: pathlib.Path) -> None:
    found = cgroups.detect(tmp_path, MOUNTS)  # no cgroup.controllers at the root: not v2
    assert found.version == 1
    assert found.mounts == {
        "memory": pathlib.Path("/sys/fs/cgroup/memory"),
        "pids": pathlib.Path("/sys/fs/cgroup/pids"),
        "cpu": pathlib.Path("/sys/fs/cgroup/cpu,cpuacct"),
    }
    with pytest.raises(CgroupsUnavailable, match="no v1 pids hierarchy"):
        cgroups.detect(tmp_path, MOUNTS.replace(",pids", ""))


def test_v2_is_the_unified_hierarchy_with_memory_and_pids(tmp_path: pathlib.Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma\n")
    assert cgroups.detect(tmp_path, "") == cgroups.Hierarchy(2, {"unified": tmp_path})
    group = cgroups.group_name("a/b c", "0f1e2d3c")
    assert cgroups.slot_dirs(cgroups.Hierarchy(2, {"unified": tmp_path}), group, 1) == [
        tmp_path / "drover" / "a_b_c-0f1e2d3c" / "slot-1"
    ]
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")
    with pytest.raises(CgroupsUnavailable, match="lacks the memory, pids controller"):
        cgroups.detect(tmp_path, "")


def test_the_limits_a_run_hit_are_said(tmp_path: pathlib.Path) -> None:
    memory, pids, v2 = tmp_path / "memory", tmp_path / "pids", tmp_path / "v2"
    for d in (memory, pids, v2):
        d.mkdir()
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    (pids / "pids.events").write_text("max 7\n")
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 40\noom 1\noom_kill 1\n")
    (v2 / "pids.events").write_text("max 0\n")
    assert cgroups.limits_hit([str(memory), str(pids)], 4 * 1024**3, 512) == [
        "the run hit its memory limit 4 GiB: the kernel killed 2 of its processes",
        "the run hit its process limit 512: 7 forks failed",
    ]
    assert cgroups.limits_hit([str(v2)], 256 * 1024**2, 64) == [
        "the run hit its memory limit 256 MiB: the kernel killed 1 of its processes"
    ]
    assert cgroups.limits_hit([str(tmp_path / "gone")], 1, 1) == []


def test_sizes_read_as_people_write_them() -> None:
    assert [cgroups.size(n) for n in (4 * 1024**3, 256 * 1024**2, 1536 * 1024, 100, 3 * 1024**3 // 2)] == [
        "4 GiB",
        "256 MiB",
        "1536 KiB",
        "100 bytes",
        "1536 MiB",
    ]


# --- cgroups: for real ------------------------------------------------------------------------------


@pytest.fixture
def hierarchy() -> Iterator[tuple[cgroups.Hierarchy, str]]:
    if os.geteuid() != 0:
        pytest.skip("making cgroups needs root")
    try:
        found = cgroups.detect()
        agent = f"test-{uuid.uuid4().hex[:8]}"
        cgroups.prepare_agent(found, agent)
    except CgroupsUnavailable as err:
        pytest.skip(f"no cgroups here: {err}")
    yield found, agent
    cgroups.remove_agent(found, agent)


def test_a_slot_group_holds_a_command_and_is_made_afresh(hierarchy: tuple[cgroups.Hierarchy, str]) -> None:
    found, agent = hierarchy
    limits = cgroups.Limits(64 * 1024**2, 16)
    dirs = cgroups.prepare_slot(found, agent, 0, limits)
    if found.version == 1:
        memory = next(d for d in dirs if "memory" in str(d))
        assert (memory / "memory.limit_in_bytes").read_text().strip() == str(64 * 1024**2)
    pids_dir = next(d for d in dirs if (d / "pids.max").exists())
    assert (pids_dir / "pids.max").read_text().strip() == "16"
    child = command_in(dirs)  # what the launcher does: join through the descriptors, then exec
    try:
        assert all(child.pid in cgroups.procs(d) for d in dirs)
        cgroups.prepare_slot(found, agent, 0, limits)  # the next run: the leftover is killed
        assert child.wait(10) == -9
        assert all(cgroups.procs(d) == [] for d in dirs)
    finally:
        child.kill()


def test_a_memory_bomb_in_a_slot_group_is_killed(
    hierarchy: tuple[cgroups.Hierarchy, str], tmp_path: pathlib.Path
) -> None:
    found, agent = hierarchy
    dirs = [str(d) for d in cgroups.prepare_slot(found, agent, 1, cgroups.Limits(64 * 1024**2, 32))]
    spec_policy = SandboxPolicy(uid=2_000_000_000 + 901, gid=2_000_000_000 + 901, cgroup_fds=cgroups.open_procs(dirs))
    os.chmod(tmp_path, 0o777)
    try:
        with BubblewrapSandbox(spec_policy).wrap(
            [sys.executable, "-c", "x = [b'x' * 2**20 for _ in range(200)]"], tmp_path, {"PATH": "/usr/bin:/bin"}
        ) as launch:
            done = subprocess.run(launch.argv, capture_output=True, timeout=60, **launch.spawn_kwargs())
    finally:
        for fd in spec_policy.cgroup_fds:
            os.close(fd)
    assert done.returncode != 0
    assert cgroups.limits_hit(dirs, 64 * 1024**2, 32) == [
        "the run hit its memory limit 64 MiB: the kernel killed 1 of its processes"
    ]


V1_SELF = "12:pids:/user.slice/u\n4:memory:/process_api/abc\n3:cpu,cpuacct:/\n1:name=systemd:/x\n0::/init.scope\n"


@pytest.mark.parametrize(
    ("slot_dir", "self_cgroup", "unified", "expected"),
    [
        ("/sys/fs/cgroup/memory/drover/a-1/slot-0", V1_SELF, False, "/sys/fs/cgroup/memory/process_api/abc"),
        ("/sys/fs/cgroup/pids/drover/a-1/slot-3", V1_SELF, False, "/sys/fs/cgroup/pids/user.slice/u"),
        ("/sys/fs/cgroup/cpu,cpuacct/drover/a-1/slot-0", V1_SELF, False, "/sys/fs/cgroup/cpu,cpuacct"),
        (
            "/sys/fs/cgroup/drover/a-1/slot-0",
            "0::/system.slice/agentd.service\n",
            True,
            "/sys/fs/cgroup/system.slice/agentd.service",
        ),
        ("/sys/fs/cgroup/drover/a-1/slot-0", V1_SELF, False, None),  # "cgroup" names no v1 controller
        ("/cg/mem/drover/a-1/slot-0", V1_SELF, False, None),  # a mount not named for its controllers
        ("/sys/fs/cgroup/memory/drover/a-1/slot-0", "4:memory:../../x\n", False, None),
        ("/sys/fs/cgroup/memory/drover/a-1/slot-0", "4:memory:/a/../../x\n", False, None),
        ("/sys/fs/cgroup/drover/a-1/slot-0", "", True, None),
    ],
)
def test_a_process_finds_its_own_group_in_a_slots_hierarchy(
    slot_dir: str, self_cgroup: str, unified: bool, expected: str | None
) -> None:
    found = cgroup_lock.own_group(slot_dir, self_cgroup, unified)
    assert (str(found) if found is not None else None) == expected


def test_warming_the_join_moves_the_supervisor_nowhere(hierarchy: tuple[cgroups.Hierarchy, str]) -> None:
    """The supervisor starts the kernel's wait for a migration by moving itself into the group it is
    in: after it, this process is in exactly the groups it was in, none of the slot's."""
    found, agent = hierarchy
    dirs = [str(d) for d in cgroups.prepare_slot(found, agent, 2, cgroups.Limits(64 * 1024**2, 16))]
    before = pathlib.Path("/proc/self/cgroup").read_text()
    thread = cgroup_lock.warm(dirs)
    assert thread is not None
    thread.join(10)
    assert pathlib.Path("/proc/self/cgroup").read_text() == before
    assert all(os.getpid() not in cgroups.procs(pathlib.Path(d)) for d in dirs)
    assert cgroup_lock.warm([]) is None


# --- the launcher and the sandbox -------------------------------------------------------------------


def test_the_launcher_takes_cgroup_descriptors() -> None:
    assert agentd.run.rlimits.parse(["--cgroup-fds", "5,6,7", "--nproc", "80"]) == {
        "cgroup-fds": "5,6,7",
        "nproc": "80",
    }
    with pytest.raises(ValueError, match="takes a number"):
        agentd.run.rlimits.parse(["--cgroup-fds", "5;6"])


def test_the_sandboxs_tmp_has_a_size_and_the_launcher_the_cgroups(tmp_path: pathlib.Path) -> None:
    policy = SandboxPolicy(uid=2_000_000_000, gid=2_000_000_000, cgroup_fds=(40, 41), tmp_bytes=1024**2)
    with BubblewrapSandbox(policy, privileged=True).wrap(["true"], tmp_path, {}) as launch:
        argv = launch.argv
        tmp = argv.index("/tmp")
        assert argv[tmp - 3 : tmp + 1] == ["--size", "1048576", "--tmpfs", "/tmp"]
        assert argv[argv.index("--cgroup-fds") + 1] == "40,41"
        assert argv[argv.index("--uid") + 1] == "2000000000"
        assert {40, 41} <= set(launch.pass_fds)


# --- the run's filesystem ---------------------------------------------------------------------------


@root_only
def test_a_run_filesystem_is_mounted_on_the_workspace_and_goes_with_it(tmp_path: pathlib.Path) -> None:
    ws = tmp_path / "run-1"
    assert run_disk.attach(ws, 16 * 1024**2)
    try:
        assert os.path.ismount(ws) and run_disk.image_of(ws).exists()
        assert not run_disk.attach(ws, 16 * 1024**2)  # a resumed run keeps it
        assert os.statvfs(ws).f_blocks * os.statvfs(ws).f_frsize <= 16 * 1024**2
        assert run_disk.leftovers(tmp_path, set()) == [ws] and run_disk.leftovers(tmp_path, {"run-1"}) == []
    finally:
        run_disk.release(ws)
    assert not os.path.ismount(ws) and not run_disk.image_of(ws).exists()


@root_only
def test_a_run_that_ended_formats_a_spare_filesystem_the_next_run_takes(tmp_path: pathlib.Path) -> None:
    """mkfs is paid at a run's end: the next run's start only mounts. A spare is fresh (never mounted)
    and goes to one run alone; agentd's leftover sweep does not mistake it for a dead run's image."""
    first, second = tmp_path / "run-1", tmp_path / "run-2"
    assert run_disk.attach(first, 16 * 1024**2)
    (first / "left.txt").write_text("the first run's file\n")
    run_disk.release(first)
    run_disk.make_spare(first, 16 * 1024**2)
    spares = list((tmp_path / run_disk.SPARES).glob("*.disk"))
    assert len(spares) == 1 and run_disk.leftovers(tmp_path, set()) == []
    assert run_disk.attach(second, 16 * 1024**2)
    try:
        assert not spares[0].exists() and os.listdir(second) == []  # taken, and empty
    finally:
        run_disk.release(second)
    for _ in range(run_disk.MAX_SPARES + 1):
        run_disk.make_spare(second, 16 * 1024**2)
    assert len(list((tmp_path / run_disk.SPARES).glob("*.disk"))) == run_disk.MAX_SPARES


@root_only
def test_an_overlay_a_dead_supervisor_left_is_released_with_its_workspace(tmp_path: pathlib.Path) -> None:
    """A prepared workspace's overlay on a run without a filesystem of its own (no image to find it
    by): agentd's leftover sweep finds it by the mount, unmounts it and removes the workspace."""
    lower, layers, ws = tmp_path / "entry", tmp_path / "run-2" / ".prepared", tmp_path / "run-2"
    (lower / "pkg").mkdir(parents=True)
    (lower / "pkg" / "kept.txt").write_text("the cache's file\n")
    (layers / "upper").mkdir(parents=True)
    (layers / "work").mkdir()
    (ws / "repo").mkdir()
    options = f"lowerdir={lower},upperdir={layers / 'upper'},workdir={layers / 'work'}"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(ws / "repo")], check=True)
    try:
        assert run_disk.leftovers(tmp_path, {"run-2"}) == []  # a live run's overlay stays
        assert run_disk.leftovers(tmp_path, set()) == [ws]
        config = AgentConfig(name=f"test-{uuid.uuid4().hex[:8]}", capacity=1, cgroups=False, work_dir=tmp_path)
        run_slots.Places(config).release_disks(set())
        assert not os.path.ismount(ws / "repo") and not ws.exists()
        assert (lower / "pkg" / "kept.txt").read_text() == "the cache's file\n"  # the entry is untouched
    finally:
        run_disk.unmount(ws / "repo")


def test_places_give_the_lowest_free_slot_or_refuse_at_capacity(tmp_path: pathlib.Path) -> None:
    config = AgentConfig(name=f"test-{uuid.uuid4().hex[:8]}", capacity=2, cgroups=False, work_dir=tmp_path)
    places = run_slots.Places(config)
    assert places.take([]) == (0, []) and places.take([0]) == (1, [])
    with pytest.raises(RunRefused, match="at_capacity"):
        places.take([1, 0])

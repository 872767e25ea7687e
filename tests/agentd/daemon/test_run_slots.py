"""A run slot is readied when its run ends, not when the next run starts: on real cgroups, as root."""

from __future__ import annotations

import os
import pathlib
import time
import uuid
from collections.abc import Iterator

import pytest

from agentd.daemon import cgroups, run_slots
from agentd.daemon.config import AgentConfig
from agentd.errors import CgroupsUnavailable
from tests.agentd.daemon.slot_commands import command_in


@pytest.fixture
def places(tmp_path: pathlib.Path) -> Iterator[run_slots.Places]:
    if os.geteuid() != 0:
        pytest.skip("making cgroups needs root")
    config = AgentConfig(
        name=f"test-{uuid.uuid4().hex[:8]}", capacity=2, work_dir=tmp_path, spool_dir=tmp_path / "spool"
    )
    made = run_slots.Places(config)
    if made.hierarchy is None:
        pytest.skip("no cgroups here")
    try:
        cgroups.prepare_agent(made.hierarchy, made.group)
    except CgroupsUnavailable as err:
        pytest.skip(f"no cgroups here: {err}")
    yield made
    made.close()


def test_a_slot_is_readied_when_its_run_ends_so_the_next_run_finds_it_empty(places: run_slots.Places) -> None:
    index, dirs = places.take([])
    left = command_in(dirs)  # a process the ended run left in its groups
    try:
        thread = places.release(index)
        assert thread is not None
        thread.join(30)
        assert left.wait(10) == -9  # killed at the run's end, before any next run
        assert all(cgroups.procs(pathlib.Path(d)) == [] for d in dirs)
        assert places.take([]) == (index, dirs)  # the next run: the same, readied groups
    finally:
        left.kill()


def test_readying_a_slot_late_never_touches_the_run_that_took_it_since(places: run_slots.Places) -> None:
    index, _ = places.take([])
    thread = places.release(index)
    assert thread is not None
    thread.join(30)
    taken, dirs = places.take([])  # the next run
    assert taken == index
    running = command_in(dirs)
    try:
        places._ready_ahead(index)  # a readying thread of the first run's end that only ran now
        time.sleep(0.2)
        assert running.poll() is None
        assert all(running.pid in cgroups.procs(pathlib.Path(d)) for d in dirs)
    finally:
        running.kill()
        running.wait(10)


def test_no_slot_to_release_is_nothing(tmp_path: pathlib.Path) -> None:
    config = AgentConfig(name=f"test-{uuid.uuid4().hex[:8]}", capacity=1, cgroups=False, work_dir=tmp_path)
    places = run_slots.Places(config)
    assert places.release(-1) is None and places.release(1) is None
    thread = places.release(0)
    assert thread is not None
    thread.join(10)
    assert places.take([]) == (0, [])

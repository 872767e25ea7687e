"""agentd's edge: a RunAssignment decoded once into a RunSpec, defaults applied, placed on this agent,
written to assignment.json and read back by the supervisor exactly."""

from __future__ import annotations

import gzip
import json
import pathlib

import pytest

from agentd.daemon.assignment import decode, place
from agentd.daemon.config import AgentConfig
from agentd.run.spec import DEFAULT_OUTPUT_LIMIT, HarnessSpec, RunSpec, StackedChangeSet
from drover.v1 import agent_pb2


def _harness_assignment() -> agent_pb2.RunAssignment:
    return agent_pb2.RunAssignment(
        run_id="run_1",
        change_id="chg_1",
        task_id="tsk_1",
        task_key="fix",
        kind="implement",
        driver="harness",
        command=agent_pb2.CommandSpec(timeout_seconds=0),
        workspace=agent_pb2.WorkspaceSpec(
            repo="https://git.example/calc.git",
            branch="main",
            stack=[agent_pb2.StackedChangeSet(changeset_id="cs_1", task_id="tsk_0", branch="b", created_at="t")],
        ),
        secret_env={"ANTHROPIC_API_KEY": "sk-ant-secret-0123"},
        model="claude-sonnet",
        base_url="http://127.0.0.1:1",
        tier="sonnet",
        limits={"output_bytes": 0},
        harness=agent_pb2.HarnessSpec(
            workspace_mode="write",
            max_calls=30,
            max_output_tokens=8000,
            prompt="do it",
            resume_state=gzip.compress(b"state"),
            build_outputs=["dist/"],
        ),
        resume=True,
    )


def test_zero_and_empty_take_the_specs_defaults() -> None:
    assignment = decode(_harness_assignment())
    spec, h = assignment.spec, assignment.spec.harness
    assert (h.context_window_tokens, h.fold_fraction) == (HarnessSpec.context_window_tokens, HarnessSpec.fold_fraction)
    assert (h.stall_timeout_seconds, h.max_attempts, h.billing) == (120.0, 4, "PayPerApi")
    assert (h.attempt_ceiling_seconds, h.effort) == (600.0, "")  # ten minutes; no effort sent
    assert spec.output_limit_bytes == DEFAULT_OUTPUT_LIMIT
    assert spec.stack == (StackedChangeSet("cs_1", "tsk_0", "b", "", "t"),)  # an empty commit is kept, as ""
    assert spec.prompt == "do it" and h.build_outputs == ("dist/",)
    assert assignment.resume and assignment.secret_env == {"ANTHROPIC_API_KEY": "sk-ant-secret-0123"}


def test_the_effort_and_the_attempt_ceiling_reach_the_spec_and_its_file(tmp_path: pathlib.Path) -> None:
    message = _harness_assignment()
    message.harness.effort, message.harness.attempt_ceiling_seconds = "high", 90.0
    placed = place(decode(message).spec, AgentConfig(work_dir=tmp_path / "work"))
    placed.save(tmp_path)
    h = RunSpec.load(tmp_path).harness
    assert (h.effort, h.attempt_ceiling_seconds) == ("high", 90.0)


def test_the_secrets_never_reach_the_spec_or_its_file(tmp_path: pathlib.Path) -> None:
    assignment = decode(_harness_assignment())
    assert "sk-ant-secret-0123" not in repr(assignment)
    placed = place(assignment.spec, AgentConfig(work_dir=tmp_path / "work"), slot=2, cgroups=("/sys/fs/cgroup/x",))
    placed.save(tmp_path)
    assert "sk-ant-secret-0123" not in (tmp_path / "assignment.json").read_text()


def test_the_placed_spec_round_trips_through_assignment_json(tmp_path: pathlib.Path) -> None:
    config = AgentConfig(work_dir=tmp_path / "work", default_timeout_seconds=77, unsafe_no_sandbox=True)
    placed = place(decode(_harness_assignment()).spec, config, slot=3, cgroups=("a", "b"))
    assert placed.timeout_seconds == 77 and placed.sandbox == "none" and placed.slot == 3
    assert placed.workspace_dir == str((tmp_path / "work" / "run_1").resolve())
    placed.save(tmp_path)
    assert RunSpec.load(tmp_path) == placed
    assert RunSpec.load(tmp_path).harness.resume_state == gzip.compress(b"state")


def test_a_spec_written_by_an_older_agentd_still_loads(tmp_path: pathlib.Path) -> None:
    """A supervisor outlives agentd: after an upgrade the new agentd reads what the old one wrote."""
    older = {"run_id": "run_9", "driver": "command", "argv": ["true"], "stack": [], "unknown_key": 1}
    (tmp_path / "assignment.json").write_text(json.dumps(older))
    spec = RunSpec.load(tmp_path)
    assert (spec.run_id, spec.argv, spec.slot, spec.sandbox) == ("run_9", ("true",), -1, "bubblewrap")


@pytest.mark.parametrize("text", ["[]", '{"driver": "command"}', "not json"])
def test_what_is_not_a_spec_is_refused(tmp_path: pathlib.Path, text: str) -> None:
    (tmp_path / "assignment.json").write_text(text)
    with pytest.raises(ValueError):
        RunSpec.load(tmp_path)


def test_the_workspace_preparation_and_a_commands_files_survive_the_round_trip(tmp_path: pathlib.Path) -> None:
    message = agent_pb2.RunAssignment(
        run_id="run_2",
        driver="command",
        command=agent_pb2.CommandSpec(argv=["pytest"], files={"t/a.txt": "x"}, workdir="t"),
        workspace=agent_pb2.WorkspaceSpec(
            repo="/srv/calc",
            setup=["pip install -e .", "npm ci"],
            setup_network=True,
            env={"STAGE": "ci", "DROVER_BRANCH": "ai/x"},
            git_name="Bot",
            git_email="bot@x.invalid",
            task_branch="ai/x",
            cache_key_files=["requirements*.txt"],
        ),
    )
    spec = place(decode(message).spec, AgentConfig(work_dir=tmp_path))
    prep = spec.preparation
    assert prep.setup == ("pip install -e .", "npm ci") and prep.setup_network
    assert prep.env == {"STAGE": "ci", "DROVER_BRANCH": "ai/x"} and prep.task_branch == "ai/x"
    assert prep.identity == ("Bot", "bot@x.invalid") and prep.cache_key_files == ("requirements*.txt",)
    assert (spec.files, spec.workdir) == ({"t/a.txt": "x"}, "t")
    spec.save(tmp_path)
    assert RunSpec.load(tmp_path) == spec
    # an assignment without them (an older control plane): Drover's identity, no setup
    bare = decode(agent_pb2.RunAssignment(run_id="run_3")).spec.preparation
    assert bare.setup == () and bare.identity == ("Drover Agent", "agent@drover.invalid")
    assert bare.git_env["GIT_COMMITTER_EMAIL"] == "agent@drover.invalid"

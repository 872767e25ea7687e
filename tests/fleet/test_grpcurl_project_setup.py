"""Issue 27, as an operator with grpcurl alone does it: a project made through
`drover.v1.ProjectService/CreateProject` on a repository whose package imports only once installed
(src layout) runs `python -m pytest` and passes because of its `setup`; the same project without
setup fails on the import; UpdateProject (mask `setup`) gives it the setup and the next run passes.
Real control plane, real agentd, a real git repository and a real offline `pip install`."""

from __future__ import annotations

import pathlib

import pytest

from drover import Client
from tests.conftest import Fleet, task
from tests.controlplane.api.test_grpcurl import grpcurl_json
from tests.fleet.test_workspace_preparation import PYTEST, package_repo  # noqa: F401 (the fixture)

pytestmark = pytest.mark.timeout(240)

# The sandbox shows the system's Python read-only, so the package is installed offline into the
# workspace (docs/configuration.md, "Workspace preparation") and the project's env puts it on the path.
SETUP = ["python -m pip install --no-deps --no-build-isolation --no-index --target .deps ."]
ENV = {"PYTHONPATH": ".deps"}


def run_tests(client: Client, project: str) -> tuple[str, str, str]:
    """Submit the command Task `python -m pytest` to `project`, wait for the Change to end; answers
    the Change's status, the Task's run id and the run's whole output."""
    change = client.submit_change(project, "run the package's tests", [task("tests", PYTEST)])
    list(client.watch(change.id))
    final = client.get_change(change.id)
    run_id = final.tasks[0].latest_run_id
    return final.status, run_id, "".join(line.text for line in client.run_logs(run_id))


def test_a_grpcurl_project_with_setup_passes_its_tests_and_without_setup_fails_on_the_import(
    fleet: Fleet,
    package_repo: pathlib.Path,  # noqa: F811
) -> None:
    plane = fleet.start_plane()
    made = {
        name: grpcurl_json(
            plane,
            "drover.v1.ProjectService/CreateProject",
            token=plane.admin_token,
            data={"project": {"name": name, "repo": str(package_repo), "branch": "main", "env": ENV, **extra}},
        )
        for name, extra in (("with-setup", {"setup": SETUP}), ("no-setup", {}))
    }
    assert made["with-setup"]["setup"] == SETUP and made["with-setup"]["branch"] == "main"
    assert "setup" not in made["no-setup"]  # grpcurl leaves out an empty list
    fleet.agent("curl-agent")
    with plane.client() as client:
        a_status, a_run_id, a_output = run_tests(client, "with-setup")
        a_run = client.get_run(a_run_id)
        b_status, b_run_id, b_output = run_tests(client, "no-setup")
        b_run = client.get_run(b_run_id)

        # with setup: it installed the package, then the Task's pytest imported it and passed
        assert a_status == "succeeded", a_output
        assert "setup: [1/1] $ python -m pip install" in a_output
        assert "[setup] Successfully installed tinypkg-0.1.0" in a_output
        assert "1 passed" in a_output
        assert a_run.branch == f"drover/{a_run.change_id}/{a_run.task_id}"
        assert a_run.setup_seconds > 0

        # without setup: the same Task fails on the import, and no setup ran
        assert b_status == "failed", b_output
        assert "ModuleNotFoundError: No module named 'tinypkg'" in b_output
        assert "[setup]" not in b_output and b_run.setup_seconds == 0

        # the project gets its setup through grpcurl; the next run has it. grpcurl reads a FieldMask as
        # the message {"paths": [...]}, not proto3 JSON's "a,b" string (fullstorydev/grpcurl#393)
        updated = grpcurl_json(
            plane,
            "drover.v1.ProjectService/UpdateProject",
            token=plane.admin_token,
            data={"project": {"name": "no-setup", "setup": SETUP}, "update_mask": {"paths": ["setup"]}},
        )
        assert updated["setup"] == SETUP and updated["env"] == ENV
        again_status, again_run_id, again_output = run_tests(client, "no-setup")
        again_run = client.get_run(again_run_id)
    assert again_status == "succeeded", again_output
    assert "[setup] Successfully installed tinypkg-0.1.0" in again_output and "1 passed" in again_output
    assert again_run.setup_seconds > 0

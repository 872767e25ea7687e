"""Recovery after a stop (issue 29, seed 000 "Escalation"): RaiseMeter lifts the meter that stopped
work and the Tasks it stopped run again; RetryTask runs a failed Task again. Real processes, real gRPC,
the scripted fake model."""

from __future__ import annotations

import datetime as dt
import pathlib
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

import drover
from drover.testing import fake_anthropic as fake
from tests.conftest import API_KEY, Fleet, task, wait_for
from tests.security.test_4_tenancy import user


def _refused(error: type[drover.DroverError], call: Callable[[], Any]) -> drover.DroverError:
    with pytest.raises(error) as caught:
        call()
    return caught.value


def test_raise_meter_checks_its_values_and_roles_and_the_raise_survives_a_restart(fleet: Fleet) -> None:
    plane = fleet.start_plane()
    plane.add_project("web")
    plane.add_project("api")
    submitter, ann = user(plane, "sam", "submit"), user(plane, "ann", "admin", "api")
    month = dt.datetime.now(dt.UTC).strftime("%Y-%m")
    with plane.client() as admin, plane.client(submitter) as sam, plane.client(ann) as a:
        # The fleet's month ($10 configured by default), raised for this month only.
        raised = admin.raise_meter("provider_month", 25)
        assert (raised.key, raised.limit, raised.unit) == (f"provider-usd:{month}", 25_000_000, "usd")
        calls = admin.raise_meter("agent_calls_day", 5000)
        assert calls.limit == 5000 and calls.unit == "calls"

        bad = {
            ("provider_month", 0, ""): "limit",
            ("provider_month", -3, ""): "limit",
            ("provider_month", 20, ""): "limit",  # lower than the $25 in force
            ("provider_month", 25, ""): "limit",  # not more
            ("provider_month", 1e12, ""): "limit",  # absurd
            ("agent_calls_day", 6000.5, ""): "limit",
            ("provider_month", 30, "web"): "name",
            ("project", 30, ""): "name",
            ("tokens", 30, ""): "meter",
        }
        for (meter, limit, name), field in bad.items():
            error = _refused(drover.InvalidArgument, lambda m=meter, x=limit, n=name: admin.raise_meter(m, x, n))
            assert error.field == field, (meter, limit, name, error.message)
        lower = _refused(drover.InvalidArgument, lambda: admin.raise_meter("provider_month", 20))
        assert lower.message == "limit: must be more than the current limit 25"
        missing = _refused(drover.NotFound, lambda: admin.raise_meter("project", 30, "nope"))
        assert missing.message == "name: no project 'nope'"
        assert _refused(drover.NotFound, lambda: admin.raise_meter("user", 30, "nobody")).field == "name"
        # web has no monthly budget: nothing to raise.
        assert _refused(drover.FailedPrecondition, lambda: admin.raise_meter("project", 30, "web")).field == "meter"

        # A submit token may not raise anything; a project's admin only its project's meter.
        for call in (
            lambda: sam.raise_meter("provider_month", 50),
            lambda: sam.raise_meter("project", 50, "api"),
            lambda: a.raise_meter("provider_month", 50),
            lambda: a.raise_meter("agent_calls_day", 9000),
            lambda: a.raise_meter("user", 50, "ann"),
        ):
            _refused(drover.PermissionDenied, call)
        assert (
            _refused(drover.NotFound, lambda: a.raise_meter("project", 50, "web")).message == "name: no project 'web'"
        )
        assert admin.get_usage(f"provider-usd:{month}")[0].limit == 25_000_000  # nothing refused changed anything

    plane.cli("token", "create", "--kind", "user", "--name", "uma", "--role", "submit", "--monthly-budget-usd", "3")
    with plane.client() as admin, plane.client(ann) as a:
        assert admin.raise_meter("user", 4, name="uma").limit == 4_000_000
        admin.projects.update("api", monthly_budget_usd=5)
        assert a.raise_meter("project", 8, "api").limit == 8_000_000

    plane.stop()
    plane.start()
    with plane.client() as admin:
        assert admin.get_usage(f"provider-usd:{month}")[0].limit == 25_000_000
        assert admin.get_usage("agent-calls:")[0].limit == 5000
        assert admin.projects.get("api").monthly_budget_usd == 8
        assert next(t for t in admin.tokens.list() if t.name == "uma").monthly_budget_usd == 4
        raised_events = [e.data for e in admin.list_events(kind="meter.raised")]
    assert [(e["by"], e["meter"], e["previous"], e["limit"]) for e in raised_events] == [
        ("admin", f"provider-usd:{month}", 10_000_000, 25_000_000),
        ("admin", f"agent-calls:{dt.datetime.now(dt.UTC):%Y-%m-%d}", 1000, 5000),
        ("admin", f"user-usd:uma:{month}", 3_000_000, 4_000_000),
        ("ann", f"project-usd:api:{month}", 5_000_000, 8_000_000),
    ]


# A haiku call reserves its worst case: 10,000 output tokens ($0.05) plus its input, and settles at most
# that. A project month of $0.08 holds one such call, not two.
DEAR = {"input_tokens": 100, "output_tokens": 10_000}


def test_a_change_stopped_on_its_project_budget_runs_again_when_the_meter_is_raised(
    fleet: Fleet, model: fake.FakeAnthropic, calc_repo: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    config = tmp_path / "controlplane.toml"
    config.write_text("[tiers.haiku]\nmax_output_tokens = 10000\n")
    model.extend([fake.tool_use("complete_task", {"summary": "first"}, usage=DEAR)])
    model.extend([fake.tool_use("complete_task", {"summary": "second"})])
    fleet.plane.extra_env.update(ANTHROPIC_BASE_URL=model.base_url, ANTHROPIC_API_KEY=API_KEY)
    plane = fleet.start_plane("--config", str(config))
    plane.cli("project", "add", "calc", "--repo", str(calc_repo), "--monthly-budget-usd", "0.08")
    fleet.agent("recovery-agent")
    small = {"kind": "implement", "size": "small", "risk": "low"}
    with plane.client() as client:
        change = client.submit_change(
            "calc",
            "two small fixes",
            [
                {"key": "a", "objective": "fix a", **small},
                {"key": "b", "objective": "fix b", "depends_on": ["a"], **small},
            ],
        )
        first = list(client.watch(change.id))
        stopped = client.get_change(change.id)
        statuses = {t.key: (t.status, t.reason) for t in stopped.tasks}
        assert stopped.status == "budget_blocked" and stopped.reason == "project_budget", statuses
        assert statuses == {"a": ("succeeded", ""), "b": ("blocked", "budget_stop: project_budget")}
        assert len(model.requests) == 1  # b's call was refused before it reached the model

        raised = client.raise_meter("project", 1, name="calc")
        assert raised.limit == 1_000_000 and raised.used >= 50_000
        list(client.watch(change.id, after_event_id=first[-1].id))
        final = client.get_change(change.id)
        after = client.list_events(change_id=change.id, kind="task.ready")
    assert final.status == "succeeded" and [t.status for t in final.tasks] == ["succeeded", "succeeded"]
    assert len(model.requests) == 2
    assert any(e.data.get("reason") == "project meter raised" and e.data["key"] == "b" for e in after)


def test_retry_task_runs_a_failed_command_task_again_and_its_change_succeeds(
    fleet: Fleet, git_repo: pathlib.Path
) -> None:
    plane = fleet.start_plane()
    plane.add_project("retry", str(git_repo))
    fleet.agent("retry-agent")
    with plane.client() as client:
        change = client.submit_change(
            "retry", "needs a marker", [task("check", ["test", "-f", "marker"]), task("after", ["true"], ("check",))]
        )
        first = list(client.watch(change.id))
        failed = client.get_change(change.id)
        assert failed.status == "failed", [(t.key, t.status, t.reason) for t in failed.tasks]
        check_task = next(t for t in failed.tasks if t.key == "check")
        assert check_task.status == "failed"

        # A tier that is not configured, or any tier for a command Task, is refused by field.
        assert _refused(drover.InvalidArgument, lambda: client.retry_task(check_task.id, "gpt")).field == "tier"
        assert _refused(drover.InvalidArgument, lambda: client.retry_task(check_task.id, "haiku")).field == "tier"
        assert _refused(drover.NotFound, lambda: client.retry_task("tsk_nope")).field == "task_id"

        # The fix lands on the project's branch; the retried run starts from it.
        (git_repo / "marker").write_text("")
        subprocess.run(["git", "-C", str(git_repo), "add", "marker"], check=True)
        subprocess.run(
            [
                "git",
                "-C",
                str(git_repo),
                "-c",
                "user.name=T",
                "-c",
                "user.email=t@drover.invalid",
                "commit",
                "-qm",
                "m",
            ],
            check=True,
        )
        again = client.retry_task(check_task.id)
        assert again.status == "running"
        list(client.watch(change.id, after_event_id=first[-1].id))
        final = client.get_change(change.id)
        runs = [(r.attempt, r.state, r.reason) for r in client.list_runs(change_id=change.id)]
        assert final.status == "succeeded", ([(t.key, t.status, t.reason) for t in final.tasks], runs)
        assert [t.status for t in final.tasks] == ["succeeded", "succeeded"]

        done = _refused(drover.FailedPrecondition, lambda: client.retry_task(check_task.id))
        assert done.field == "task_id" and "is succeeded" in done.message
        retried = client.list_events(change_id=change.id, kind="task.retried")
        reopened = client.list_events(change_id=change.id, kind="change.reopened")
        # A running Task, or one of a cancelled Change, is not retried; the message says its state.
        sleeper = client.submit_change("retry", "sleeps", [task("nap", ["sleep", "300"])])
        (nap,) = client.get_change(sleeper.id).tasks
        wait_for(lambda: client.get_change(sleeper.id).tasks[0].status == "running", 60, what="the nap to run")
        running = _refused(drover.FailedPrecondition, lambda: client.retry_task(nap.id))
        assert running.message == f"task_id: task {nap.id} is running; only a failed or stopped Task runs again"
        client.cancel_change(sleeper.id)
        wait_for(lambda: client.get_change(sleeper.id).status == "cancelled", 60, what="the nap to be cancelled")
        cancelled = _refused(drover.FailedPrecondition, lambda: client.retry_task(nap.id))
        assert cancelled.message == f"task_id: change {sleeper.id} is cancelled"
    assert [(e.data["by"], e.data["key"]) for e in retried] == [("admin", "check")]
    assert retried[0].data["previous"].startswith("failed")
    assert len(reopened) == 1

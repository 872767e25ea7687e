"""Which repository mirrors agentd refreshes between runs (agentd/daemon/mirrors.py): those a run
cloned through in the last day, each with the credential of the latest such run; a repository
unused for longer is dropped with its credential; nothing is kept when mirrors or refreshes are off."""

from __future__ import annotations

import dataclasses
import pathlib

from agentd.daemon.config import AgentConfig
from agentd.daemon.mirrors import KEEP_SECONDS, MirrorRefresh, Used, due
from agentd.run.spec import GIT_SSH_KEY, GIT_TOKEN, RunSpec


def test_repositories_unused_for_a_day_are_dropped_with_their_credential() -> None:
    used = {"a": Used("a", "s1", at=0.0), "b": Used("b", "s2", at=KEEP_SECONDS)}
    assert [u.url for u in due(used, now=KEEP_SECONDS + 1)] == ["b"]
    assert list(used) == ["b"]
    assert "s2" not in repr(used["b"])  # a credential is never printed


def config(tmp_path: pathlib.Path, **settings: object) -> AgentConfig:
    return dataclasses.replace(AgentConfig(spool_dir=tmp_path / "spool"), **settings)


def spec(repo: str, branch: str = "main") -> RunSpec:
    return RunSpec(run_id="r1", repo=repo, branch=branch)


def test_a_run_notes_its_repository_and_latest_credential(tmp_path: pathlib.Path) -> None:
    refresh = MirrorRefresh(config(tmp_path))
    assert refresh.root == tmp_path / "mirrors" and refresh.interval == 300.0
    refresh.note(spec("https://forge/a.git"), {GIT_TOKEN: "old"})
    refresh.note(spec("https://forge/a.git"), {GIT_TOKEN: "new"})
    refresh.note(spec("ssh://forge/b.git"), {GIT_SSH_KEY: "key"})
    refresh.note(spec("https://forge/c.git", branch=""), {})  # cloned directly: no mirror
    refresh.note(spec(""), {})
    assert {u.url: u.secret for u in refresh.used.values()} == {
        "https://forge/a.git": "new",
        "ssh://forge/b.git": "key",
    }


def test_nothing_is_kept_when_refreshes_or_mirrors_are_off(tmp_path: pathlib.Path) -> None:
    for settings in ({"mirror_refresh_seconds": 0.0}, {"repository_mirrors": False}):
        refresh = MirrorRefresh(config(tmp_path, **settings))
        refresh.note(spec("https://forge/a.git"), {GIT_TOKEN: "t"})
        assert refresh.used == {} and refresh.interval == 0

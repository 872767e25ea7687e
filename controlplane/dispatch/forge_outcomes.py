"""How an issue's Changes end on the forge (issue 28), one pass at a time from the leader-only ForgeLoop.

While a Change runs, the issue's one Drover comment is edited to show it (only when its text changed,
at most once every EDIT_SECONDS per issue). When round 0's Change succeeds with a composed candidate,
the candidate commit is pushed to the branch the project's template names, a pull request opened into
the project's branch, the comment edited, and the pull request recorded; when it ends any other way,
the comment says why and what would go on. A failed forge or git call is tried again on a later pass,
after a growing wait; the fifth failure gives up (outcome `failed`, said in an event). Each step can be
repeated after a crash: the push force-updates the branch to the same commit, and a pull request that
exists already is found and recorded."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import pathlib
import tempfile
import time

from controlplane.domain import forge_report as report
from controlplane.domain import graph
from controlplane.services import forge_outcomes as outcomes
from controlplane.services import forge_start
from controlplane.services.credentials import Sealer
from controlplane.services.forge_client import ForgeClient, ForgeError
from controlplane.store.engine import Store
from controlplane.store.models import utcnow
from drover.core import forge_branches, gitspace
from drover.errors import DroverError

log = logging.getLogger("drover.forge")

EDIT_SECONDS = 3.0
"""The least time between two progress edits of one issue's comment."""


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class ForgeOutcomes:
    def __init__(
        self, store: Store, sealer: Sealer, console_url: str = "", work_dir: pathlib.Path | None = None
    ) -> None:
        self.store, self.sealer, self.console_url = store, sealer, console_url
        self.work_dir = work_dir or pathlib.Path(tempfile.gettempdir()) / "drover-forge"
        self._edited: dict[tuple[str, int], float] = {}  # (project, issue) -> when its comment was last edited

    async def pass_once(self) -> None:
        for issue in await self.store.read(outcomes.due):
            try:
                await self.tell(issue)
            except Exception:
                log.exception("project %s: telling issue #%d failed; trying again", issue.project, issue.number)

    async def tell(self, issue: outcomes.IssueState) -> None:
        first = issue.first
        if first.outcome == "reported" and first.status not in graph.TERMINAL_CHANGE:
            await self.store.run(outcomes.reopen, first.change_id)
            return
        step = report.next_step(first.status, first.candidate_state, first.outcome)
        if step == report.PROGRESS:
            await self.progress(issue)
            return
        if not report.may_try(issue.failures, issue.last_failure, utcnow()):
            return
        try:
            access = await self.store.read(forge_start.forge_access, issue.project, self.sealer)
            async with ForgeClient(access) as forge:
                if step == report.OPEN_PULL:
                    await self.open_pull(forge, issue)
                else:
                    await self.report(forge, issue)
        except (ForgeError, gitspace.WorkspaceError, DroverError, ValueError) as err:
            log.warning("project %s: issue #%d: %s", issue.project, issue.number, err)
            await self.store.run(outcomes.record_failure, first.change_id, str(err), issue.failures + 1)

    def render(self, issue: outcomes.IssueState, first: report.Round | None = None) -> str:
        rounds = (first or issue.first, *issue.rounds[1:])
        return report.comment(issue.number, rounds, self.console_url)

    async def progress(self, issue: outcomes.IssueState) -> None:
        """Edit the comment when its text changed and the last edit is EDIT_SECONDS old."""
        text = self.render(issue)
        key = (issue.project, issue.number)
        if not issue.comment_id or digest(text) == issue.digest:
            return
        if time.monotonic() - self._edited.get(key, -EDIT_SECONDS) < EDIT_SECONDS:
            return
        self._edited[key] = time.monotonic()
        try:
            access = await self.store.read(forge_start.forge_access, issue.project, self.sealer)
            async with ForgeClient(access) as forge:
                await forge.update_comment(issue.comment_id, text)
        except ForgeError as err:  # the next pass tries again
            log.warning("project %s: editing issue #%d's comment: %s", issue.project, issue.number, err)
            return
        await self.store.run(outcomes.record_comment, issue.first.change_id, issue.comment_id, digest(text))

    async def say(self, forge: ForgeClient, issue: outcomes.IssueState, text: str) -> int:
        """Put `text` in the issue's comment (posting it when there is none yet); its id."""
        if not issue.comment_id:
            return await forge.create_comment(issue.number, text)
        if digest(text) != issue.digest:
            await forge.update_comment(issue.comment_id, text)
        self._edited[(issue.project, issue.number)] = time.monotonic()
        return issue.comment_id

    async def open_pull(self, forge: ForgeClient, issue: outcomes.IssueState) -> None:
        first = issue.first
        inputs = await self.store.read(outcomes.push_inputs, first.change_id, self.sealer)
        title = (await forge.get_issue(issue.number)).title
        branch = report.branch_name(inputs.template, issue.number, first.change_id, title)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(
            forge_branches.push_branch,
            inputs.repo,
            inputs.candidate_branch,
            inputs.candidate_commit,
            branch,
            self.work_dir,
            inputs.token,
        )
        body = report.pull_body(issue.goal, issue.criteria, first, issue.number)
        try:
            number = await forge.create_pull(report.pull_title(title, issue.number), body, branch, inputs.base)
        except ForgeError as err:
            if err.status != 422 or not (number := await forge.find_pull(branch, inputs.base)):
                raise
        opened = dataclasses.replace(first, pr_number=number, pr_branch=branch, outcome="pr_opened")
        text = self.render(issue, opened)
        comment_id = await self.say(forge, issue, text)
        await self.store.run(outcomes.record_pull, first.change_id, number, branch, comment_id, digest(text))
        log.info("project %s: issue #%d: pull request #%d from %s", issue.project, issue.number, number, branch)

    async def report(self, forge: ForgeClient, issue: outcomes.IssueState) -> None:
        first = issue.first
        told = dataclasses.replace(first, outcome="reported")
        text = self.render(issue, told)
        comment_id = await self.say(forge, issue, text)
        await self.store.run(outcomes.record_reported, first.change_id, first.status, comment_id, digest(text))
        log.info("project %s: issue #%d: Change %s %s", issue.project, issue.number, first.change_id, first.status)

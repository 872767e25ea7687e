"""Fix rounds on a pull request Drover opened (issue 28), the loop's part; the forge loop routes every
delivery about checks, statuses, pull requests and reviews here (leader only), and asks after each pass
for the rounds that finished.

A failing check run, check suite or commit status on the head of an open pull request Drover opened (the
pull request found by reading the head of each of the project's through the API), or a review asking for
changes, starts a round unless the issue has a Change running or max_fix_rounds rounds ran (then said
once on the pull request): a Change with one `fix` Task on the pull request's branch, its objective the
failing checks' output or the review and its line comments, read through the API. When the round's
Change succeeds its candidate is fast-forwarded onto the pull request's branch with the project's git
credential and the pull request told, with the round's cost. A passing failure while telling a round's
end (no answer, 5xx, 429, a push that did not reach the forge) is tried again on a later pass after a
growing wait, from the step it stopped at (a push done is not repeated); a refusal for good, or the fifth
failure, gives up (outcome `failed`). A closed pull request cancels its Changes."""

from __future__ import annotations

import asyncio
import logging
import pathlib
import tempfile
from collections.abc import Callable

from controlplane.dispatch import quota
from controlplane.domain import forge_report, forge_retry
from controlplane.domain import forge_rounds as rounds
from controlplane.domain.forge_commands import PERMITTED
from controlplane.services import forge_rounds as store_rounds
from controlplane.services.credentials import Sealer
from controlplane.services.forge_client import ForgeClient, ForgeError
from controlplane.services.forge_start import finish, forge_access
from controlplane.services.notify import Notifier
from controlplane.store.engine import Store
from controlplane.store.models import utcnow
from drover.core import forge_branches, gitspace
from drover.errors import DroverError

log = logging.getLogger("drover.forge")

TellCancel = Callable[[list[tuple[str, str]], str], None]


class ForgeRounds:
    def __init__(
        self,
        store: Store,
        sealer: Sealer,
        notifier: Notifier,
        wake_dispatch: Callable[[], None],
        model_key: Callable[[], bool] = lambda: True,
    ) -> None:
        self.store, self.sealer, self.notifier, self.wake_dispatch = store, sealer, notifier, wake_dispatch
        self.model_key = model_key
        self.tell_cancel: TellCancel = lambda runs, reason: None
        self.work_dir = pathlib.Path(tempfile.gettempdir()) / "drover-forge"

    def configure(self, tell_cancel: TellCancel, work_dir: pathlib.Path) -> None:
        """How a closed pull request's runs are cancelled on their agents, and where pushes are staged."""
        self.tell_cancel, self.work_dir = tell_cancel, work_dir

    async def process(self, delivery_id: str) -> None:
        d = await self.store.read(store_rounds.delivery, delivery_id)
        if d is None:
            return
        kind = rounds.trigger(d.event, d.action, d.conclusion)
        state = None
        if kind in (rounds.REVIEW, rounds.CLOSED):  # by number; a check by its head commit, below
            state = await self.store.read(store_rounds.pull_state, d.project, d.number)
        if kind != rounds.CHECK:
            decision = rounds.decide(kind, state.pull if state else None)
            if decision.action == rounds.SKIP:
                await self.store.run(finish, d.delivery_id, "done", decision.why)
                return
            if decision.action == rounds.CLOSE:
                runs = await self.store.run(store_rounds.close_pull, d.delivery_id, d.number)
                self.tell_cancel(runs, "pull request closed")
                self.notifier.notify()
                return
        try:
            access = await self.store.read(forge_access, d.project, self.sealer)
            async with ForgeClient(access) as forge:
                if kind == rounds.CHECK:
                    state = await self._pull_of(forge, d)
                elif state is not None and (await forge.get_pull(d.number)).state != "open":
                    state = None  # a review of a pull request closed since
                decision = rounds.decide(kind, state.pull if state else None)
                if decision.action == rounds.SKIP or state is None:
                    await self.store.run(finish, d.delivery_id, "done", decision.why)
                elif decision.action == rounds.EXHAUSTED:
                    if await self.store.run(store_rounds.record_exhausted, d.delivery_id, state.pull):
                        await forge.create_comment(state.pull.pr_number, rounds.exhausted_comment(state.pull))
                else:
                    await self._start(forge, d, kind, state, decision.round)
        except (ForgeError, DroverError) as err:
            log.warning("project %s: delivery %s failed: %s", d.project, d.delivery_id, err)
            await self.store.run(finish, d.delivery_id, "failed", str(err))

    async def _pull_of(self, forge: ForgeClient, d: store_rounds.Delivery) -> store_rounds.PullState | None:
        """The open pull request Drover opened whose head is the failing commit, by reading each one's head
        through the API (a check's own list of pull requests is empty for a fork's and not to be trusted)."""
        for number in await self.store.read(store_rounds.pull_numbers, d.project):
            head = await forge.get_pull(number)
            if head.state == "open" and head.head_sha == d.head_sha:
                return await self.store.read(store_rounds.pull_state, d.project, number)
        return None

    async def _start(
        self, forge: ForgeClient, d: store_rounds.Delivery, kind: str, state: store_rounds.PullState, number: int
    ) -> None:
        pull = state.pull
        if not self.model_key():
            raise ForgeError(quota.NO_MODEL_KEY)
        if kind != rounds.CHECK and (level := await forge.permission(d.sender)) not in PERMITTED:
            why = f"a review by {d.sender} ({level}) starts no round: it needs write permission"
            await self.store.run(finish, d.delivery_id, "done", why)
            return
        if kind == rounds.CHECK:
            checks = await forge.failing_checks(d.head_sha)
            evidence = rounds.check_evidence(checks)
            comments = await self._by_writers(forge, await forge.line_comments(pull.pr_number, 0, state.since))
            if comments:
                evidence += "\n\n" + rounds.review_evidence("", comments)
        else:
            body = await forge.review_body(pull.pr_number, d.review_id)
            comments = await forge.line_comments(pull.pr_number, d.review_id, state.since)
            evidence = rounds.review_evidence(body, await self._by_writers(forge, comments))
        spec = rounds.round_spec(d.project, number, pull, evidence, state.budget_usd)
        change_id = await self.store.run(store_rounds.start_round, d.delivery_id, spec, pull, number)
        if change_id:
            self.notifier.notify()
            self.wake_dispatch()
            log.info("project %s: PR #%d fix round %d is Change %s", d.project, pull.pr_number, number, change_id)

    @staticmethod
    async def _by_writers(forge: ForgeClient, comments: list[rounds.LineComment]) -> list[rounds.LineComment]:
        """The line comments of users with write permission: anyone may comment on a public repository's
        pull request, and only those who may push decide what a round changes (and spends)."""
        writers = {a for a in {c.author for c in comments} if a and await forge.permission(a) in PERMITTED}
        return [c for c in comments if c.author in writers]

    async def finish_rounds(self) -> None:
        """Tell each finished round's end whose wait after a failed try is over: its candidate pushed onto
        the pull request's branch and said there, or why not."""
        for done in await self.store.read(store_rounds.finished_rounds):
            if not forge_report.may_try(done.failures, done.last_failure, utcnow()):
                continue
            try:
                await self._tell(done)
            except (ForgeError, DroverError, gitspace.WorkspaceError) as err:
                passing = _passing(err)
                step = await self.store.run(store_rounds.record_failure, done.change_id, str(err), passing)
                how = "tried again later" if step == rounds.RETRY else "given up"
                log.warning("project %s: fix round %s not told (%s): %s", done.project, done.change_id, how, err)

    async def _tell(self, done: store_rounds.Finished) -> None:
        access = await self.store.read(forge_access, done.project, self.sealer)
        if done.status != "succeeded" or not done.candidate_commit:
            if done.status != "cancelled":  # a cancelled round was stopped on purpose: the pull request closed
                text = rounds.ended_comment(done.round, done.change_id, done.status, done.reason)
                async with ForgeClient(access) as forge:
                    await forge.create_comment(done.pr_number, text)
            await self.store.run(store_rounds.record_end, done.change_id, "reported", done.reason or done.status)
            return
        if not done.pushed:
            repo, token = await self.store.read(store_rounds.push_inputs, done.project, self.sealer)
            await asyncio.to_thread(
                forge_branches.fast_forward,
                repo,
                done.candidate_branch,
                done.candidate_commit,
                done.pr_branch,
                self.work_dir,
                token,
            )
            await self.store.run(store_rounds.record_push, done.change_id, done.candidate_commit)
            log.info("project %s: fix round %s pushed to %s", done.project, done.change_id, done.pr_branch)
        async with ForgeClient(access) as forge:
            text = rounds.pushed_comment(done.round, done.change_id, done.candidate_commit, done.cost_micros)
            await forge.create_comment(done.pr_number, text)
        await self.store.run(store_rounds.record_end, done.change_id, "pushed", "", done.candidate_commit)


def _passing(err: Exception) -> bool:
    """Whether a failure telling a round's end may pass: a forge call with no answer, a 5xx or a 429, or a
    git fetch or push that did not reach the forge (a push refused for good is forge_branches.PushRefused)."""
    if isinstance(err, ForgeError):
        return forge_retry.passing(err.status)
    return isinstance(err, gitspace.WorkspaceError) and not isinstance(err, forge_branches.PushRefused)

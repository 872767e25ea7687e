"""`/drover` comments in the forge loop (issue 28): a kept `issue_comment` delivery names the comment, not
its text, so the comment is read from the forge; its first line parsed (controlplane.domain.forge_commands),
its author's permission asked of the forge, and then one of: a Change started (as a labelled issue
starts one, with the comment's budget or the project's), the issue's running Change cancelled, or ONE
reply saying why nothing ran. Comments on pull requests, Drover's own comments and ordinary comments
are done without action."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Protocol

from controlplane.config import HarnessConfig
from controlplane.dispatch import quota
from controlplane.domain import forge_commands as commands
from controlplane.domain import forge_start as starts
from controlplane.domain import graph
from controlplane.services import forge_commands, forge_start
from controlplane.services.credentials import Sealer
from controlplane.services.forge_client import ForgeClient, ForgeError, Issue
from controlplane.services.notify import Notifier
from controlplane.store.engine import Store
from drover.errors import DroverError

log = logging.getLogger("drover.forge")


class ForgeLoop(Protocol):
    """What of controlplane.dispatch.forge_loop.ForgeLoop a comment uses."""

    store: Store
    sealer: Sealer
    notifier: Notifier
    wake_dispatch: Callable[[], None]
    harness: Callable[[], HarnessConfig]
    console_url: str
    tell_cancel: Callable[[list[tuple[str, str]], str], None]

    async def failed(self, d: forge_start.Pending, err: ForgeError | DroverError) -> None: ...


async def issue_spec(loop: ForgeLoop, project: str, issue: Issue, budget_usd: float = 0.0) -> graph.ChangeSpec:
    """The issue's Change by the project's plan: `budget_usd` when a comment gave one, else the project's."""
    plan = await loop.store.read(forge_commands.plan_of, project)
    return starts.change_spec(
        project, issue.number, issue.title, issue.body, budget_usd or plan.budget_usd, plan.check_command
    )


async def process_comment(loop: ForgeLoop, d: forge_start.Pending) -> None:
    """End the delivery of a created issue comment done (acted on, or nothing to do) or failed (why)."""
    try:
        access = await loop.store.read(forge_start.forge_access, d.project, loop.sealer)
        async with ForgeClient(access) as forge:
            await _comment(loop, forge, d)
    except (ForgeError, DroverError) as err:
        await loop.failed(d, err)


async def _comment(loop: ForgeLoop, forge: ForgeClient, d: forge_start.Pending) -> None:
    if d.sender.endswith("[bot]"):  # a GitHub App's comment (Drover's own, as an App): not even read
        await loop.store.run(forge_start.finish, d.delivery_id, "done", f"a comment by the bot {d.sender}")
        return
    comment = await forge.get_comment(d.comment_id)
    command = commands.parse(comment.body)
    if command is None or comment.user_type == "Bot":
        why = "not a /drover command" if command is None else f"a comment by the bot {comment.user}"
        await loop.store.run(forge_start.finish, d.delivery_id, "done", why)
        return
    issue = await forge.get_issue(d.number)
    if issue.pull_request:
        why = f"a comment on pull request #{d.number}: /drover commands are read on issues only"
        await loop.store.run(forge_start.finish, d.delivery_id, "done", why)
        return
    permission = await forge.permission(comment.user)
    state = await loop.store.read(forge_commands.issue_state, d.project, d.number)
    decision = commands.decide(command, comment.user, permission, state.running, state.last)
    if decision.action == commands.REPLY:
        await forge.create_comment(d.number, decision.why)
        await loop.store.run(forge_start.finish, d.delivery_id, "done", f"replied: {decision.why}")
    elif decision.action == commands.CANCEL:
        runs = await loop.store.run(forge_commands.stop, d.delivery_id, decision.change_id, comment.user)
        loop.tell_cancel([(r.id, r.agent) for r in runs], "change cancelled")
        loop.notifier.notify()
        loop.wake_dispatch()
        log.info("project %s: issue #%d's Change %s %s", d.project, d.number, decision.change_id, decision.why)
    else:
        await _start(loop, forge, d, await issue_spec(loop, d.project, issue, decision.budget_usd))


async def _start(loop: ForgeLoop, forge: ForgeClient, d: forge_start.Pending, spec: graph.ChangeSpec) -> None:
    """Submit and link the issue's Change (nothing when one started meanwhile), then comment naming it."""
    if not quota.has_model_key(loop.harness(), os.environ):
        raise ForgeError(quota.NO_MODEL_KEY)
    change_id = await loop.store.run(forge_start.start_change, d.delivery_id, spec, d.number)
    if not change_id:
        return
    loop.notifier.notify()
    loop.wake_dispatch()
    log.info("project %s: a comment on issue #%d started Change %s", d.project, d.number, change_id)
    said = await forge.create_comment(d.number, starts.started_comment(change_id, loop.console_url))
    await loop.store.run(forge_start.record_comment, change_id, said)

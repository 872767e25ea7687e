"""agentd's exceptions, one hierarchy: every way agentd refuses, fails or ends a run derives from
AgentdError, so a name says one thing (there is one RunRefused, one RunEnded).

- AgentdError
  - StartRefused: agentd will not start on this host (no sandbox, a session user it cannot use).
  - ControlPlaneLost: the stream to the control plane ended or could not be opened (tried again).
  - ControlPlaneRejected: the control plane refused this agent in a way waiting does not heal.
  - RunRefused: this agent will not take an assignment; `reason` goes back to the control plane.
  - CgroupsUnavailable: agentd cannot make cgroups here.
  - DiskFailed: a run's own filesystem could not be made or mounted.
  - LoopUnsupported: a loop device cannot be set up in process here (mount(8) may).
  - SandboxFailed: bubblewrap could not set a run's sandbox up (the run fails as `sandbox_failed`).
  - SetupFailed: a project's setup command failed (the run fails as `setup_failed`).
  - ModelCallRefused: the control plane refused a model call (`code`: spend_limited, run_call_cap, ...).
  - RunEnded: a run is over; `outcome`, `code` (the reason the control plane records) and more.
"""

from __future__ import annotations

import errno
from typing import Any

FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The errnos of a full disk or quota."""
STATUS = {"succeeded": "succeeded", "completed": "succeeded", "parked": "succeeded", "cancelled": "cancelled"}
"""The exit record's status of each outcome; any other outcome is a failure."""


def is_full(err: BaseException) -> bool:
    """A write failed because the disk or the quota is full."""
    return isinstance(err, OSError) and err.errno in FULL


class AgentdError(Exception):
    """Every exception of agentd's own."""


class StartRefused(AgentdError):
    """agentd will not start; the message says why and what to do."""


class ControlPlaneLost(AgentdError):
    """The stream to the control plane ended or could not be opened."""


class ControlPlaneRejected(AgentdError):
    """The control plane refused this agent in a way that waiting does not heal."""


class RunRefused(AgentdError):
    """The agent will not take this run; the reason goes back to the control plane."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CgroupsUnavailable(AgentdError):
    """agentd cannot make cgroups here; the message says why."""


class DiskFailed(AgentdError):
    """The run's filesystem could not be made or mounted; the message says why."""


class LoopUnsupported(AgentdError):
    """This kernel (no LOOP_CONFIGURE) or /dev (no loop-control, no device node) cannot set a loop
    device up in process; mount(8) may."""


class SandboxFailed(AgentdError):
    """bubblewrap could not set the sandbox up; the run fails as `sandbox_failed`."""


class SetupFailed(AgentdError):
    """One of the project's setup commands failed: `command` (the line), its `index` and `exit_code`."""

    def __init__(self, command: str, index: int, exit_code: int, why: str = "") -> None:
        said = why or f"exited with {exit_code}"
        super().__init__(f"setup command {index + 1} ({command[:200]}) {said}")
        self.command, self.index, self.exit_code = command, index, exit_code


class ModelCallRefused(AgentdError):
    """The control plane refused a model call; `code` is its refusal (spend_limited, run_call_cap, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class RunEnded(AgentdError):
    """The run is over. `outcome`: succeeded (a command), completed, parked, failed, cancelled, timeout,
    spend_limited, run_call_cap, ...; `reason`: what a person reads; `code`: the run's reason as the
    control plane records it (default: the outcome); `exit_code`: the command's, or what the driver
    says; `line`: a line for the run's system log; `intent`: a harness's complete_task; `extra`: more
    for the exit record (a parked session's)."""

    def __init__(
        self,
        outcome: str,
        reason: str = "",
        intent: dict[str, Any] | None = None,
        code: str | None = None,
        exit_code: int | None = None,
        line: str = "",
    ) -> None:
        super().__init__(f"{outcome}: {reason}" if reason else outcome)
        self.outcome, self.reason, self.intent = outcome, reason, intent or {}
        self.code = outcome if code is None else code
        self.line = line
        self.extra: dict[str, Any] = {}
        self._exit_code = exit_code

    @property
    def status(self) -> str:
        """The exit record's status: succeeded, cancelled or failed."""
        return STATUS.get(self.outcome, "failed")

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    @property
    def exit_code(self) -> int:
        if self._exit_code is not None:
            return self._exit_code
        return 0 if self.ok else 1

"""`controlplane serve`'s options for how long things may stay silent or be kept: a lost agent, a silent
agent stream, a run without progress, finished deliveries. Parsed here, checked here (exit 2 naming the
option), handed to ServerConfig by `controlplane.cli`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from drover.errors import InvalidArgument

DAY_SECONDS = 86400.0
"""The longest delay a setting may ask for."""


def add_options(s: argparse.ArgumentParser, env: Callable[[str, str], str]) -> None:
    s.add_argument(
        "--agent-lost-seconds",
        type=float,
        default=float(env("DROVER_AGENT_LOST_SECONDS", "120")),
        help="fail the runs of an agent gone this long, counted from when it was last heard (default 120)",
    )
    s.add_argument(
        "--agent-silence-seconds",
        type=float,
        default=float(env("DROVER_AGENT_SILENCE_SECONDS", "30")),
        help="close an agent stream that carries nothing, not even a heartbeat, this long (default 30)",
    )
    s.add_argument(
        "--delivery-retention-days",
        type=retention_days,
        default=env("DROVER_DELIVERY_RETENTION_DAYS", "30"),  # a string default goes through `type` too
        help="prune finished forge webhook and notification deliveries after this many days; 0: never (default 30)",
    )
    s.add_argument(
        "--run-check-seconds",
        type=float,
        default=float(env("DROVER_RUN_CHECK_SECONDS", "60")),
        help="check each running run for progress this often (default 60)",
    )
    s.add_argument(
        "--run-stall-checks",
        type=int,
        default=int(env("DROVER_RUN_STALL_CHECKS", "15")),
        help="end a running run as timeout after this many checks without output, model or tool call (default 15)",
    )
    s.add_argument(
        "--retry-delay-seconds",
        type=float,
        default=float(env("DROVER_RETRY_DELAY_SECONDS", "5")),
        help="start a failed harness run's retry or escalation this long after it (default 5)",
    )


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """ServerConfig's fields from the options (InvalidArgument naming one that is not over 0)."""
    return {
        "agent_lost_seconds": args.agent_lost_seconds,
        "agent_silence_seconds": args.agent_silence_seconds,
        "delivery_retention_days": args.delivery_retention_days,
        "run_check_seconds": positive(args.run_check_seconds, "run_check_seconds"),
        "run_stall_checks": int(positive(args.run_stall_checks, "run_stall_checks")),
        "retry_delay_seconds": within_a_day(args.retry_delay_seconds, "retry_delay_seconds"),
    }


def positive(value: float, field: str) -> float:
    if not value > 0:
        raise InvalidArgument(f"--{field.replace('_', '-')} must be over 0, not {value:g}", field=field)
    return value


def retention_days(text: str) -> float:
    """A number of days, at least 1 (GitHub redelivers for a few days: a delivery pruned sooner could
    be applied twice), or 0 for never."""
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of days") from None
    if not (days == 0 or 1 <= days <= 36500):
        raise argparse.ArgumentTypeError(f"{text}: must be 0 (keep forever) or from 1 to 36500 days")
    return days


def within_a_day(value: float, field: str) -> float:
    """A delay from 0 to a day (a longer one is a Task left waiting, and infinity no time at all)."""
    if not 0 <= value <= DAY_SECONDS:
        raise InvalidArgument(
            f"--{field.replace('_', '-')} must be from 0 to {DAY_SECONDS:g}, not {value:g}", field=field
        )
    return value

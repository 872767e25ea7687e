"""`agentd [--config FILE] [flags]`. The daemon's modules are imported once the arguments are parsed:
`agentd --version` and `--help` start without the model SDK, git or the gRPC stack."""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import sys

from agentd import __version__
from agentd.errors import ControlPlaneRejected, StartRefused
from drover.core import logs


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="agentd",
        description="The Drover fleet daemon",
        epilog="exit codes: 0 stopped by a signal, 2 invalid settings or no sandbox, "
        "4 the token file is unreadable or the control plane refused this agent (see --retry-auth)",
    )
    p.add_argument("--version", action="version", version=f"agentd {__version__}")
    p.add_argument("--log-format", choices=logs.FORMATS, help="text (default) or json lines; env DROVER_LOG_FORMAT")
    p.add_argument("--config", help="TOML file with the settings below (env DROVER_AGENTD_* overrides it)")
    p.add_argument(
        "--control-plane",
        dest="control_plane",
        help="host:port, or host:port,host:port,... of several replicas (default 127.0.0.1:50051)",
    )
    p.add_argument("--name", help="unique agent name (default: the host name)")
    p.add_argument("--token-file", dest="token_file", help="default .drover/tokens/agent.token")
    retry = "keep dialling when the token or name is refused or the token file is missing (default: exit 4)"
    p.add_argument("--retry-auth", dest="retry_auth", action="store_true", default=None, help=retry)
    p.add_argument("--capacity", type=int, help="concurrent runs (default 1)")
    p.add_argument("--label", dest="labels", action="append", help="key=value, repeatable (pool=web)")
    p.add_argument("--work-dir", dest="work_dir", help="parent of run workspaces")
    p.add_argument(
        "--spool-dir",
        dest="spool_dir",
        help="run directories and outbox (default NAME/spool in /var/lib/drover-agentd as root, "
        "else in $XDG_STATE_HOME/drover-agentd)",
    )
    p.add_argument("--keep-workspaces", dest="keep_workspaces", action="store_true", default=None)
    workspace_cache_flags(p)
    p.add_argument(
        "--no-prefork",
        dest="prefork",
        action="store_false",
        default=None,
        help="start each run's supervisor as a fresh interpreter instead of forking it from a template",
    )
    p.add_argument("--default-timeout-seconds", dest="default_timeout_seconds", type=int)
    p.add_argument("--kill-grace-seconds", dest="kill_grace_seconds", type=float)
    p.add_argument("--metrics-listen", dest="metrics_listen", help="host:port of a Prometheus /metrics endpoint")
    p.add_argument("--claude-command", dest="claude_command", help="Claude Code executable (default: claude on PATH)")
    p.add_argument("--opencode-command", dest="opencode_command", help="opencode executable (default: opencode)")
    p.add_argument(
        "--session-user",
        dest="session_user",
        help="one OS user all runs execute as (agentd must be root; weaker than the default as root: "
        "a uid per run slot, see run_uid_base)",
    )
    p.add_argument(
        "--unsafe-no-sandbox",
        dest="unsafe_no_sandbox",
        action="store_true",
        default=None,
        help="run Tasks WITHOUT bubblewrap (no isolation at all); without it agentd refuses to start "
        "where bubblewrap does not work",
    )
    return p


def workspace_cache_flags(p: argparse.ArgumentParser) -> None:
    """Where agentd keeps the projects' prepared workspaces and repository mirrors (docs/operations.md)."""
    p.add_argument(
        "--prepared-cache-dir",
        dest="prepared_cache_dir",
        help="projects' trees after setup, kept for later runs (default: prepared, beside the spool directory)",
    )
    p.add_argument(
        "--prepared-cache-max-bytes",
        dest="prepared_cache_max_bytes",
        type=int,
        help="the prepared workspaces' size, at most; least recently used go first; 0: no cache (default 20 GiB)",
    )
    p.add_argument(
        "--mirror-dir",
        dest="mirror_dir",
        help="repository mirrors runs clone through (default: mirrors, beside the spool directory)",
    )
    p.add_argument(
        "--mirror-refresh-seconds",
        dest="mirror_refresh_seconds",
        type=float,
        help="how often the mirrors recent runs used are fetched between runs; 0: only at each run's start "
        "(default 300)",
    )


def main(argv: list[str] | None = None) -> int:
    args = vars(parser().parse_args(argv))
    import asyncio

    from agentd.daemon import isolation
    from agentd.daemon.config import load
    from agentd.daemon.daemon import Agent

    file = args.pop("config")
    try:
        logs.configure(
            os.environ.get("DROVER_LOG_LEVEL", "INFO"),
            args.pop("log_format") or os.environ.get("DROVER_LOG_FORMAT", "text"),
        )
        config = load(pathlib.Path(file) if file else None, os.environ, args)
    except (ValueError, OSError) as err:
        print(f"agentd: {err}", file=sys.stderr)
        return 2
    try:
        isolated = isolation.prepare(config)
    except StartRefused as refused:
        print(f"agentd: {refused}", file=sys.stderr)
        return 2
    if not config.retry_auth:  # after the settings and the sandbox: exit 2 says the host is wrong first
        try:
            config.token_file.read_bytes()
        except OSError as err:
            print(
                f"agentd: cannot read the token file {config.token_file}: {err.strerror or err}; "
                "pass --token-file (or --retry-auth to wait for it)",
                file=sys.stderr,
            )
            return 4
    log = logging.getLogger("agentd")
    for warning in isolated.warning.splitlines():
        log.warning("%s", warning)
    log.info(
        "agentd %s dialing %s (capacity %d, spool %s); %s",
        config.name,
        config.control_plane,
        config.capacity,
        config.spool,
        isolated.said,
    )

    try:
        asyncio.run(Agent(isolated.config).run())
    except ControlPlaneRejected as rejected:  # waiting does not heal it: say so and stop, so systemd need not loop
        print(f"agentd: {rejected}; fix the token or name, or start with --retry-auth to keep trying", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())

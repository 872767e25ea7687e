"""`controlplane serve | token ... | project ... | index build | credential-key | credential-reseal`: the
control plane's composition root. Each command is one function; argparse dispatches to it.

Each command imports what it uses inside its function: `--version` and `--help` import no server,
database or model code, and the token and project commands no server (issue 25: every command took
seconds, mostly importing the model SDK)."""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from controlplane import serve_liveness
from controlplane.config import ConsoleLimits
from controlplane.credential_cli import credential_parsers
from controlplane.domain.names import ROLES, TOKEN_KINDS
from controlplane.project_cli import project_parsers
from drover.core import logs
from drover.errors import DroverError, InvalidArgument, NotFound
from drover.extras import Version

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from controlplane.store.data_dir import DataDir
    from controlplane.store.engine import Store

Command = Callable[["Store", "DataDir", argparse.Namespace], None]


def cmd_serve(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    import asyncio

    from controlplane.config import ServerConfig, check_console_url, load_harness, load_memory, load_notify
    from controlplane.server import bootstrap_tokens, serve
    from controlplane.services.credentials import Sealer

    Sealer.from_config(args.credential_key_file)  # a bad key file stops the start here, in one line (exit 2)
    file = pathlib.Path(args.config) if args.config else None
    server = ServerConfig(
        listen=args.listen,
        metrics_listen=args.metrics_listen,
        http_listen=args.http_listen,
        console_url=check_console_url(args.console_url),
        data_dir=config.data_dir,
        database_url=config.database_url,
        **serve_liveness.settings(args),
        max_budget_usd=args.max_budget_usd,
        output_limit_bytes=args.output_limit_bytes,
        grace_seconds=args.grace_seconds,
        harness=load_harness(file, os.environ),
        memory=load_memory(file, os.environ),
        notify=load_notify(file, os.environ),
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        allow_plaintext=args.allow_plaintext,
        credential_key_file=args.credential_key_file,
        console=ConsoleLimits(
            max_connections=args.console_max_connections,
            max_streams=args.console_max_streams,
            max_streams_per_session=args.console_max_streams_per_session,
            max_uploads=args.console_max_uploads,
            body_timeout_seconds=args.console_body_timeout_seconds,
        ),
    )
    tokens_dir = config.data_dir / "tokens"
    for name, path in bootstrap_tokens(store, tokens_dir, config.url).items():
        usual = tokens_dir / f"{name}.token"
        kept = "" if path == usual else f" ({usual} exists and is kept: it is not a token of this database)"
        print(f"wrote {name} token to {path}{kept}", flush=True)
    asyncio.run(serve(server, store, file))


def cmd_token_create(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    from controlplane.services import token_files, tokens

    if args.force and not args.out:
        raise InvalidArgument("--force replaces an --out file; give --out too", field="force")
    expires = tokens.parse_duration(args.expires_in) if args.expires_in else None

    def create(s: Session) -> str:
        return tokens.create_token(
            s,
            args.kind,
            args.name,
            args.role,
            args.monthly_budget_usd,
            pool=args.pool,
            projects=args.projects,
            expires_in=expires,
        )

    if not args.out:
        print(store.transaction(create))
        return
    # The file first, then the token, written inside its transaction: a refused --out stores nothing.
    with token_files.token_file(pathlib.Path(args.out), replace=args.force) as write:
        store.transaction(lambda s: write(create(s)))
    print(f"wrote {args.kind} token {args.name!r} to {args.out}")


def cmd_token_list(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    from controlplane.services import tokens

    print(token_table(store.transaction(tokens.list_tokens)))


def cmd_token_revoke(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    from controlplane.services import tokens

    count = store.transaction(tokens.revoke, args.name, args.kind)
    print(
        f"revoked {count} token{'s' if count != 1 else ''} named {args.name!r}; they are refused from the next call on"
    )


def cmd_index_build(store: Store, config: DataDir, args: argparse.Namespace) -> None:
    import asyncio

    from controlplane.config import load_memory
    from controlplane.context.canonical_tree import open_canonical
    from controlplane.context.recall import Recall
    from controlplane.services.credentials import Sealer, git_secret
    from controlplane.store.models import Project

    name, file = args.project, pathlib.Path(args.config) if args.config else None
    project = store.transaction(lambda s: s.get(Project, name))
    if project is None:
        raise NotFound(f"no project {name!r}", field="project")
    if not project.repo:
        raise InvalidArgument("the project has no repository to index", field="project")
    secret = git_secret(project, Sealer.from_config(os.environ.get("DROVER_CREDENTIAL_KEY_FILE", "")))[1]
    repo, commit = open_canonical(project.name, project.repo, project.branch, config.data_dir / "mirrors", secret)
    if not commit:
        raise InvalidArgument(f"branch {project.branch} has no commit", field="project")

    last = [0.0]

    def progress(done: int, total: int) -> None:  # a line at most every 2 s, and the last
        if done == total or time.monotonic() - last[0] >= 2:
            last[0] = time.monotonic()
            print(f"indexing {name}: {done}/{total} files", file=sys.stderr, flush=True)

    async def build() -> Any:
        memory = Recall(store, config.data_dir, load_memory(file, os.environ))
        return await memory.build(name, repo.path, commit, progress)

    print(f"indexed {name} at {commit[:12]}: {asyncio.run(build())}")


def token_table(rows: list[Any]) -> str:
    """Tokens for a terminal: never the secret (only its hash is stored anyway)."""
    from controlplane.store.engine import aware
    from drover.render import table

    def when(value: Any) -> str:
        value = aware(value)
        return value.strftime("%Y-%m-%d %H:%M") if value else "-"

    lines = []
    for t in rows:
        lines.append(
            [
                t.name,
                t.kind,
                t.role or "-",
                (t.pool or "default") if t.kind == "agent" else "-",
                ",".join(t.projects) if t.kind == "user" and t.projects else ("all" if t.kind == "user" else "-"),
                when(t.created_at),
                when(t.last_used_at),
                when(t.expires_at),
                when(t.revoked_at),
            ]
        )
    return table(lines, ["NAME", "KIND", "ROLE", "POOL", "PROJECTS", "CREATED", "LAST USED", "EXPIRES", "REVOKED"])


def _command(sub: Any, name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
    """A subcommand with the store options every command takes."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
    p.add_argument(
        "--data-dir",
        default=os.environ.get("DROVER_DATA_DIR", ".drover"),
        help="SQLite database, tokens (default ./.drover; env DROVER_DATA_DIR)",
    )
    p.add_argument(
        "--database-url",
        default=os.environ.get("DROVER_DATABASE_URL", ""),
        help="postgresql+psycopg://... (env DROVER_DATABASE_URL); default SQLite in the data dir",
    )
    p.set_defaults(func=func)
    return p


def _serve_parser(sub: Any) -> None:
    s = _command(sub, "serve", cmd_serve, "run the gRPC server")
    env = os.environ.get
    s.add_argument("--listen", default=env("DROVER_LISTEN", "127.0.0.1:50051"))
    s.add_argument("--log-format", choices=logs.FORMATS, help="text (default) or json lines; env DROVER_LOG_FORMAT")
    s.add_argument(
        "--metrics-listen",
        default=env("DROVER_METRICS_LISTEN", ""),
        help="host:port of a Prometheus /metrics endpoint (default none; env DROVER_METRICS_LISTEN)",
    )
    s.add_argument(
        "--http-listen",
        default=env("DROVER_HTTP_LISTEN", ""),
        help="host:port of the web console (default none; env DROVER_HTTP_LISTEN); TLS as --tls-cert/--tls-key",
    )
    _console_limits(s)
    serve_liveness.add_options(s, env)
    s.add_argument(
        "--max-budget-usd",
        type=float,
        default=float(env("DROVER_MAX_BUDGET_USD", "10000")),
        help="the highest budget a Change may have (default 10000)",
    )
    s.add_argument("--output-limit-bytes", type=int, default=8 * 1024 * 1024)
    s.add_argument("--grace-seconds", type=float, default=10.0)
    s.add_argument("--tls-cert", default=env("DROVER_TLS_CERT", ""), help="PEM certificate chain")
    s.add_argument("--tls-key", default=env("DROVER_TLS_KEY", ""), help="PEM private key")
    s.add_argument(
        "--credential-key-file",
        default=env("DROVER_CREDENTIAL_KEY_FILE", ""),
        help="the key(s) sealing git credentials sent through the API, newest first "
        "(`controlplane credential-key` makes one; default: env DROVER_CREDENTIAL_KEY)",
    )
    s.add_argument(
        "--tls-client-ca",
        default=env("DROVER_TLS_CLIENT_CA", ""),
        help="require client certificates signed by this CA (mTLS)",
    )
    s.add_argument(
        "--allow-plaintext",
        action="store_true",
        help="serve plaintext on a non-loopback address (a private network only)",
    )
    s.add_argument(
        "--config",
        default=env("DROVER_CONFIG", ""),
        help="TOML file: [anthropic], [harness], [tiers.*], [prices.*] (env DROVER_CONFIG)",
    )


def _console_limits(s: Any) -> None:
    """The console's public address, and its process's limits (ConsoleLimits): flags, or DROVER_CONSOLE_*
    in the environment."""
    s.add_argument(
        "--console-url",
        default=os.environ.get("DROVER_CONSOLE_URL", ""),
        help="the console's address as users reach it, linked from issue comments (env DROVER_CONSOLE_URL)",
    )
    default = ConsoleLimits()
    for flag, kind, meaning in (
        ("max-connections", int, "open console connections at once; 503 beyond"),
        ("max-streams", int, "live event streams at once; 503 beyond"),
        ("max-streams-per-session", int, "live event streams of one signed-in token; 429 beyond"),
        ("max-uploads", int, "form bodies being received at once; 503 beyond"),
        ("body-timeout-seconds", float, "a form body must arrive whole within this; 408 after"),
    ):
        name = flag.replace("-", "_")
        variable = f"DROVER_CONSOLE_{name.upper()}"
        value = kind(os.environ.get(variable, getattr(default, name)))
        s.add_argument(
            f"--console-{flag}", type=kind, default=value, help=f"{meaning} (default {value}; env {variable})"
        )


def _token_parsers(sub: Any) -> None:
    t = sub.add_parser("token", help="tokens").add_subparsers(dest="token_command", required=True)
    tc = _command(t, "create", cmd_token_create, "create a token and print it once")
    tc.add_argument("--kind", choices=TOKEN_KINDS, required=True)
    tc.add_argument("--name", required=True)
    tc.add_argument("--role", choices=ROLES, default="")
    tc.add_argument(
        "--project",
        action="append",
        default=[],
        dest="projects",
        metavar="PROJECT",
        help="user tokens: a project it may use (repeatable; none: every project)",
    )
    tc.add_argument("--pool", default="", help="agent tokens: the pool it serves (default: the default pool)")
    tc.add_argument("--expires-in", default="", help="e.g. 30d, 12h, 1d12h (default: never)")
    tc.add_argument(
        "--out", help="write the token to this new file (mode 0600) instead of printing it; an existing file is refused"
    )
    tc.add_argument("--force", action="store_true", help="with --out: replace the file if it exists")
    tc.add_argument("--monthly-budget-usd", type=float, default=0.0, help="this user's monthly model budget (0: none)")
    _command(t, "list", cmd_token_list, "every token: name, kind, role, pool, projects, created, last used, expiry")
    revoke_help = "revoke every live token of a name, from the next call on (an agent token within 0.5 s)"
    tr = _command(t, "revoke", cmd_token_revoke, revoke_help)
    tr.add_argument("--name", required=True)
    tr.add_argument("--kind", choices=TOKEN_KINDS, default="")


def _index_parsers(sub: Any) -> None:
    ix = sub.add_parser("index", help="semantic memory").add_subparsers(dest="index_command", required=True)
    ib = _command(ix, "build", cmd_index_build, "index a project's canonical tree (incremental by blob id)")
    ib.add_argument("project")
    ib.add_argument("--config", default=os.environ.get("DROVER_CONFIG", ""), help="TOML with a [memory] table")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="controlplane",
        description="The Drover control plane",
        epilog="exit codes: 0 done, 2 usage or invalid input, 3 not found, 5 the database is unreachable, "
        "70 a bug in controlplane",
    )
    p.add_argument("--version", action=Version)
    sub = p.add_subparsers(dest="command", required=True)
    _serve_parser(sub)
    _token_parsers(sub)
    projects = project_parsers(sub, _command)
    _index_parsers(sub)
    credential_parsers(sub, projects, _command)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        logs.configure(
            os.environ.get("DROVER_LOG_LEVEL", "INFO"),
            getattr(args, "log_format", None) or os.environ.get("DROVER_LOG_FORMAT", "text"),
        )
    except ValueError as err:  # DROVER_LOG_LEVEL or DROVER_LOG_FORMAT
        print(f"controlplane: {err}", file=sys.stderr)
        return 2
    if logging.getLogger().level > logging.DEBUG:  # the schema migrations' INFO lines are noise in a terminal
        logging.getLogger("alembic").setLevel(logging.WARNING)
    if not getattr(args, "needs_store", True):  # `credential-key`: nothing of the database
        return _run(lambda: args.func(None, None, args))
    import sqlalchemy.exc

    from controlplane.store.data_dir import DataDir, lock_data_dir, open_store

    config = DataDir(data_dir=pathlib.Path(args.data_dir), database_url=args.database_url)
    if args.func is cmd_serve:
        lock_data_dir(config.data_dir)  # before touching the database: a second control plane stops here
    try:
        store = open_store(config)
    except sqlalchemy.exc.OperationalError as err:
        print(f"controlplane: cannot reach the database {_safe_url(config)}: {err.orig or err}", file=sys.stderr)
        return 5
    try:
        return _run(lambda: args.func(store, config, args))
    finally:
        if args.func is not cmd_serve:
            store.close()


def _run(command: Callable[[], None]) -> int:
    """Run a command; its exit code, and a sentence on stderr for a failure (never a traceback)."""
    try:
        command()
        sys.stdout.flush()  # here, so a reader that went away is seen below and not at exit
    except BrokenPipeError:  # `controlplane token list | head -1`: the reader has what it wanted
        from drover.render import closed_pipe

        return closed_pipe()
    except NotFound as err:
        print(f"controlplane: {err}", file=sys.stderr)
        return 3
    except (DroverError, ValueError, OSError) as err:
        print(f"controlplane: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # a bug of ours: the log has the traceback, the terminal a sentence
        logging.getLogger("drover.cli").debug("unexpected error", exc_info=True)
        print(f"controlplane: unexpected error: {type(err).__name__}: {err}", file=sys.stderr)
        return 70
    return 0


def _safe_url(config: DataDir) -> str:
    from sqlalchemy.engine import make_url

    return make_url(config.url).render_as_string(hide_password=True)


if __name__ == "__main__":
    sys.exit(main())

"""`controlplane serve | token create | token list | token revoke | project add | index build`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import pathlib
import sys
from typing import Any

from controlplane.api.server import bootstrap_tokens, lock_data_dir, open_store, serve
from controlplane.config import ServerConfig, load_harness, load_memory
from controlplane.domain.errors import DroverError, InvalidArgument, NotFound
from controlplane.services import tokens
from controlplane.services.projects import add_project
from controlplane.store.engine import aware


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default=os.environ.get("DROVER_DATA_DIR", ".drover"),
                   help="SQLite database, tokens (default ./.drover; env DROVER_DATA_DIR)")
    p.add_argument("--database-url", default=os.environ.get("DROVER_DATABASE_URL", ""),
                   help="postgresql+psycopg://... (env DROVER_DATABASE_URL); default SQLite in the data dir")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="controlplane", description="The Drover control plane")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the gRPC server")
    _common(s)
    s.add_argument("--listen", default=os.environ.get("DROVER_LISTEN", "127.0.0.1:50051"))
    s.add_argument("--agent-lost-seconds", type=float,
                   default=float(os.environ.get("DROVER_AGENT_LOST_SECONDS", "120")),
                   help="fail the runs of an agent disconnected this long (default 120)")
    s.add_argument("--agent-silence-seconds", type=float,
                   default=float(os.environ.get("DROVER_AGENT_SILENCE_SECONDS", "30")),
                   help="close an agent stream that carries nothing, not even a heartbeat, this long (default 30)")
    s.add_argument("--max-budget-usd", type=float, default=float(os.environ.get("DROVER_MAX_BUDGET_USD", "10000")),
                   help="the highest budget a Change may have (default 10000)")
    s.add_argument("--output-limit-bytes", type=int, default=8 * 1024 * 1024)
    s.add_argument("--grace-seconds", type=float, default=10.0)
    s.add_argument("--tls-cert", default=os.environ.get("DROVER_TLS_CERT", ""), help="PEM certificate chain")
    s.add_argument("--tls-key", default=os.environ.get("DROVER_TLS_KEY", ""), help="PEM private key")
    s.add_argument("--tls-client-ca", default=os.environ.get("DROVER_TLS_CLIENT_CA", ""),
                   help="require client certificates signed by this CA (mTLS)")
    s.add_argument("--allow-plaintext", action="store_true",
                   help="serve plaintext on a non-loopback address (a private network only)")
    s.add_argument("--config", default=os.environ.get("DROVER_CONFIG", ""),
                   help="TOML file: [anthropic], [harness], [tiers.*], [prices.*] (env DROVER_CONFIG)")
    t = sub.add_parser("token", help="tokens").add_subparsers(dest="token_command", required=True)
    tc = t.add_parser("create", help="create a token and print it once")
    _common(tc)
    tc.add_argument("--kind", choices=tokens.KINDS, required=True)
    tc.add_argument("--name", required=True)
    tc.add_argument("--role", choices=tokens.ROLES, default="")
    tc.add_argument("--project", action="append", default=[], dest="projects", metavar="PROJECT",
                    help="user tokens: a project it may use (repeatable; none: every project)")
    tc.add_argument("--pool", default="", help="agent tokens: the pool it serves (default: the default pool)")
    tc.add_argument("--expires-in", default="", help="e.g. 30d, 12h, 1d12h (default: never)")
    tc.add_argument("--out", help="write the token to this file (mode 0600) instead of printing it")
    tc.add_argument("--monthly-budget-usd", type=float, default=0.0,
                    help="this user's monthly model budget (0: none)")
    tl = t.add_parser("list", help="every token: name, kind, role, pool, projects, created, last used, expiry")
    _common(tl)
    tr = t.add_parser("revoke", help="revoke every live token of a name, from the next call on")
    _common(tr)
    tr.add_argument("--name", required=True)
    tr.add_argument("--kind", choices=tokens.KINDS, default="")
    pr = sub.add_parser("project", help="projects").add_subparsers(dest="project_command", required=True)
    pa = pr.add_parser("add", help="add or update a project")
    _common(pa)
    pa.add_argument("name")
    pa.add_argument("--repo", default="", help="path or URL of the git repository (empty: no repository)")
    pa.add_argument("--branch", default="main")
    pa.add_argument("--pool", default="", help="only agents labelled pool=P run this project's Tasks")
    pa.add_argument("--allow", action="append", default=[], metavar="RULE",
                    help="a command the harness may run, e.g. 'pytest [args]' (repeatable; default: Python rules)")
    pa.add_argument("--network", action="store_true", help="let the harness's commands use the network")
    pa.add_argument("--monthly-budget-usd", type=float, default=0.0, help="the project's monthly model budget")
    pa.add_argument("--git-token-file", default="",
                    help="file holding the git token for an https repository; read when a run starts, never stored")
    ix = sub.add_parser("index", help="semantic memory").add_subparsers(dest="index_command", required=True)
    ib = ix.add_parser("build", help="index a project's canonical tree (incremental by blob id)")
    _common(ib)
    ib.add_argument("project")
    ib.add_argument("--config", default=os.environ.get("DROVER_CONFIG", ""), help="TOML with a [memory] table")
    return p


def _index_build(store: Any, config: ServerConfig, name: str, file: pathlib.Path | None) -> None:
    from controlplane.context.canonical_tree import open_canonical
    from controlplane.context.recall import Recall
    from controlplane.services.projects import git_token
    from controlplane.store.models import Project
    project = store.transaction(lambda s: s.get(Project, name))
    if project is None:
        raise NotFound(f"no project {name!r}", field="project")
    if not project.repo:
        raise InvalidArgument("the project has no repository to index", field="project")
    repo, commit = open_canonical(project.name, project.repo, project.branch, config.data_dir / "mirrors",
                                  git_token(project))
    if not commit:
        raise InvalidArgument(f"branch {project.branch} has no commit", field="project")

    async def build() -> Any:
        return await Recall(store, config.data_dir, load_memory(file, os.environ)).build(name, repo.path, commit)
    report = asyncio.run(build())
    print(f"indexed {name} at {commit[:12]}: {report}")


def token_table(rows: list[Any]) -> str:
    """Tokens for a terminal: never the secret (only its hash is stored anyway)."""
    def when(value: Any) -> str:
        value = aware(value)
        return value.strftime("%Y-%m-%d %H:%M") if value else "-"
    lines = [["NAME", "KIND", "ROLE", "POOL", "PROJECTS", "CREATED", "LAST USED", "EXPIRES", "REVOKED"]]
    for t in rows:
        lines.append([t.name, t.kind, t.role or "-", (t.pool or "default") if t.kind == "agent" else "-",
                      ",".join(t.projects) if t.kind == "user" and t.projects else ("all" if t.kind == "user" else "-"),
                      when(t.created_at), when(t.last_used_at), when(t.expires_at), when(t.revoked_at)])
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in lines)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("DROVER_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = ServerConfig(data_dir=pathlib.Path(args.data_dir), database_url=args.database_url)
    if args.command == "serve":
        lock_data_dir(config.data_dir)  # before touching the database: a second control plane stops here
    store = open_store(config)
    try:
        if args.command == "serve":
            file = pathlib.Path(args.config) if args.config else None
            harness = load_harness(file, os.environ)
            config = ServerConfig(listen=args.listen, data_dir=config.data_dir, database_url=config.database_url,
                                  agent_lost_seconds=args.agent_lost_seconds,
                                  agent_silence_seconds=args.agent_silence_seconds,
                                  max_budget_usd=args.max_budget_usd,
                                  output_limit_bytes=args.output_limit_bytes, grace_seconds=args.grace_seconds,
                                  harness=harness, memory=load_memory(file, os.environ),
                                  tls_cert=args.tls_cert, tls_key=args.tls_key, tls_client_ca=args.tls_client_ca,
                                  allow_plaintext=args.allow_plaintext)
            for path in bootstrap_tokens(store, config.data_dir / "tokens"):
                print(f"wrote {path.stem} token to {path}", flush=True)
            asyncio.run(serve(config, store, pathlib.Path(args.config) if args.config else None))
        elif args.command == "token" and args.token_command == "create":
            expires = tokens.parse_duration(args.expires_in) if args.expires_in else None
            token = store.transaction(lambda s: tokens.create_token(
                s, args.kind, args.name, args.role, args.monthly_budget_usd, pool=args.pool, projects=args.projects,
                expires_in=expires))
            if args.out:
                tokens.write_token_file(pathlib.Path(args.out), token)
                print(f"wrote {args.kind} token {args.name!r} to {args.out}")
            else:
                print(token)
        elif args.command == "token" and args.token_command == "list":
            print(token_table(store.transaction(tokens.list_tokens)))
        elif args.command == "token" and args.token_command == "revoke":
            count = store.transaction(tokens.revoke, args.name, args.kind)
            print(f"revoked {count} token{'s' if count != 1 else ''} named {args.name!r}; "
                  "they are refused from the next call on")
        elif args.command == "index":
            _index_build(store, config, args.project, pathlib.Path(args.config) if args.config else None)
        elif args.command == "project":
            repo = args.repo
            if repo and "://" not in repo and not repo.startswith("git@") and os.path.exists(repo):
                repo = str(pathlib.Path(repo).resolve())
            token_file = str(pathlib.Path(args.git_token_file).resolve()) if args.git_token_file else ""
            store.transaction(add_project, args.name, repo, args.branch, args.pool, args.allow, args.network,
                              token_file, args.monthly_budget_usd)
            print(f"project {args.name}: repo {repo or '(none)'}, branch {args.branch}, pool {args.pool or '(any)'}")
    except (DroverError, ValueError) as err:
        print(f"controlplane: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # a bug of ours: the log has the traceback, the terminal a sentence
        logging.getLogger("drover.cli").debug("unexpected error", exc_info=True)
        print(f"controlplane: unexpected error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
    finally:
        if args.command != "serve":
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

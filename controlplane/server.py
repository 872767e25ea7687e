"""The composition root: builds one control-plane process from its layers (store, services, context,
dispatch loops, the gRPC API and the web console) and runs it. It sits above `api` and `web`, so neither
imports the other's wiring: the console reaches the API only through gRPC."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import pathlib
import signal

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from controlplane.api import fleet_metrics, validation
from controlplane.api.agent_service import AgentService
from controlplane.api.agent_stream import AgentSessions
from controlplane.api.auth import AuthInterceptor, TokenCache
from controlplane.api.change_service import ChangeService
from controlplane.api.console_link import ConsoleLink
from controlplane.api.endpoint import Endpoint, grpc_server
from controlplane.api.forge_hooks import ForgeHooks
from controlplane.api.operations_service import OperationsService
from controlplane.api.permissions import PERMISSIONS
from controlplane.api.project_service import ProjectService
from controlplane.api.replica import Replica
from controlplane.api.token_service import TokenService
from controlplane.config import HarnessConfig, ServerConfig, load_harness, load_notify
from controlplane.context.recall import Recall
from controlplane.context.warmer import Warmer
from controlplane.dispatch import packet_pipeline, quota
from controlplane.dispatch.composer import Composer
from controlplane.dispatch.dispatcher import Dispatcher
from controlplane.dispatch.forge_loop import ForgeLoop
from controlplane.dispatch.liveness import Liveness
from controlplane.dispatch.notification_loop import NotificationLoop
from controlplane.dispatch.roster import read_hellos
from controlplane.dispatch.router import Router
from controlplane.dispatch.run_check import RunCheck
from controlplane.services import agent_presence, token_files, tokens
from controlplane.services.credentials import Sealer
from controlplane.services.notify import Notifier
from controlplane.store import coordination
from controlplane.store.engine import SCHEMA_LOCK, Store
from controlplane.store.models import Token
from controlplane.store.objects import DatabaseStore, DirectoryStore, ObjectStore
from controlplane.web.serve import Console

log = logging.getLogger("drover.server")


def object_store(config: ServerConfig, store: Store) -> ObjectStore:
    """A directory when one is configured or the database is SQLite; else the database (PostgreSQL),
    which every replica reads."""
    if config.object_store_dir is None and coordination.shared(store.url):
        return DatabaseStore(store.engine)
    return DirectoryStore(config.objects)


def bootstrap_tokens(store: Store, tokens_dir: pathlib.Path, database: str) -> dict[str, pathlib.Path]:
    """On first start (no token stored yet) write an admin and an agent token, mode 0600; their files by
    name. A file already there (another database's token: this one has none) is kept, and the new token
    goes beside it, named after `database` (`token_files.candidates`)."""

    def create(s: Session) -> dict[str, str]:
        if s.get_bind().dialect.name == "postgresql":  # replicas starting together: one makes them
            s.execute(text(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})"))
        if s.scalar(select(func.count()).select_from(Token)):
            return {}
        return {
            "admin": tokens.create_token(s, "user", "admin", "admin", event=False),
            "agent": tokens.create_token(s, "agent", "agent", event=False),
        }

    label = token_files.database_label(database)
    return {
        name: token_files.write_beside(tokens_dir, name, label, token)
        for name, token in store.transaction(create).items()
    }


class ControlPlane:
    """One control-plane process: the store, the loops (dispatch, liveness, composer), the agents' streams
    and the gRPC server, each given exactly the collaborators it uses."""

    def __init__(self, config: ServerConfig, store: Store) -> None:
        self.config, self.store = config, store
        self.notifier = Notifier()
        for warning in config.harness.warnings:
            log.warning("%s", warning)
        self.replica = Replica(store.url)
        self.objects = object_store(config, store)
        self.sealer = Sealer.from_config(config.credential_key_file)
        self.recall = Recall(store, config.data_dir, config.memory)
        mirrors = config.data_dir / "mirrors"
        self.router = Router(store, config.harness, self.notifier, self.objects, mirrors, self.recall, self.sealer)
        self.agents = AgentSessions(store, config, self.notifier, self.objects, self.sealer)
        self.agents.replica, self.agents.tell_others = self.replica.id, self.replica.tell
        leading = self.replica.leading
        self.dispatcher = Dispatcher(
            store,
            config,
            self.notifier,
            self.objects,
            self.router,
            self.agents,
            leading,
            self.replica.tell,
            self.sealer,
        )
        self.agents.on_change, self.agents.on_refused = self.dispatcher.wake, self.dispatcher.refused
        self.liveness, self.run_check = self._sweeps(config)
        self.composer = Composer(store, self.notifier, config.data_dir / "compose", leading, self.sealer)
        self.warmer = Warmer(store, mirrors, packet_pipeline.GRAPHS, self.recall, leading, sealer=self.sealer)
        self.replica.handlers += [self._on_note, self.agents.on_note, self._on_revoked_note]
        self.token_cache = TokenCache(lambda digest: store.read(tokens.lookup, digest))
        self.auth = AuthInterceptor(PERMISSIONS, self.token_cache, lambda token_id: store.run(tokens.touch, token_id))
        self.changes = ChangeService(
            store,
            self.notifier,
            self.objects,
            self.agents,
            self.dispatcher.wake,
            validation.Limits(config.max_budget_usd),
            lambda: self.config.harness,
            self.dispatcher.run_and_assign,
        )
        self.operations = OperationsService(
            store, self.notifier, self.objects, self.agents, self.dispatcher.wake, lambda: self.config.harness.budgets
        )
        agent_service = AgentService(store, self.notifier, self.objects, self.agents, lambda: self.config)
        self.admin = (ProjectService(store, self.sealer), TokenService(store, self._revoked))
        self.endpoint = Endpoint(config, self.auth, agent_service, self.changes, self.operations, self.admin)
        self.console = self._console(config) if config.http_listen else None

    def _sweeps(self, config: ServerConfig) -> tuple[Liveness, RunCheck]:
        """The periodic checks: lost agents, overdue reservations and claims (Liveness); runs that make no
        progress (RunCheck)."""
        liveness = Liveness(
            self.store,
            config,
            self.notifier,
            self.agents,
            self.dispatcher.wake,
            leading=self.replica.leading,
            replica=self.replica.id,
            objects=self.objects,
        )
        run_check = RunCheck(
            self.store,
            config,
            self.agents.activity,
            self.agents,
            self.notifier,
            self.dispatcher.wake,
            self.replica.leading,
            self.objects,
        )
        return liveness, run_check

    @property
    def port(self) -> int:
        """The gRPC port bound (the one asked for, or the kernel's pick for port 0)."""
        return self.endpoint.port

    def _console(self, config: ServerConfig) -> Console:
        """The console's process-to-be: its socket bound now (a bad address fails the start), and the
        private gRPC socket it will call the API through."""
        console = Console(config.http_listen, config.tls_cert, config.tls_key, config.allow_plaintext, config.console)
        hooks = ForgeHooks(self.store, self.sealer, lambda: self.forge.wake())  # the loop is made by start()
        server = grpc_server(config, self.auth)
        self.link = ConsoleLink(self.auth, server, self.changes, self.operations, self.admin, hooks)
        return console

    async def _on_note(self, note: dict[str, object]) -> None:
        """Another replica changed something: dispatch may have work, and watchers here may see it."""
        self.dispatcher.wake_here()
        self.notifier.notify()

    def _revoked(self, name: str) -> None:
        """A token revoked through this replica: every replica's cache forgets it now (a note, by NOTIFY)."""
        self.token_cache.drop(name)
        self.replica.tell({"kind": "token.revoked", "name": name})

    async def _on_revoked_note(self, note: dict[str, object]) -> None:
        if note.get("kind") == "token.revoked":
            self.token_cache.drop(str(note.get("name", "")))

    def _harness(self) -> HarnessConfig:
        """The harness config in use now (SIGHUP replaces it)."""
        return self.config.harness

    def log_classes(self) -> None:
        """The resolved members of every tier's class, at start-up and after each reload (seed 004)."""
        harness = self.config.harness
        for tier in dict.fromkeys([*harness.tiers, *harness.classes]):
            log.info("%s", harness.tier_class(tier).describe())

    async def start(self) -> None:
        self.log_classes()
        if not self.replica.shared:  # a single node: none is connected to this process yet
            await self.store.run(agent_presence.disconnect_all)
        # The roster dispatch plans with, from the database (the truth): the agents connected here.
        self.agents.roster.rebuild(await self.store.read(read_hellos, self.agents.connected()))
        self.replica.start()
        self.forge = ForgeLoop(
            self.store,
            self.sealer,
            self.notifier,
            self.dispatcher.wake,
            self.replica.leading,
            self._harness,
            self.config.console_url,
        )
        self.composer.composed = self.forge.wake
        self.notifications = NotificationLoop(
            self.store,
            lambda: self.config.notify,
            self.replica.leading,
            retention_days=self.config.delivery_retention_days,
        )
        self.forge.tell_cancel = self.agents.tell_cancel
        self.forge.rounds.configure(self.agents.tell_cancel, self.config.data_dir / "forge")
        self._loops = [
            asyncio.create_task(self.dispatcher.run_forever(), name="dispatch"),
            asyncio.create_task(self.liveness.run_forever(), name="liveness"),
            asyncio.create_task(self.run_check.run_forever(), name="run-check"),
            asyncio.create_task(self.composer.run_forever(), name="composer"),
            asyncio.create_task(self.warmer.run_forever(), name="context-warmer"),
            asyncio.create_task(self.forge.run_forever(), name="forge"),
            asyncio.create_task(self.notifications.run_forever(), name="notifications"),
        ]
        await self.endpoint.start()
        if self.console is not None:
            await self.link.start()
            await self.console.start(self.link.target, self.link.secret)
        await self.endpoint.report_serving()

    def reload_keys(self) -> bool:
        """SIGHUP: read the credential key file again (a rotation's new key, or its old one removed); an
        invalid one is refused and the keys in use kept."""
        try:
            self.sealer.load(self.config.credential_key_file)
        except ValueError as err:
            log.error("credential key reload refused, keeping the keys in use: %s", err)
            return False
        log.info("credential keys reloaded from %s", self.config.credential_key_file or "DROVER_CREDENTIAL_KEY")
        return True

    def reload(self, path: pathlib.Path | None) -> bool:
        """SIGHUP: read the TOML file again; an invalid one is refused and the running config kept."""
        self.reload_keys()
        if path is None:
            return True
        try:
            harness = load_harness(path, os.environ)
            notify = load_notify(path, os.environ)
        except (ValueError, OSError) as err:
            log.error("config reload refused, keeping the running config: %s", err)
            return False
        for warning in harness.warnings:
            log.warning("%s", warning)
        self.config = dataclasses.replace(self.config, harness=harness, notify=notify)
        self.agents.config = self.dispatcher.config = self.liveness.config = self.run_check.config = self.config
        self.router.reconfigure(harness)
        log.info("config reloaded from %s", path)
        self.log_classes()
        return True

    async def stop(self) -> None:
        """Stop accepting, let calls in flight finish within the grace period, then close."""
        await self.endpoint.drain()
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        if self.console is not None:
            await self.console.stop()
            await self.link.stop()
        await self.agents.stop()
        await self.endpoint.stop(self.config.grace_seconds)
        self.replica.stop()
        self.store.close()


async def serve(config: ServerConfig, store: Store, config_file: pathlib.Path | None = None) -> None:
    plane = ControlPlane(config, store)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # before start, which logs the members: a SIGHUP sent on that line reloads rather than kills
    loop.add_signal_handler(signal.SIGHUP, plane.reload, config_file)
    await plane.start()
    host = config.listen.rsplit(":", 1)[0]
    log.info("control plane listening on %s:%d (database %s)", host, plane.port, _safe_url(store.url))
    print(f"drover control plane listening on {host}:{plane.port}", flush=True)
    if plane.console is not None:
        print(f"drover console on {plane.console.scheme}://{plane.console.host}:{plane.console.port}/", flush=True)
    if config.metrics_listen:
        port = fleet_metrics.serve_metrics(config.metrics_listen, store)
        log.info("metrics on http://%s:%d/metrics", config.metrics_listen.rpartition(":")[0], port)
    if not quota.has_model_key(config.harness, os.environ):
        log.warning("%s; until then such Tasks are refused at submit (FAILED_PRECONDITION)", quota.NO_MODEL_KEY)
    await stop.wait()
    log.info("shutting down: draining calls for up to %.0f s", config.grace_seconds)
    await plane.stop()


def _safe_url(url: str) -> str:
    """A database URL without its password, for logs."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)

"""Control-plane settings. Every field says what it means and its default."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import tomllib
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from controlplane.domain import escalation, notifications, reasoning
from controlplane.domain.member_config import parse_classes, parse_modifiers, parse_quota_router
from controlplane.domain.members import PAY_PER_API, Member, QuotaPolicy, TierClass, TodModifier
from controlplane.domain.pricing import Price


@dataclasses.dataclass(frozen=True)
class BudgetConfig:
    provider_month_usd: float = 10.0
    """The provider's budget per UTC calendar month, USD; 0: no limit."""
    agent_calls_per_day: int = 1000
    """Agent model calls (runs, conflict review, compaction) per UTC day, shared by the fleet; 0: no limit."""
    classifier_calls_per_day: int = 200
    """Routing classifier calls per UTC day, shared; 0: no limit."""


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    """Semantic memory (`[memory]`): chroma with an offline ONNX embedding model."""

    enabled: bool = True
    url: str = ""
    """A chroma server (http://host:port) for a fleet; "": a PersistentClient in <data_dir>/chroma."""
    model_dir: str = ""
    """A directory with model.onnx and tokenizer.json; "": the packaged all-MiniLM-L6-v2."""
    queries_per_day: int = 1000
    """Query embeddings a day, on a meter all replicas share."""


@dataclasses.dataclass(frozen=True)
class ConsoleLimits:
    """What the web console's process admits; beyond a limit it answers 503 (the console is full) or 429
    (this session has enough), so no number of browsers can take the API's CPU or memory."""

    max_connections: int = 1000
    """Open HTTP connections (and requests in progress) at once; 503 beyond."""
    max_streams: int = 500
    """Live server-sent event streams (transcripts, Change events) at once; 503 beyond."""
    max_streams_per_session: int = 20
    """Live streams of one signed-in token; 429 beyond."""
    max_uploads: int = 64
    """Form bodies being received at once (sign-in and actions); 503 beyond."""
    body_timeout_seconds: float = 30.0
    """A form body must arrive whole within this; 408 after."""


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    listen: str = "127.0.0.1:50051"
    """host:port the gRPC server binds."""
    metrics_listen: str = ""
    """host:port of the Prometheus endpoint (/metrics); empty: none."""
    http_listen: str = ""
    """host:port of the web console; empty: none. TLS and the loopback rule as the gRPC port."""
    console_url: str = ""
    """The console's address as users reach it (https://drover.example.com): links in issue comments."""
    data_dir: pathlib.Path = pathlib.Path(".drover")
    """Holds the SQLite database, the tokens and (later) the object store."""
    database_url: str = ""
    """SQLAlchemy URL; empty: SQLite at <data_dir>/drover.db."""
    agent_lost_seconds: float = 120.0
    """A run fails as agent_lost when its agent stays gone this long, counted from when it was last heard."""
    delivery_retention_days: float = 30.0
    """Finished forge webhook and notification deliveries are pruned after this many days; 0: kept forever."""
    agent_silence_seconds: float = 30.0
    """An agent stream that carries nothing (agents send a heartbeat every 10 s) this long is closed."""
    run_check_seconds: float = 60.0
    """How often the leading replica checks each running run for progress (output, a model or tool call)."""
    run_stall_checks: int = 15
    """Checks in a row without progress after which a running run ends as timeout (15 x 60 s: 15 min)."""
    retry_delay_seconds: float = escalation.RETRY_DELAY_SECONDS
    """How long after a failed harness run its Task's retry or escalation starts."""
    output_limit_bytes: int = 8 * 1024 * 1024
    """Output kept per run; later output is dropped with one system line."""
    max_message_bytes: int = 4 * 1024 * 1024
    """Largest request the server accepts (RESOURCE_EXHAUSTED above)."""
    dispatch_interval: float = 1.0
    """Seconds between dispatch passes when nothing wakes the dispatcher."""
    keepalive_min_ping_seconds: int = 5
    """Agents ping every 10 s by default; the server accepts pings this often without GOAWAY."""
    grace_seconds: float = 10.0
    """On SIGTERM: how long in-flight calls may finish before the server stops."""
    tls_cert: str = ""
    """PEM certificate chain; with tls_key the server speaks TLS."""
    tls_key: str = ""
    tls_client_ca: str = ""
    """PEM CA bundle: when set, clients must present a certificate it signed (mTLS)."""
    allow_plaintext: bool = False
    """Plaintext is served only on loopback unless this is set (e.g. a private container network)."""
    harness: HarnessConfig = dataclasses.field(default_factory=lambda: HarnessConfig())
    """The model harness: provider, tiers, caps and prices."""
    memory: MemoryConfig = MemoryConfig()
    """Semantic memory: chroma (in the data dir, or a server by URL) with an offline ONNX model."""
    object_store_dir: pathlib.Path | None = None
    """The object store (patches, tool logs); default <data_dir>/objects."""
    max_budget_usd: float = 10_000.0
    """The highest budget a Change may be submitted with or raised to (USD); default 10,000."""
    console: ConsoleLimits = ConsoleLimits()
    """The web console process's connection, stream and upload limits."""
    credential_key_file: str = ""
    """The operator's key(s) that seal git credentials sent through the API (Fernet, newest first, one
    per line); empty: DROVER_CREDENTIAL_KEY, else none (setting a credential is then refused)."""
    notify: tuple[notifications.Target, ...] = ()
    """The `[[notify]]` targets notifications are delivered to (from the outbox, by the leader)."""

    @property
    def objects(self) -> pathlib.Path:
        return self.object_store_dir or self.data_dir / "objects"

    @property
    def lifecycle(self) -> escalation.Policy:
        """What ends a run passes on to the decision of its Task's next attempt."""
        return escalation.Policy(allow_opus=self.harness.allow_opus, retry_delay_seconds=self.retry_delay_seconds)


@dataclasses.dataclass(frozen=True)
class Tier:
    model: str
    max_calls: int
    """Model calls per run; reaching it ends the run as run_call_cap."""
    max_output_tokens: int
    thinking: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The Messages API thinking setting for this tier's agent runs; empty: off (controlplane/domain/reasoning.py)."""
    effort: str = ""
    """output_config.effort of this tier's agent runs (low ... max); "": none. A member's reasoning overrides it."""


WORKSPACE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
"""An [anthropic] workspace_id: a short token, sent as a header."""

_OMITTED = {"type": "adaptive", "display": "omitted"}
DEFAULT_TIERS = {  # seed 000's table; the control plane's one-shot calls (classifier, compaction) never think
    "haiku": Tier("claude-haiku-5-5", 16, 8_000, {"type": "adaptive"}, "low"),
    "sonnet": Tier("claude-sonnet-5-5", 32, 16_000, dict(_OMITTED), "medium"),
    "opus": Tier("claude-opus-5-5", 32, 16_000, dict(_OMITTED), "high"),
}


@dataclasses.dataclass(frozen=True)
class HarnessConfig:
    base_url: str = ""
    """Anthropic Messages API base URL; default ANTHROPIC_BASE_URL, else https://api.anthropic.com."""
    workspace_id: str = ""
    """[anthropic] workspace_id: sent as the anthropic-workspace-id header on every Messages API call made
    with the harness's key (agents' PayPerApi runs and the control plane's own calls); "": not sent."""
    api_key: str = dataclasses.field(default="", repr=False)
    """From ANTHROPIC_API_KEY or api_key_file; sent to agents only in a run's secret_env, never stored."""
    default_tier: str = "sonnet"
    tiers: Mapping[str, Tier] = dataclasses.field(default_factory=lambda: dict(DEFAULT_TIERS))
    prices: Mapping[str, Price] = dataclasses.field(default_factory=dict)
    """Per model id, USD per million tokens; models not named use DEFAULT_PRICES."""
    context_window_tokens: int = 200_000
    fold_fraction: float = 0.7
    """Fold older turns into a summary past this fraction of the context window."""
    stall_timeout_seconds: int = 120
    attempt_ceiling_seconds: float = 600.0
    """One model call attempt's ceiling, however steadily it streams; over it, it is retried like a stall."""
    max_attempts: int = 4
    """Attempts per model call (the first included) for retryable errors."""
    allow_opus: bool = False
    """Opus is off unless true: an opus tier runs on the sonnet model and receipts say opus_disabled."""
    classes: Mapping[str, TierClass] = dataclasses.field(default_factory=dict)
    """The members of each tier (seed 004); a tier without a class gets one PayPerApi member."""
    modifiers: tuple[TodModifier, ...] = ()
    quota: QuotaPolicy = QuotaPolicy()
    budgets: BudgetConfig = BudgetConfig()
    """The fleet's shared meters: the provider month, agent and classifier calls per day."""
    warnings: tuple[str, ...] = ()

    def tier_class(self, tier: str) -> TierClass:
        """The class serving `tier`: configured, or one PayPerApi member on the harness's key."""
        found = self.classes.get(tier)
        if found is not None:
            return found
        model = self.tiers[tier].model if tier in self.tiers else ""
        return TierClass(tier, (Member(agent="anthropic", billing=PAY_PER_API, model=model, quality_score=100),))


TIER_KEYS = ("model", "max_calls", "max_output_tokens", "thinking", "thinking_display", "effort")


def load_harness(file: pathlib.Path | None, env: Mapping[str, str]) -> HarnessConfig:
    """The [anthropic], [harness], [tiers.*] and [prices.*] tables of the control plane's TOML file."""
    data = tomllib.loads(file.read_text()) if file else {}
    unknown = set(data) - {
        "anthropic",
        "harness",
        "tiers",
        "prices",
        "classes",
        "modifiers",
        "quota_router",
        "budgets",
        "memory",
        "notify",
    }
    if unknown:
        raise ValueError(f"{file}: unknown tables {sorted(unknown)}")
    anthropic = dict(data.get("anthropic", {}))
    _known_keys(anthropic, "anthropic", ("base_url", "api_key_file", "allow_opus", "workspace_id"))
    workspace_id = anthropic.get("workspace_id", "")
    if not isinstance(workspace_id, str) or (workspace_id and not WORKSPACE_ID.fullmatch(workspace_id)):
        raise ValueError(f"anthropic.workspace_id: {workspace_id!r} is not a workspace id ([A-Za-z0-9_-], 1-128)")
    harness = dict(data.get("harness", {}))
    key = env.get("ANTHROPIC_API_KEY", "")
    if anthropic.get("api_key_file"):
        key = pathlib.Path(anthropic["api_key_file"]).read_text().strip()
    for model, p in data.get("prices", {}).items():
        _known_keys(p, f"prices.{model}", ("input", "output", "cache_write", "cache_read"))
    prices = {
        model: Price.of(p["input"], p["output"], p.get("cache_write"), p.get("cache_read"))
        for model, p in data.get("prices", {}).items()
    }
    classes, warnings = parse_classes(data)
    config = HarnessConfig(
        allow_opus=bool(anthropic.get("allow_opus", False)),
        classes=classes,
        modifiers=parse_modifiers(data),
        quota=parse_quota_router(data),
        warnings=tuple(warnings),
        budgets=BudgetConfig(**settings(BudgetConfig, data.get("budgets", {}), "budgets")),
        base_url=anthropic.get("base_url") or env.get("ANTHROPIC_BASE_URL", "") or "https://api.anthropic.com",
        api_key=key,
        workspace_id=workspace_id,
        tiers=_tiers(data),
        prices=prices,
        **settings(HarnessConfig, harness, "harness", HARNESS_SETTINGS),
    )
    if config.default_tier not in config.tiers:
        raise ValueError(f"harness.default_tier: no tier {config.default_tier!r}")
    if config.attempt_ceiling_seconds <= 0:
        raise ValueError(f"harness.attempt_ceiling_seconds: must be > 0, not {config.attempt_ceiling_seconds:g}")
    return config


def _tiers(data: Mapping[str, Any]) -> dict[str, Tier]:
    """The built-in tiers, each changed (or a new one made from sonnet's) by its [tiers.NAME] table."""
    tiers = dict(DEFAULT_TIERS)
    for name, spec in data.get("tiers", {}).items():
        _known_keys(spec, f"tiers.{name}", TIER_KEYS)
        base = tiers.get(name, DEFAULT_TIERS["sonnet"])
        tiers[name] = Tier(
            spec.get("model", base.model),
            int(spec.get("max_calls", base.max_calls)),
            int(spec.get("max_output_tokens", base.max_output_tokens)),
            reasoning.tier_thinking(spec, base.thinking, f"tiers.{name}"),
            reasoning.tier_effort(spec, base.effort, f"tiers.{name}"),
        )
    return tiers


def load_memory(file: pathlib.Path | None, env: Mapping[str, str]) -> MemoryConfig:
    """The [memory] table (env DROVER_MEMORY_URL, DROVER_MEMORY_MODEL_DIR, DROVER_MEMORY=off override it)."""
    data = tomllib.loads(file.read_text()).get("memory", {}) if file else {}
    config = MemoryConfig(**settings(MemoryConfig, data, "memory"))
    return dataclasses.replace(
        config,
        enabled=config.enabled and env.get("DROVER_MEMORY", "") != "off",
        url=env.get("DROVER_MEMORY_URL", config.url),
        model_dir=env.get("DROVER_MEMORY_MODEL_DIR", config.model_dir),
    )


NOTIFY_KEYS = ("name", "url", "events", "format", "secret_env", "secret_file", "console_url")


def load_notify(file: pathlib.Path | None, env: Mapping[str, str]) -> tuple[notifications.Target, ...]:
    """The `[[notify]]` tables; a bad one raises ValueError naming it and the key (`notify[0].events`)."""
    tables = tomllib.loads(file.read_text()).get("notify", []) if file else []
    if not isinstance(tables, list):
        raise ValueError("notify: must be an array of tables ([[notify]])")
    targets = [_notify_target(table, f"notify[{i}]", env) for i, table in enumerate(tables)]
    names = [t.name for t in targets]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ValueError(f"notify[{i}].name: {name!r} names another target too")
    return tuple(targets)


def _notify_target(table: Any, where: str, env: Mapping[str, str]) -> notifications.Target:
    if not isinstance(table, dict):
        raise ValueError(f"{where}: must be a table")
    _known_keys(table, where, NOTIFY_KEYS)
    text = {key: table.get(key, "") for key in NOTIFY_KEYS if key != "events"}
    for key, value in text.items():
        if not isinstance(value, str):
            raise ValueError(f"{where}.{key}: must be a string, not {value!r}")
    if not text["name"].strip():
        raise ValueError(f"{where}.name: a target needs a name")
    if not _http_url(text["url"]):
        raise ValueError(f"{where}.url: must be an http:// or https:// URL with a host, not {text['url']!r}")
    events = table.get("events")
    if not isinstance(events, list) or not events or not all(isinstance(e, str) for e in events):
        raise ValueError(f"{where}.events: a list of one or more of {', '.join(notifications.EVENTS)}")
    unknown = sorted(set(events) - set(notifications.EVENTS))
    if unknown:
        raise ValueError(f"{where}.events: unknown {unknown} (known: {', '.join(notifications.EVENTS)})")
    form = text["format"] or "json"
    if form not in notifications.FORMATS:
        raise ValueError(f"{where}.format: {form!r} is not one of {', '.join(notifications.FORMATS)}")
    secret = _notify_secret(text, where, env)
    return notifications.Target(
        text["name"], text["url"], tuple(dict.fromkeys(events)), form, secret, text["console_url"]
    )


def _http_url(url: str) -> bool:
    try:
        parts = urllib.parse.urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 0) >= 0
    except ValueError:  # a bad port or IPv6 address
        return False


def _notify_secret(text: Mapping[str, str], where: str, env: Mapping[str, str]) -> bytes:
    """The target's HMAC key, from the environment variable or the file named (never the TOML itself)."""
    if bool(text["secret_env"]) == bool(text["secret_file"]):
        raise ValueError(f"{where}.secret_env: set exactly one of secret_env and secret_file")
    if text["secret_env"]:
        secret = env.get(text["secret_env"], "").strip()
        if not secret:
            raise ValueError(f"{where}.secret_env: the environment variable {text['secret_env']} is not set")
        return secret.encode()
    try:
        secret = pathlib.Path(text["secret_file"]).read_text().strip()
    except OSError as err:
        raise ValueError(f"{where}.secret_file: cannot read {text['secret_file']}: {err.strerror}") from None
    if not secret:
        raise ValueError(f"{where}.secret_file: {text['secret_file']} is empty")
    return secret.encode()


def _known_keys(table: Mapping[str, Any], where: str, known: Iterable[str]) -> None:
    unknown = set(table) - set(known)
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} (known: {', '.join(known)})")


HARNESS_SETTINGS = (
    "default_tier",
    "context_window_tokens",
    "fold_fraction",
    "stall_timeout_seconds",
    "attempt_ceiling_seconds",
    "max_attempts",
)
"""The [harness] table; the other HarnessConfig fields come from their own tables."""


def settings(cls: type, table: Mapping[str, Any], where: str, names: Iterable[str] = ()) -> dict[str, Any]:
    """The keys of a TOML `table` that set fields of the dataclass `cls` (all its fields, or `names`),
    each converted to the type of the field's default; the defaults themselves live only on `cls`.
    A key that is not a setting raises ValueError naming the table."""
    allowed = list(names) or [f.name for f in dataclasses.fields(cls)]
    unknown = set(table) - set(allowed)
    if unknown:
        raise ValueError(f"{where}: unknown settings {sorted(unknown)}")
    defaults = cls()
    out: dict[str, Any] = {}
    for name in allowed:
        if name in table:
            kind = type(getattr(defaults, name))
            try:
                out[name] = kind(table[name])
            except (TypeError, ValueError):
                raise ValueError(f"{where}.{name}: must be {kind.__name__}, not {table[name]!r}") from None
    return out


def check_console_url(url: str) -> str:
    """The console's public address without a trailing slash; ValueError when it is not an http(s) URL
    with a host and nothing else that would leak into a comment (credentials, query, fragment)."""
    import urllib.parse

    if not url:
        return ""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--console-url {url!r}: not an http(s) URL with a host")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("--console-url: no credentials, query or fragment")
    return url.rstrip("/")

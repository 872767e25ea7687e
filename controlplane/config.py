"""Control-plane settings. Every field says what it means and its default."""

from __future__ import annotations

import dataclasses
import pathlib


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    listen: str = "127.0.0.1:50051"
    """host:port the gRPC server binds."""
    data_dir: pathlib.Path = pathlib.Path(".drover")
    """Holds the SQLite database, the tokens and (later) the object store."""
    database_url: str = ""
    """SQLAlchemy URL; empty: SQLite at <data_dir>/drover.db."""
    agent_lost_seconds: float = 120.0
    """A run fails as agent_lost when its agent stays disconnected this long."""
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

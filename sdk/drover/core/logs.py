"""How the daemons log: `text` (the default) or `json`, one object a line for log shippers
(`--log-format json`, env DROVER_LOG_FORMAT); the level from DROVER_LOG_LEVEL."""

from __future__ import annotations

import datetime as dt
import json
import logging

TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str, form: str) -> None:
    """Log to stderr at `level` in `form` (text or json); ValueError for another form."""
    if form not in FORMATS:
        raise ValueError(f"log format {form!r}: one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if form == "json" else logging.Formatter(TEXT))
    logging.basicConfig(level=level, handlers=[handler], force=True)

"""Logging of the `askq` processes: one line per record on stderr, as text or JSON.

Text lines show agent text escaped (`visible`), so a header in a log line cannot move
the cursor or forge another line. JSON lines (`--log-format json`) are one object per
line (`ts`, `level`, `logger`, `msg`, and the record's `askq` fields when it has them:
`request`, `group`, `decision`, `outcome`, ...), for a log shipper to index.

Verbosity: `ASKQ_LOG_LEVEL` (default WARNING); `-v` is INFO (a worker logs each
decision and settlement, the sweeper each timer it fires), `-vv` DEBUG.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Literal

from ..protocol._text import visible

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
_HANDLER_NAME = "askq-cli"


class VisibleFormatter(logging.Formatter):
    """Log lines as a terminal should show them: agent text in a message (a label in a
    refused answer, a header) cannot move the cursor or retitle the window."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record), multiline=True)


class JsonFormatter(logging.Formatter):
    """One JSON object per line; what `extra={"askq": {...}}` gave a record is merged in."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "askq", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def level_for(verbose: int) -> str:
    if verbose >= 2:
        return "DEBUG"
    if verbose == 1:
        return "INFO"
    return os.environ.get("ASKQ_LOG_LEVEL", "WARNING").upper()


def configure(verbose: int = 0, log_format: LogFormat = "text") -> None:
    """Log to stderr at the level `verbose` asks for, in `log_format`. An embedding
    program's own logging wins: nothing changes if the root logger has handlers that
    are not this function's."""
    root = logging.getLogger()
    ours = [h for h in root.handlers if h.get_name() == _HANDLER_NAME]
    if root.handlers and not ours:
        return
    for handler in ours:
        root.removeHandler(handler)
    handler = logging.StreamHandler()
    handler.set_name(_HANDLER_NAME)
    text = VisibleFormatter("%(levelname)s %(name)s: %(message)s")
    handler.setFormatter(JsonFormatter() if log_format == "json" else text)
    root.addHandler(handler)
    # arq logs every cron round and job at INFO: at -v only askq's own lines, at -vv all.
    logging.getLogger("arq").setLevel("DEBUG" if verbose >= 2 else "WARNING")
    try:
        root.setLevel(level_for(verbose))
    except ValueError:  # a bad ASKQ_LOG_LEVEL: say so once, keep going at WARNING
        root.setLevel("WARNING")
        logging.getLogger("askq").warning(
            "ASKQ_LOG_LEVEL=%r is not a level (DEBUG, INFO, WARNING, ERROR)",
            os.environ.get("ASKQ_LOG_LEVEL"),
        )

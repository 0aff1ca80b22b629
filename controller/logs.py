"""How the controller's log lines look: `linuxfp: message` for a terminal
and journald, or one JSON object per line (`--log-format json`) for log
collectors that parse JSON (Kubernetes' Fluent Bit/Vector/Loki pipelines;
journald keeps each as one message) — with the fields a record carries
beyond its message (`extra=`: event, ifname, ifindex, path, hook, nodes,
reason) as keys of their own. Fatal errors before the controller starts
stay plain `linuxfp: ...` lines."""
from __future__ import annotations

import json
import logging
import sys
import time

FORMATS = ("text", "json")

# Attributes every LogRecord has: anything else came in through `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                    + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({key: value for key, value in vars(record).items() if key not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: int, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter("linuxfp: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)

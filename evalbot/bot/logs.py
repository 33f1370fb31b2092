"""Logging for `evalbot serve` and `evalbot worker`: one line per event, JSON by default (structlog over
the standard library's logging, so every module keeps `logging.getLogger`), with whatever the code
bound in context on every line: the delivery id and event in the webhook, the job key in the worker.
A traceback stays inside its line (`exception`), and a message that repeats (asyncio's "accept()
out of system resource", uvicorn's errors) is written at most once per ten seconds, with a count."""

from __future__ import annotations

import logging
import sys
import threading
import time

import structlog

REPEAT_SECONDS = 10.0
_QUIET_LOGGERS = ("asyncio", "uvicorn.error")


class RepeatFilter(logging.Filter):
    """Drops a record whose (logger, message template) was written less than `seconds` ago."""

    def __init__(self, seconds: float = REPEAT_SECONDS, clock=time.monotonic):
        super().__init__()
        self.seconds, self.clock = seconds, clock
        self._last: dict[tuple[str, str], float] = {}
        self._dropped: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(_QUIET_LOGGERS) and record.levelno < logging.ERROR:
            return True
        key = (record.name, str(record.msg))
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.seconds:
                self._dropped[key] = self._dropped.get(key, 0) + 1
                return False
            self._last[key] = now
            dropped = self._dropped.pop(key, 0)
        if dropped:
            record.repeated = dropped  # shown as a field: how many like it were not written
        if record.name.startswith(_QUIET_LOGGERS) and record.exc_info:  # the event loop's own trouble: its
            record.msg = f"{record.getMessage()}: {record.exc_info[1]!r}"  # cause, without the traceback
            record.args, record.exc_info, record.exc_text = (), None, None
        return True


def _add_repeated(logger, method, event_dict):
    record = event_dict.get("_record")
    if record is not None and getattr(record, "repeated", 0):
        event_dict["repeated"] = record.repeated
    return event_dict


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, _add_repeated],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.processors.format_exc_info,
                    renderer],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "huey", "huey.consumer"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )

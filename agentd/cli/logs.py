"""How `agentd` logs: text for a terminal, or JSON lines with fixed keys for a log pipeline.

Every line logged while a run is working carries its run id (`agentd.run_context.current_run`,
set by the engine when a run starts); a line may also carry structured `data` (the per-run line
does: agent, conversation, trigger, duration, tokens, outcome).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from datetime import UTC, datetime
from typing import Any, TextIO

from agentd.run_context import current_run

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
# Libraries that log every request or heartbeat at INFO: their warnings are enough.
NOISY = ("httpx", "discord", "telegram", "slack_bolt", "slack_sdk", "aiohttp.access", "uvicorn.access")
JSON_KEYS = ("ts", "level", "logger", "run_id", "message", "data", "error")


class RunIdFilter(logging.Filter):
    """Adds `run_id` (the run being worked on, or None) to every record that has none of its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "run_id", None) is None:
            record.run_id = current_run.get()
        return True


class TextFormatter(logging.Formatter):
    """`2026-01-02 10:00:00,123 INFO agentd.runs [run 3f2a…]: message`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(run)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        run_id = getattr(record, "run_id", None)
        record.run = f" [run {run_id}]" if run_id else ""
        return super().format(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line, always with the keys of JSON_KEYS (null when they do not apply)."""

    def format(self, record: logging.LogRecord) -> str:
        error = None
        if record.exc_info:
            error = self.formatException(record.exc_info)
        elif record.stack_info:
            error = self.formatStack(record.stack_info)
        data: Any = getattr(record, "data", None)
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "run_id": getattr(record, "run_id", None),
            "message": record.getMessage(),
            "data": data if isinstance(data, dict) else {},
            "error": error,
        }
        return json.dumps(line, default=str, ensure_ascii=False)


class _AgentdHandler(logging.Handler):
    """Ours, as opposed to handlers someone else (pytest, an embedding program) put on the root.

    Without a stream of its own it writes to whatever sys.stderr is when a line is logged (not when it
    was configured): a CLI command run in-process, by a test say, leaves nothing behind that writes
    to a stream closed since.
    """

    def __init__(self, stream: TextIO | None = None):
        super().__init__()
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = self.stream if self.stream is not None else sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


def configure_logging(
    level: str = "info", fmt: str = "text", stream: TextIO | None = None, *, force: bool = False
) -> None:
    """Route every logger to one handler on stderr (or `stream`) in the chosen format. Like
    logging.basicConfig, nothing changes when the program running agentd set up logging itself (a test
    runner calling the CLI in-process, say), unless `force`."""
    root = logging.getLogger()
    if not force and any(not isinstance(h, _AgentdHandler) for h in root.handlers):
        return
    handler = _AgentdHandler(stream)
    handler.addFilter(RunIdFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    for old in [h for h in root.handlers if isinstance(h, _AgentdHandler)]:
        root.removeHandler(old)  # configured twice in one process (tests): replaced, not doubled
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def log_uncaught() -> None:
    """With JSON lines, nothing else may write into the stream: warnings, an exception no one caught
    (in the main thread or another) and asyncio's complaints become records of the chosen format
    instead of raw text (uvicorn's own records: Daemon.serve passes log_config=None)."""
    logging.captureWarnings(True)
    log = logging.getLogger("agentd")

    def main_hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, value, tb)
            return
        log.critical("uncaught exception", exc_info=(kind, value, tb))

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit or args.exc_value is None:
            return
        name = args.thread.name if args.thread is not None else "?"
        log.error(
            "uncaught exception in thread %s",
            name,
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )

    sys.excepthook = main_hook
    threading.excepthook = thread_hook

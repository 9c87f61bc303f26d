"""The gateway's log lines: JSON objects when stderr is not a terminal, text when it is.

One handler on the root logger serves every logger of the process, uvicorn's included, so
each line has the same shape.  A JSON line is one object::

    {"time": "2026-01-02T03:04:05.678Z", "level": "INFO", "logger": "gateway.access",
     "message": "POST /graphql 200", "request_id": "test-123", "transport": "http", ...}

``request_id`` is there on every line logged while a request is served (see
:mod:`gateway.requestid`); the structured fields of a line are what its call passed as
``extra``.  Callers never pass tokens, ``Authorization`` values, GraphQL variables or
user names (see :mod:`gateway.requestid` for the access lines); two things here hold
whatever a caller sent off the log all the same:

* the WebSocket library's wire dumps (at debug level, every frame, ``connection_init``
  with its token included, and every handshake header, ``Authorization`` included) are
  dropped (:class:`WireDumps`, on the one handler);
* a text line is one line: control characters in the message and in each field
  (a request path's ``%0a``, an ANSI escape) are written escaped (``\\n``, ``\\x1b``),
  and a field value with a space, a quote or ``=`` is quoted, so no value can forge a line
  or a field (JSON lines are escaped by JSON itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sys
import time
from typing import Any, Final, Literal, TextIO

import orjson

from gateway.requestid import EXTRA, current_request_id

__all__ = [
    "FORMATS",
    "JsonFormatter",
    "LoopBatchedHandler",
    "TextFormatter",
    "WireDumps",
    "configure",
    "escape",
    "resolve_format",
]

#: The values of ``--log-format``.
FORMATS: Final = ("auto", "json", "text")

#: Attributes every ``LogRecord`` has; anything else on a record came from ``extra``.
_STANDARD: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}


#: How many attributes a plain ``LogRecord`` has.
_PLAIN: Final = len(vars(logging.LogRecord("", 0, "", 0, "", None, None)))


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a log call passed as ``extra``, in their order."""
    attributes = vars(record)
    given = attributes.get(EXTRA)
    if (
        given is not None
        and len(attributes) == _PLAIN + len(given) + 1
        and all(attributes.get(name) is value for name, value in given.items())
    ):
        # the record holds its standard attributes, the fields given and EXTRA, each field
        # as given: nothing was added to it or rewritten in it (by a filter, a factory or a
        # formatter: a redaction, say), so they are all
        return dict(given)
    return {k: v for k, v in attributes.items() if k not in _STANDARD and not k.startswith("_")}


#: The last whole second written and its text, one tuple (replaced whole: a line logged on
#: another thread meanwhile reads one or the other): one ``strftime`` per second, not per line.
_SECOND: list[tuple[int, str]] = [(-1, "")]


def _timestamp(created: float) -> str:
    second = int(created)
    last = _SECOND[0]
    if last[0] != second:
        last = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        _SECOND[0] = last
    return f"{last[1]}.{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC), level, logger, message, ``request_id`` when
    known, the record's structured fields, and ``exception`` when it carries one."""

    def format(self, record: logging.LogRecord) -> str:
        line = self._head(
            record.created,
            record.levelname,
            record.name,
            record.getMessage(),
            request_id=getattr(record, "request_id", None),
            fields=fields_of(record),
        )
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(line, default=str).decode()

    def line(
        self, created: float, level: str, logger: str, message: str, fields: dict[str, Any]
    ) -> str:
        """The line :meth:`format` writes for a record of these, with no exception or stack
        (:meth:`LoopBatchedHandler.write_straight`)."""
        line = self._head(
            created, level, logger, message, request_id=fields.get("request_id"), fields=fields
        )
        return orjson.dumps(line, default=str).decode()

    @staticmethod
    def _head(
        created: float,
        level: str,
        logger: str,
        message: str,
        *,
        request_id: str | None,
        fields: dict[str, Any],
    ) -> dict[str, Any]:
        line: dict[str, Any] = {
            "time": _timestamp(created),
            "level": level,
            "logger": logger,
            "message": message,
        }
        request_id = request_id or current_request_id()
        if request_id is not None:
            line["request_id"] = request_id
        for key, value in fields.items():
            line.setdefault(key, value)
        return line


#: What a text line writes escaped: C0 and C1 controls, DEL, and Unicode's line breaks.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: A field value written quoted.
_QUOTED = re.compile(r'[\s"=]')


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    )


def escape(text: str) -> str:
    """``text`` with every control character written as an escape: one line, whatever
    it holds."""
    return _CONTROL.sub(_escaped, text)


def _value(value: Any) -> str:
    text = str(value)
    if text and not _QUOTED.search(text):
        return escape(text)
    return '"' + escape(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message`` then ``key=value`` for the request id and the fields;
    the message and the values escaped (see the module's text)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = self._fmt % {**vars(record), "message": escape(record.message)}  # type: ignore[operator]
        extra = fields_of(record)
        request_id = extra.pop("request_id", None) or current_request_id()
        if request_id is not None:
            text += f" request_id={_value(request_id)}"
        return text + "".join(f" {k}={_value(v)}" for k, v in extra.items())


class WireDumps(logging.Filter):
    """Drops the wire dumps of uvicorn's WebSocket implementation (the ``websockets``
    library, logging on ``uvicorn.error``): at debug level it writes every frame
    (``< TEXT '{"type":"connection_init","payload":{"Authorization":...}}'``) and every
    handshake header, ``Authorization`` included.  Its dumps are the debug records whose
    template starts with ``< `` or ``> ``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            record.levelno <= logging.DEBUG
            and record.name.startswith(("uvicorn", "websockets"))
            and isinstance(record.msg, str)
            and record.msg.startswith(("< ", "> "))
        )


def resolve_format(fmt: str, stream: TextIO) -> Literal["json", "text"]:
    """``auto``: text on a terminal, JSON otherwise (a file, a pipe, a container runtime)."""
    if fmt == "auto":
        return "text" if stream.isatty() else "json"
    if fmt not in ("json", "text"):
        raise ValueError(f"the log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return fmt  # type: ignore[return-value]


#: Seconds a line logged on the event loop waits for others before they are written
#: together (:class:`LoopBatchedHandler`): at 32 concurrent small requests, one ``write``
#: to stderr per ~10 requests instead of one per request (docs/performance.md).
LINE_DELAY: Final = 0.005


class LoopBatchedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that writes the lines logged on an event loop a few at a time.

    A line logged on a thread running an event loop (every request's access line) waits,
    with the lines logged after it, until ``delay`` seconds have passed (``call_later``;
    with no delay, until the loop's next step begins), or until ``most`` lines wait, and
    they are written with one ``write``: one system call for any number of requests ending
    meanwhile, instead of one per line (stderr is line-buffered: each line was a ``write``
    of its own; a write per loop step was still about one per request at 32 concurrent,
    docs/performance.md).  Order is kept: a line logged on any other thread (a schema
    build's, an introspection's) writes the waiting ones first; :meth:`flush` (and so
    ``logging.shutdown`` at exit) writes them too.
    """

    def __init__(self, stream: TextIO, *, delay: float = 0.0, most: int = 256) -> None:
        super().__init__(stream)
        #: Seconds a line logged on an event loop may wait for others (0: the step's end).
        self.delay = delay
        #: Lines that may wait at most: the next one writes them all at once.
        self.most = most
        self._waiting: list[str] = []
        #: Loops with a write of the waiting lines scheduled.
        self._scheduled: set[asyncio.AbstractEventLoop] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)
            return
        self._queue(line)

    def write_straight(
        self, logger: logging.Logger, level: int, message: str, fields: dict[str, Any]
    ) -> bool:
        """Write ``logger``'s line of ``level`` with these fields (JSON strings and
        numbers) as a record of them would be written, without making the record, when
        nothing but this handler would see it; ``False``, writing nothing, when something
        else would (the caller logs it as any other: :meth:`AccessRecord.log
        <gateway.requestid.AccessRecord.log>`, an access line per request).

        Nothing else sees it when the record would reach this handler alone, unchanged and
        formatted by a :class:`JsonFormatter`: ``logger`` has no filter, no logger from it
        up to the root has a handler of its own, the root has this handler alone, this
        handler's filters are :class:`WireDumps` (which keeps every line not at debug
        level), and no record factory was set (one may add attributes: fields).  A
        record's making and handling took about two thirds of an access line's CPU
        (docs/performance.md)."""
        formatter = self.formatter
        if (
            type(formatter) is not JsonFormatter
            or level < self.level
            or level <= logging.DEBUG
            or type(logger) is not logging.Logger
            or not logger.isEnabledFor(level)
            or logging.getLogRecordFactory() is not logging.LogRecord
            or any(type(each) is not WireDumps for each in self.filters)
            or logger.filters  # (a logger's filters see its own records, not its children's)
        ):
            return False
        step: logging.Logger | None = logger
        while step is not None and step.parent is not None:
            if step.handlers or not step.propagate:
                return False
            step = step.parent
        if step is None or step.handlers != [self]:
            return False
        line = formatter.line(
            time.time(), logging.getLevelName(level), logger.name, message, fields
        )
        with self.lock or contextlib.nullcontext():
            self._queue(line + self.terminator)
        return True

    def _queue(self, line: str) -> None:
        """Have ``line`` written (the handler's lock held)."""
        loop = asyncio._get_running_loop()
        if loop is None or loop.is_closed():
            self._waiting.append(line)
            self._write_waiting()
            return
        self._waiting.append(line)
        if len(self._waiting) >= self.most:
            self._write_waiting()
            return
        if loop not in self._scheduled:
            if self._scheduled:  # a loop closed before its step ended holds nothing here
                self._scheduled = {other for other in self._scheduled if not other.is_closed()}
            self._scheduled.add(loop)
            if self.delay > 0:
                loop.call_later(self.delay, self._step_done, loop)
            else:
                loop.call_soon(self._step_done, loop)

    def _step_done(self, loop: asyncio.AbstractEventLoop) -> None:
        with self.lock or contextlib.nullcontext():
            self._scheduled.discard(loop)
            self._write_waiting()

    def _write_waiting(self) -> None:
        """Write the waiting lines (the handler's lock held)."""
        if not self._waiting:
            return
        text = "".join(self._waiting)
        self._waiting.clear()
        try:
            self.stream.write(text)
            self.stream.flush()
        except Exception:  # a closed or broken stream: as StreamHandler.emit would
            self.handleError(logging.makeLogRecord({"msg": text.rstrip("\n")}))

    def flush(self) -> None:
        with self.lock or contextlib.nullcontext():
            self._write_waiting()
        super().flush()


def configure(level: str, fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Send every logger's records to ``stream`` (stderr) in one format at ``level``.

    uvicorn's loggers propagate here (``log_config=None``); its access log is off, the
    gateway writes its own access lines (``gateway.access``).  httpx's line per upstream
    request (its URL holds the caller's selectors and object names) is kept for
    ``debug``: the access line and the upstream metrics say enough.

    Records do not look up what no line of either format shows (the caller's source file,
    line and function, the thread, the process): the logging HOWTO's "Optimization" flags.
    Lines logged on the event loop are written together every few milliseconds
    (:class:`LoopBatchedHandler`, :data:`LINE_DELAY`).  The flags and a write per loop
    step took an access line from 17 to 11 us of CPU; the handler writes an access line
    without its record when nothing else would see it (:meth:`LoopBatchedHandler.write_straight`;
    docs/performance.md).
    """
    out = stream if stream is not None else sys.stderr
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = LoopBatchedHandler(out, delay=LINE_DELAY)
    handler.setFormatter(JsonFormatter() if resolve_format(fmt, out) == "json" else TextFormatter())
    handler.addFilter(WireDumps())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    upstream_level = logging.NOTSET if level.lower() == "debug" else logging.WARNING
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(upstream_level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.asgi"):
        uvicorn_logger = logging.getLogger(name)
        uvicorn_logger.handlers.clear()
        uvicorn_logger.propagate = True

"""The raw-ASGI plumbing of the demo upstream: requests, responses, parameters, and the
controlled ways a response can end (cleanly, or by dropping the connection)."""

from __future__ import annotations

import asyncio
import contextvars
import gzip
import logging
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qs

import orjson

from kube_gateway_demo import fielderrors as fe
from kube_gateway_demo.status import DemoApiError, bad_request, entity_too_large

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_dropping: contextvars.ContextVar[bool] = contextvars.ContextVar("demo_dropping", default=False)


class DropConnection(Exception):
    """Abandon the response without completing it: the server closes the connection."""


class _QuietDrops(logging.Filter):
    """Silence uvicorn's complaint about responses the demo abandons on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not _dropping.get()


_FILTER: Final = _QuietDrops()

#: A JSON response larger than this is gzipped for a client that accepts it, as the
#: apiserver's APIResponseCompression does (its threshold, 128 KiB).
COMPRESS_ABOVE: Final = 128 * 1024
#: Items of a list encoded at a time when it is sent as it is encoded (:meth:`Responder.send_list`).
LIST_PART_ITEMS: Final = 500


def install_log_filter() -> None:
    """Attach the filter to uvicorn's error logger (idempotent)."""
    logger = logging.getLogger("uvicorn.error")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)


def mark_dropped() -> None:
    """Record, for this request's task, that the response is abandoned deliberately."""
    _dropping.set(True)


@dataclass(slots=True)
class Request:
    """One HTTP request."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    receive: Receive
    audit_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @classmethod
    def from_scope(cls, scope: Scope, receive: Receive) -> Request:
        headers: dict[str, str] = {}
        for k, v in scope.get("headers", []):
            headers[k.decode("latin-1").lower()] = v.decode("latin-1")
        raw = scope.get("query_string", b"").decode("latin-1")
        return cls(
            method=scope["method"],
            path=scope.get("path", "/"),
            query=parse_qs(raw, keep_blank_values=True),
            headers=headers,
            receive=receive,
        )

    def param(self, name: str) -> str | None:
        """The first value of a query parameter (Go's ``url.Values.Get``)."""
        values = self.query.get(name)
        return values[0] if values else None

    def params(self, name: str) -> list[str]:
        """Every value of a repeated query parameter."""
        return self.query.get(name, [])

    def flag(self, name: str) -> bool | None:
        """A boolean parameter (None when absent).

        Like apimachinery's ``Convert_Slice_string_To_bool``: only ``0`` and ``false`` (any
        case) are false; anything else, even an empty value, is true.
        """
        value = self.param(name)
        if value is None:
            return None
        return not (value == "0" or value.lower() == "false")

    def integer(self, name: str) -> int | None:
        """An integer parameter, parsed like ``strconv.ParseInt`` (None when absent)."""
        value = self.param(name)
        if value is None or value == "":
            return None
        try:
            return int(value, 10)
        except ValueError:
            raise bad_request(
                f"strconv.ParseInt: parsing {fe.go_quote(value)}: invalid syntax"
            ) from None

    @property
    def content_type(self) -> str:
        """The media type of the body, without parameters."""
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    async def body(self, limit: int) -> bytes:
        """Read the whole body.

        Raises:
            DemoApiError: 413 when it exceeds ``limit`` bytes.
        """
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise DropConnection
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise entity_too_large(limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


class Responder:
    """Sends one response; optionally abandons it after a byte budget (a dropped connection).

    Args:
        send: the ASGI send callable.
        audit_id: sent as ``Audit-Id`` like the apiserver does.
        drop_after: body bytes to send before dropping the connection (-1: half of the first
            chunk); None sends normally.
        gzip: the client accepts gzip (``Accept-Encoding``) and the server compresses.
    """

    def __init__(
        self, send: Send, *, audit_id: str, drop_after: int | None = None, gzip: bool = False
    ) -> None:
        self._send = send
        self.audit_id = audit_id
        self.drop_after = drop_after
        #: Compress a JSON response larger than :data:`COMPRESS_ABOVE` (the client accepts it).
        self.gzip = gzip
        self.started = False
        self.finished = False
        self.sent = 0
        self.pretty = False
        self.warnings: list[str] = []

    async def start(self, status: int, headers: list[tuple[str, str]]) -> None:
        """Send the status line and headers."""
        raw = [(b"audit-id", self.audit_id.encode())]
        if not any(k.lower() == "cache-control" for k, _ in headers):
            raw.append((b"cache-control", b"no-cache, private"))
        raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        await self._send({"type": "http.response.start", "status": status, "headers": raw})
        self.started = True

    async def write(self, data: bytes, *, more: bool = True) -> None:
        """Send body bytes (``more=False`` ends the response)."""
        if self.drop_after is not None:
            budget = self.drop_after if self.drop_after >= 0 else max(1, len(data) // 2)
            self.drop_after = budget
            if self.sent + len(data) >= budget:
                part = data[: max(0, budget - self.sent)]
                if part:
                    await self._send(
                        {"type": "http.response.body", "body": part, "more_body": True}
                    )
                self.sent += len(part)
                raise DropConnection
        await self._send({"type": "http.response.body", "body": data, "more_body": more})
        self.sent += len(data)
        if not more:
            self.finished = True

    async def finish(self) -> None:
        """End the body (the terminating chunk of a chunked response)."""
        if not self.finished:
            await self.write(b"", more=False)

    async def json(
        self,
        status: int,
        obj: Any,
        *,
        warnings: list[str] | None = None,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        """A complete JSON response."""
        option = orjson.OPT_INDENT_2 if self.pretty else 0
        body = orjson.dumps(obj, option=option)
        if self.pretty:
            body += b"\n"
        await self._whole(status, body, warnings or [], headers or [])

    async def send_list(self, status: int, obj: Any) -> None:
        """A list answer, sent as it is encoded, as the apiserver sends one (its streaming
        list encoder, on by default since Kubernetes 1.33, writes each item as it encodes
        it, through a gzip writer that sends as it compresses): a part of
        :data:`LIST_PART_ITEMS` items encoded at a time; the first :data:`COMPRESS_ABOVE`
        bytes held to decide, as the apiserver's deferred writer does, whether it is
        gzipped (one that ends before is sent whole, as :meth:`json` sends it); past them,
        each part is compressed and sent as it comes, without ``Content-Length``.  The
        same JSON as :meth:`json`'s, byte for byte (a list whose ``items`` are not its last
        field, or an indented answer, is sent by :meth:`json`)."""
        items = obj.get("items")
        if self.pretty or type(items) is not list or next(reversed(obj)) != "items":
            await self.json(status, obj)
            return
        encoded = _encoded_list(obj, items)
        held: list[bytes] = []
        size = 0
        for piece in encoded:
            held.append(piece)
            size += len(piece)
            if size > COMPRESS_ABOVE:
                break
        else:  # all of it: sent whole
            await self._whole(status, b"".join(held), [])
            return
        headers = [("content-type", "application/json")]
        deflate = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS) if self.gzip else None
        if deflate is not None:
            headers.append(("content-encoding", "gzip"))
        headers += [("warning", warning_header(w)) for w in self.warnings]
        await self.start(status, headers)
        await self._send_piece(deflate, b"".join(held))
        del held
        for piece in encoded:
            await self._send_piece(deflate, piece)
        await self.write(b"" if deflate is None else deflate.flush(), more=False)

    async def _send_piece(self, deflate: Any, piece: bytes) -> None:
        """A piece of a list sent as it is encoded, compressed first (in a thread, where
        zlib lets the event loop go on) when ``deflate`` is a compressor."""
        if deflate is not None:
            piece = await asyncio.to_thread(deflate.compress, piece)
        if piece:
            await self.write(piece)

    async def _whole(
        self,
        status: int,
        body: bytes,
        warnings: list[str],
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        """A JSON body sent whole (gzipped when large and the client accepts it)."""
        all_headers = [("content-type", "application/json")]
        if self.gzip and len(body) > COMPRESS_ABOVE:
            # As the apiserver does (APIResponseCompression), at its level 1; in a thread,
            # where zlib lets the event loop go on.
            body = await asyncio.to_thread(gzip.compress, body, 1, mtime=0)
            all_headers.append(("content-encoding", "gzip"))
        all_headers.append(("content-length", str(len(body))))
        all_headers += [("warning", warning_header(w)) for w in self.warnings + warnings]
        all_headers += headers or []
        await self.start(status, all_headers)
        await self.write(body, more=False)

    async def error(self, err: DemoApiError, *, warnings: list[str] | None = None) -> None:
        """A Status response for ``err`` (with ``Retry-After`` when it carries one)."""
        headers = []
        if err.retry_after is not None:
            headers.append(("retry-after", str(err.retry_after)))
        await self.json(err.code, err.to_status(), warnings=warnings, headers=headers)


def _encoded_list(obj: dict[str, Any], items: list[Any]) -> Iterator[bytes]:
    """``orjson.dumps(obj)`` a piece at a time: the list before its items (``items`` its
    last field), then :data:`LIST_PART_ITEMS` items at a time, then its end."""
    yield orjson.dumps({**obj, "items": []})[:-2]  # (up to and with the items' "[")
    for start in range(0, len(items), LIST_PART_ITEMS):
        part = orjson.dumps(items[start : start + LIST_PART_ITEMS])[1:-1]
        yield part if not start else b"," + part
    yield b"]}"


def accepts_gzip(headers: Mapping[str, str]) -> bool:
    """Does ``Accept-Encoding`` name gzip (with a weight above zero)?"""
    for part in headers.get("accept-encoding", "").split(","):
        coding, _, params = part.partition(";")
        if coding.strip().lower() == "gzip":
            weight = params.strip().removeprefix("q=")
            return not weight or weight.strip("0.") != ""
    return False


def warning_header(text: str) -> str:
    """An RFC 7234 warning as the apiserver formats it: ``299 - "text"``."""
    return '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the client goes away (the request body is consumed and discarded)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return

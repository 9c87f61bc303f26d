"""GraphQL over HTTP: POST, GET (queries only), Server-Sent Events, multipart
subscriptions, and the GraphiQL page.

* ``POST /graphql`` with ``application/json`` runs a query or a mutation.
* ``Accept: text/event-stream`` (POST, or GET as ``EventSource`` sends it) runs anything,
  subscriptions included, as graphql-sse's "distinct connections" protocol: ``next``
  events, then one ``complete``; a comment line as heartbeat while idle.  Errors of the
  request itself (a document that does not parse or validate, variables that do not
  coerce) come as a ``next`` event too, so a client sees them.  Each ``next`` event of a
  watch carries ``id:`` = the resourceVersion it resumes from (none while a snapshot or a
  ``RESYNC`` frame is incomplete, so a reconnect goes back to the last complete point), and
  a request with ``Last-Event-ID`` (what ``EventSource`` sends when it reconnects) resumes
  the watch after that version: a replay, or a ``RESYNC`` frame when it expired (watch
  rule 23).  Log follows have no resume point: their events carry no ``id:``.
* ``Accept: multipart/mixed;subscriptionSpec="1.0"`` (Apollo Client, urql) runs a
  subscription as Apollo's multipart HTTP protocol: parts ``{"payload": {data, errors}}``,
  ``{}`` as heartbeat, a transport-level error as ``{"payload": null, "errors": [...]}``,
  and the closing boundary.  Queries and mutations with that ``Accept`` get plain JSON.
* When the gateway drains (SIGTERM), a subscription's last event (SSE: with ``id:`` = its
  resume point) or part is :func:`~gateway.graphql.engine.subscriptions.drain_payload`, then the
  stream
  completes.
* ``GET /graphql?query=...`` runs queries (mutations answer 405).
* ``GET /graphql`` from a browser (``Accept: text/html``) serves GraphiQL, which reads
  ``query``, ``variables`` and ``headers`` from the URL.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Final

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.types import Receive, Scope

from gateway.core import Credential, deepjson, errors, refuse_impersonation
from gateway.graphql.engine.execution import Prepared, RequestError
from gateway.graphql.engine.persisted import DOCUMENT_IDS
from gateway.graphql.engine.subscriptions import Item, Subscriber
from gateway.graphql.errors import ApiError, format_exception
from gateway.graphql.resolvers.context import credential_from_header
from gateway.graphql.transport.graphiql import page, page_headers
from gateway.requestid import (
    note_event,
    note_operation,
    note_subscription,
    note_subscription_end,
)

if TYPE_CHECKING:
    from gateway.graphql.transport.endpoint import Endpoint

JSON_TYPES = ("application/json", "application/graphql-response+json")


GRAPHQL_RESPONSE = "application/graphql-response+json"


#: The two media types of a JSON answer, encoded once.
_MEDIA: Final = {
    "application/json": b"application/json",
    GRAPHQL_RESPONSE: GRAPHQL_RESPONSE.encode(),
}


class JsonAnswer(Response):
    """A JSON answer whose head is made at once from encoded parts: Starlette's
    ``Response`` with the same headers in the same order (the extra ones, then
    ``content-length`` and ``content-type``), without its generic ``init_headers`` (a
    mapping walked, each name lowered and encoded, the list searched twice) for the one
    or two headers of every GraphQL answer."""

    def __init__(
        self,
        body: bytes,
        status: int,
        media: bytes,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        self.status_code = status
        self.background = None
        self.body = body
        length = (b"content-length", str(len(body)).encode())
        if extra:
            self.raw_headers = [*extra, length, (b"content-type", media)]
        else:
            self.raw_headers = [length, (b"content-type", media)]


def json_response(
    body: dict[str, Any], status: int = 200, media_type: str = "application/json", **headers: str
) -> Response:
    media = _MEDIA.get(media_type) or media_type.encode("latin-1")
    extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    return JsonAnswer(deepjson.dumps(body), status, media, extra)


def _error(exc: ApiError, media_type: str = "application/json") -> Response:
    return json_response({"errors": [format_exception(exc)]}, exc.http_status, media_type)


def operation_name(prepared: Prepared) -> str | None:
    """The name the document gives the operation it runs (for the access line)."""
    name = prepared.operation.name
    return name.value if name is not None else None


def negotiate(accept: str) -> tuple[str, bool]:
    """The response media type for an ``Accept`` value, and whether the client is a legacy
    ``application/json``-only one.

    GraphQL over HTTP: with ``application/graphql-response+json`` a request error (a
    document that does not parse or validate, variables that do not coerce) is a 400; a
    client that accepts only ``application/json`` gets 200 for those, its errors in the
    body.  Anything else (no ``Accept``, ``*/*``) is answered as JSON with the 400s.
    """
    if GRAPHQL_RESPONSE in accept:
        return GRAPHQL_RESPONSE, False
    return "application/json", "application/json" in accept


class Posted:
    """A POST to a GraphQL endpoint as the transport reads it, straight off the ASGI scope
    (no Starlette ``Request``): its header names and values decoded in one pass (the
    first of a repeated name, as Starlette's ``Headers.get`` answers), its body read from
    ``receive`` once, whole (:func:`_read_body`)."""

    __slots__ = ("_receive", "headers", "method")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            key = name.decode("latin-1")
            if key not in headers:
                headers[key] = value.decode("latin-1")
        self.headers = headers
        self.method: str = scope["method"]
        self._receive = receive


def _too_large(limit: int) -> ApiError:
    return ApiError(
        f"the request body is larger than {limit} bytes", code="PAYLOAD_TOO_LARGE", http_status=413
    )


async def _read_body(request: Posted, limit: int) -> bytes:
    """The body, refused past ``limit`` bytes (a declared ``Content-Length`` over it before
    a byte is read); a body in one message (a small POST's) is taken as it came.

    Raises:
        ClientDisconnect: the client left before its body was whole (as Starlette's
            ``Request.stream`` raises).
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    receive = request._receive
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            continue
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _decode(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ApiError("the request body is not valid JSON", code="BAD_REQUEST") from None


def _params(request: Request) -> dict[str, Any]:
    q = request.query_params
    params: dict[str, Any] = {"query": q.get("query"), "operationName": q.get("operationName")}
    for name in DOCUMENT_IDS:  # persisted documents (gateway/graphql/engine/persisted.py)
        if q.get(name):
            params[name] = q[name]
    for name in ("variables", "extensions"):
        if q.get(name):
            params[name] = _decode(q[name].encode())
    return params


async def _body_params(request: Posted, limit: int) -> dict[str, Any]:
    raw = await _read_body(request, limit)
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in JSON_TYPES:
        # Only types a browser cannot send across origins without a CORS preflight: a
        # form or a text/plain POST from any web page must not run an operation.
        raise ApiError(
            f"unsupported content type {media or 'none'!r}: send application/json",
            code="UNSUPPORTED_MEDIA_TYPE",
            http_status=415,
        )
    body = _decode(raw)
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object", code="BAD_REQUEST")
    return body


def json_before_sse(accept: str) -> bool:
    """Whether ``Accept`` lists a JSON type before ``text/event-stream``: urql sends
    ``application/graphql-response+json, ..., text/event-stream, multipart/mixed`` for every
    operation and wants a query's answer as JSON (it can read a stream, but tears it down
    while reading)."""
    for media_range in accept.split(","):
        media = media_range.split(";", 1)[0].strip().lower()
        if media in (GRAPHQL_RESPONSE, "application/json"):
            return True
        if media == "text/event-stream":
            return False
    return False


def wants_multipart(accept: str) -> bool:
    """Whether ``Accept`` asks for multipart subscriptions (``subscriptionSpec=1.0``, the
    parameter quoted or not, as Apollo Client and the router's docs write it)."""
    for media_range in accept.split(","):
        media, *parameters = (part.strip() for part in media_range.split(";"))
        if media.lower() != "multipart/mixed":
            continue
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "subscriptionspec" and value.strip().strip('"') == "1.0":
                return True
    return False


#: What a ``Last-Event-ID`` may hold: a resourceVersion (opaque, but printable and short).
_RESUME_TOKEN = re.compile(r"[\x21-\x7e]{1,128}")


def resume_of(request: Request | Posted) -> str | None:
    """The resume point a reconnecting ``EventSource`` sends (``Last-Event-ID``).

    Raises:
        ApiError: the value cannot be a resourceVersion.
    """
    value = request.headers.get("last-event-id")
    if value is None or not value.strip():
        return None
    value = value.strip()
    if not _RESUME_TOKEN.fullmatch(value):
        raise ApiError(
            "`Last-Event-ID` must be a resourceVersion this gateway sent as an event id",
            code="BAD_REQUEST",
        )
    return value


async def handle(app: Endpoint, request: Request | Posted) -> Response:
    """Serve one HTTP request to ``/graphql`` (a POST read as :class:`Posted`, any other
    method as Starlette's ``Request``)."""
    headers = request.headers
    accept = headers.get("accept", "")
    media, legacy = negotiate(accept)
    sse = "text/event-stream" in accept
    try:
        refuse_impersonation(headers.keys(), "header")
    except errors.Forbidden as exc:
        return json_response({"errors": [format_exception(exc)]}, 403, media)
    try:
        credential = credential_from_header(headers.get("authorization"))
    except errors.Unauthorized as exc:
        return json_response({"errors": [format_exception(exc)]}, 401, media)
    resume: str | None = None
    try:
        if isinstance(request, Posted):
            params = await _body_params(request, app.limits.max_body_bytes)
        elif request.method == "GET":
            if "text/html" in accept:
                html = page(request.url.path)
                return HTMLResponse(html, headers=page_headers(html))
            params = _params(request)
        else:
            raise ApiError("use GET or POST", code="METHOD_NOT_ALLOWED", http_status=405)
        if sse:
            resume = resume_of(request)
        admitted = app.admission.admit(app.engine, params)
        prepared, variables = admitted.prepared, admitted.variables
    except ApiError as exc:
        if sse and exc.http_status == 400:
            return _sse_errors({"errors": [format_exception(exc)]})
        return _error(exc, media)
    except RequestError as exc:
        if sse:
            # graphql-sse: errors of the request before execution come in a `next` event
            # of an accepted stream (an EventSource cannot read the body of a 400).
            return _sse_errors(exc.response())
        status = 200 if legacy and exc.status == 400 else exc.status
        return json_response(exc.response(), status, media, **exc.headers)

    note_operation(prepared.kind, operation_name(prepared))
    if sse and prepared.kind != "subscription" and json_before_sse(accept):
        sse = False  # a query or mutation of a client that prefers JSON
    try:
        credential = await app.caller(prepared, credential)
    except errors.Unauthorized as exc:
        if sse:
            return _sse_errors({"errors": [format_exception(exc)]})
        return json_response({"errors": [format_exception(exc)]}, 401, media)
    if sse:
        return _sse(app, request, prepared, variables, credential, resume=resume)
    if prepared.kind == "subscription":
        if wants_multipart(accept):
            return _multipart(app, request, prepared, variables, credential)
        return _error(
            ApiError(
                "subscriptions need a WebSocket (graphql-transport-ws or graphql-ws), "
                "Server-Sent Events (Accept: text/event-stream) or multipart HTTP "
                '(Accept: multipart/mixed;subscriptionSpec="1.0")',
                code="BAD_REQUEST",
            ),
            media,
        )
    if request.method == "GET" and prepared.kind == "mutation":
        response = _error(
            ApiError("mutations must use POST", code="METHOD_NOT_ALLOWED", http_status=405), media
        )
        response.headers["Allow"] = "POST"
        return response
    context = app.context(credential)
    result = await app.engine.execute(prepared, variables, context)
    return json_response(result, _status(result, legacy), media)


def _status(result: dict[str, Any], legacy: bool) -> int:
    """The HTTP status of an executed operation's answer: 200 with data; without (the
    request never executed: variables that do not coerce, an introspection refused) its
    first error's status, 400 by default, and 200 for legacy JSON-only clients."""
    if "data" in result or legacy:
        return 200
    errors_ = result.get("errors") or [{}]
    status = (errors_[0].get("extensions") or {}).get("httpStatus")
    return status if isinstance(status, int) and 400 <= status < 600 else 400


#: Streams are not to be cached, nor buffered by a proxy (nginx reads the second).
_STREAMING = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def _items(sub: Subscriber, heartbeat: float) -> AsyncIterator[Item | None]:
    """A subscriber's items as its transport writes them; ``None`` after ``heartbeat``
    seconds without one (the transport's keep-alive).  The request's access line counts
    them."""
    note_subscription()
    while True:
        item = sub.next_nowait()  # queued items go out without a timer
        if item is None:
            try:
                async with asyncio.timeout(heartbeat):
                    item = await sub.next_item()
            except TimeoutError:
                yield None
                continue
            if item is None:
                note_subscription_end(sub.failed)
                return
        note_event()
        yield item


def _sse_errors(response: dict[str, Any]) -> Response:
    async def stream() -> AsyncIterator[str]:
        yield _event("next", deepjson.dumps(response).decode())
        yield _event("complete", "")

    return StreamingResponse(stream(), media_type="text/event-stream", headers=_STREAMING)


def _sse(
    app: Endpoint,
    request: Request | Posted,
    prepared: Prepared,
    variables: dict[str, Any] | None,
    credential: Credential,
    *,
    resume: str | None,
) -> Response:
    async def stream() -> AsyncIterator[str]:
        if prepared.kind != "subscription":
            if prepared.kind == "mutation" and request.method == "GET":
                error = ApiError(
                    "mutations must use POST", code="METHOD_NOT_ALLOWED", http_status=405
                )
                yield _event("next", orjson.dumps({"errors": [format_exception(error)]}).decode())
            else:
                result = await app.engine.execute(prepared, variables, app.context(credential))
                yield _event("next", deepjson.dumps(result).decode())
            yield _event("complete", "")
            return
        sub = app.subscriptions.subscribe(
            prepared,
            variables,
            lambda: app.context(credential),
            resume_from=resume,
        )
        try:
            yield ": connected\n\n"
            async for item in _items(sub, app.limits.heartbeat_seconds):
                if item is None:
                    yield ":\n\n"
                elif sub.merged:
                    yield _sse_frame(sub.resume)(item.payload)
                else:
                    yield item.framed("sse", _sse_frame(item.resume))
            if sub.final is not None:
                if sub.drained and sub.resume is not None:
                    # The gateway is shutting down: the completion's id is where to resume.
                    yield _sse_frame(sub.resume)(sub.final)
                else:
                    yield _event("next", sub.final)
            yield _event("complete", "")
        finally:
            sub.close()

    return StreamingResponse(stream(), media_type="text/event-stream", headers=_STREAMING)


def _event(name: str, data: str) -> str:
    return f"event: {name}\ndata: {data}\n\n"


def _sse_frame(resume: str | None) -> Callable[[str], str]:
    """The ``next`` event of a payload, with ``id:`` when it has a resume point."""
    if resume is None:
        return lambda payload: f"event: next\ndata: {payload}\n\n"
    return lambda payload: f"id: {resume}\nevent: next\ndata: {payload}\n\n"


#: Apollo's multipart subscriptions: the boundary is always ``graphql``.
MULTIPART = 'multipart/mixed; boundary="graphql"; subscriptionSpec=1.0'
_PART = "\r\nContent-Type: application/json\r\n\r\n"
_HEARTBEAT = _PART + "{}\r\n--graphql"


def _part(payload: str) -> str:
    # Each part is followed at once by the next delimiter, so a reader (meros) hands it
    # over as soon as it arrives instead of when the next part begins.
    return f'{_PART}{{"payload":{payload}}}\r\n--graphql'


def _multipart(
    app: Endpoint,
    request: Request | Posted,
    prepared: Prepared,
    variables: dict[str, Any] | None,
    credential: Credential,
) -> Response:
    async def stream() -> AsyncIterator[str]:
        sub = app.subscriptions.subscribe(prepared, variables, lambda: app.context(credential))
        try:
            yield "\r\n--graphql"
            async for item in _items(sub, app.limits.heartbeat_seconds):
                yield _HEARTBEAT if item is None else item.framed("multipart", _part)
            final = sub.final
            if final is not None:
                if sub.failed:
                    # A transport-level error: the subscription is over, no payload.
                    errors_ = orjson.loads(final).get("errors", [])
                    body = orjson.dumps({"payload": None, "errors": errors_}).decode()
                    yield f"{_PART}{body}\r\n--graphql"
                else:
                    yield _part(final)
            yield "--\r\n"
        finally:
            sub.close()

    return StreamingResponse(stream(), media_type=MULTIPART, headers=_STREAMING)

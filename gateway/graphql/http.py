"""GraphQL over HTTP: POST, GET (queries only), Server-Sent Events, and the GraphiQL page.

* ``POST /graphql`` with ``application/json`` (or ``application/graphql``) runs a query or a
  mutation; with ``Accept: text/event-stream`` it runs anything, subscriptions included, as
  an SSE stream (the graphql-sse "distinct connections" protocol: ``next`` events, then one
  ``complete``), with a comment line as heartbeat while idle.
* ``GET /graphql?query=...`` runs queries (mutations answer 405); with
  ``Accept: text/event-stream`` subscriptions too (``EventSource`` can only GET).
* ``GET /graphql`` from a browser (``Accept: text/html``) serves GraphiQL, which reads
  ``query``, ``variables`` and ``headers`` from the URL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse

from gateway.core import errors
from gateway.core.adapter import Credential
from gateway.graphql.context import credential_from_header
from gateway.graphql.errors import ApiError, format_exception
from gateway.graphql.execution import Prepared, RequestError
from gateway.graphql.graphiql import page, page_headers

if TYPE_CHECKING:
    from gateway.graphql.server import GraphQLApp

JSON_TYPES = ("application/json", "application/graphql-response+json")


GRAPHQL_RESPONSE = "application/graphql-response+json"


def json_response(
    body: dict[str, Any], status: int = 200, media_type: str = "application/json", **headers: str
) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=media_type, headers=headers)


def _error(exc: ApiError, media_type: str = "application/json") -> Response:
    return json_response({"errors": [format_exception(exc)]}, exc.http_status, media_type)


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


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    too_large = ApiError(
        f"the request body is larger than {limit} bytes", code="PAYLOAD_TOO_LARGE", http_status=413
    )
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return bytes(body)


def _decode(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ApiError("the request body is not valid JSON", code="BAD_REQUEST") from None


def _params(request: Request) -> dict[str, Any]:
    q = request.query_params
    params: dict[str, Any] = {"query": q.get("query"), "operationName": q.get("operationName")}
    for name in ("variables", "extensions"):
        if q.get(name):
            params[name] = _decode(q[name].encode())
    return params


async def _body_params(request: Request, limit: int) -> dict[str, Any]:
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


def extensions_of(params: dict[str, Any]) -> dict[str, Any] | None:
    extensions = params.get("extensions")
    if extensions is not None and not isinstance(extensions, dict):
        raise ApiError("`extensions` must be a JSON object", code="BAD_REQUEST")
    return extensions


def variables_of(params: dict[str, Any]) -> dict[str, Any] | None:
    variables = params.get("variables")
    if variables is not None and not isinstance(variables, dict):
        raise ApiError("`variables` must be a JSON object", code="BAD_REQUEST")
    return variables


async def handle(app: GraphQLApp, request: Request) -> Response:
    """Serve one HTTP request to ``/graphql``."""
    accept = request.headers.get("accept", "")
    media, legacy = negotiate(accept)
    try:
        credential = credential_from_header(request.headers.get("authorization"))
    except errors.Unauthorized as exc:
        return json_response({"errors": [format_exception(exc)]}, 401, media)
    try:
        if request.method == "GET":
            if "text/html" in accept:
                html = page()
                return HTMLResponse(html, headers=page_headers(html))
            params = _params(request)
        elif request.method == "POST":
            params = await _body_params(request, app.limits.max_body_bytes)
        else:
            raise ApiError("use GET or POST", code="METHOD_NOT_ALLOWED", http_status=405)
        variables = variables_of(params)
        extensions_of(params)
        prepared = app.engine.prepare(params.get("query"), params.get("operationName"))
    except ApiError as exc:
        return _error(exc, media)
    except RequestError as exc:
        status = 200 if legacy and exc.status == 400 else exc.status
        return json_response(exc.response(), status, media)

    if "text/event-stream" in accept:
        return _sse(app, request, prepared, variables, credential)
    if prepared.kind == "subscription":
        return _error(
            ApiError(
                "subscriptions need a WebSocket (graphql-transport-ws or graphql-ws) or "
                "Server-Sent Events (Accept: text/event-stream)",
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
    context = app.context(request.scope, credential)
    result = await app.engine.execute(prepared, variables, context)
    # No data at all: the request never executed (variables that do not coerce).
    status = 400 if "data" not in result and not legacy else 200
    return json_response(result, status, media)


def _sse(
    app: GraphQLApp,
    request: Request,
    prepared: Prepared,
    variables: dict[str, Any] | None,
    credential: Credential,
) -> Response:
    async def stream() -> AsyncIterator[str]:
        if prepared.kind != "subscription":
            if prepared.kind == "mutation" and request.method == "GET":
                error = ApiError(
                    "mutations must use POST", code="METHOD_NOT_ALLOWED", http_status=405
                )
                yield _event("next", orjson.dumps({"errors": [format_exception(error)]}).decode())
            else:
                result = await app.engine.execute(
                    prepared, variables, app.context(request.scope, credential)
                )
                yield _event("next", orjson.dumps(result).decode())
            yield _event("complete", "")
            return
        feed, sub = app.hub.subscribe(
            prepared, variables, lambda: app.context(request.scope, credential)
        )
        heartbeat = app.limits.heartbeat_seconds
        try:
            yield ": connected\n\n"
            while True:
                item = sub.next_nowait()  # queued items go out without a timer
                if item is None:
                    try:
                        async with asyncio.timeout(heartbeat):
                            item = await sub.next_item()
                    except TimeoutError:
                        yield ":\n\n"
                        continue
                    if item is None:
                        break
                yield item.framed("sse", _next_event)
            if sub.final is not None:
                yield _event("next", sub.final)
            yield _event("complete", "")
        finally:
            feed.leave(sub)

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _event(name: str, data: str) -> str:
    return f"event: {name}\ndata: {data}\n\n"


def _next_event(payload: str) -> str:
    return f"event: next\ndata: {payload}\n\n"

"""Request ids and access lines for gRPC calls (see :mod:`gateway.requestid`).

A server interceptor: the id comes from the ``x-request-id`` metadata (else the
``traceparent``'s trace id, else a new one), is sent back first thing as ``x-request-id``
initial metadata, and is on every line logged while the call is served (grpc.aio runs the
interceptor and the handler in one fresh context per call).  One access line per call when
it ends: ``transport`` ``grpc``, ``method`` ``POST``, ``path`` the full method name,
``status`` the status code's name, ``duration_ms``, ``bytes`` and ``operation``
(``PodService.List``); a streaming call adds ``events`` (messages sent) and ``ended``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from gateway.requestid import HEADER, AccessRecord, request_id_of, serving

__all__ = ["RequestIdInterceptor"]

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _code_name(code: Any) -> str:
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if isinstance(code, int) and code in _CODES:
        return str(_CODES[code].name)
    return "OK"


def _size(message: Any) -> int:
    if isinstance(message, bytes | bytearray):
        return len(message)
    size = getattr(message, "ByteSize", None)
    return int(size()) if callable(size) else 0


class _Call:
    """One call's record, sent id and access line."""

    def __init__(self, record: AccessRecord) -> None:
        self.record = record
        self.metadata = ((HEADER, record.request_id),)

    async def begin(self, context: grpc.aio.ServicerContext) -> None:
        await context.send_initial_metadata(self.metadata)

    def end(self, context: grpc.aio.ServicerContext, failure: BaseException | None) -> None:
        record = self.record
        if failure is not None and not isinstance(failure, Exception):
            record.status = "CANCELLED"
        elif failure is not None and not isinstance(failure, grpc.aio.AbortError):
            record.status = "UNKNOWN"
        else:
            record.status = _code_name(context.code())
        if record.events is not None:
            if record.status == "OK":
                record.ended = "complete"
            elif record.status == "CANCELLED":
                record.ended = "cancelled"
            else:
                record.ended = "error"
        level = logging.DEBUG if record.path.startswith("/grpc.") else logging.INFO
        record.log(level)


def _unary_response(call: _Call, behavior: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
        failure: BaseException | None = None
        with serving(call.record):
            try:
                await call.begin(context)
                response = behavior(request, context)
                if inspect.isawaitable(response):
                    response = await response
                call.record.bytes += _size(response)
                return response
            except BaseException as exc:
                failure = exc
                raise
            finally:
                call.end(context, failure)

    return handle


def _stream_response(call: _Call, behavior: Callable[..., Any]) -> Callable[..., Any]:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        failure: BaseException | None = None
        record = call.record
        record.events = 0
        with serving(record):
            try:
                await call.begin(context)
                responses = behavior(request, context)
                if hasattr(responses, "__aiter__"):
                    async for message in responses:
                        record.events += 1
                        record.bytes += _size(message)
                        yield message
                elif inspect.isawaitable(responses):
                    await responses  # the handler writes with context.write()
                else:
                    for message in responses:
                        record.events += 1
                        record.bytes += _size(message)
                        yield message
            except BaseException as exc:
                failure = exc
                raise
            finally:
                call.end(context, failure)

    return handle


class RequestIdInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The request id and the access line of every gRPC call."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        given: str | None = None
        traceparent: str | None = None
        for key, value in handler_call_details.invocation_metadata or ():
            if key == HEADER and isinstance(value, str):
                given = value
            elif key == "traceparent" and isinstance(value, str):
                traceparent = value
        method: str = handler_call_details.method
        service, _, name = method.lstrip("/").partition("/")
        call = _Call(
            AccessRecord(
                request_id=request_id_of(given, traceparent),
                transport="grpc",
                method="POST",
                path=method,
                operation=f"{service.rsplit('.', 1)[-1]}.{name}",
                traceparent=traceparent,
            )
        )
        kinds = {
            "unary_unary": (grpc.unary_unary_rpc_method_handler, _unary_response),
            "stream_unary": (grpc.stream_unary_rpc_method_handler, _unary_response),
            "unary_stream": (grpc.unary_stream_rpc_method_handler, _stream_response),
            "stream_stream": (grpc.stream_stream_rpc_method_handler, _stream_response),
        }
        for attribute, (make, wrap) in kinds.items():
            behavior = getattr(handler, attribute)
            if behavior is not None:
                return make(
                    wrap(call, behavior),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler

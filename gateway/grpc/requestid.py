"""Request ids, access lines and the drain gate for gRPC calls (see :mod:`gateway.requestid`).

One server interceptor, :class:`CallInterceptor`, does all that is done around a call, so
a streamed message passes through no wrapper of its own:

* the id comes from the ``x-request-id`` metadata (else the ``traceparent``'s trace id,
  else a new one), is sent back first thing as ``x-request-id`` initial metadata, and is on
  every line logged while the call is served (grpc.aio runs the interceptor and the
  handler in one fresh context per call);
* one access line per call when it ends: ``transport`` ``grpc``, ``method`` ``POST``,
  ``path`` the full method name, ``status`` the status code's name, ``duration_ms``,
  ``bytes`` and ``operation`` (``PodService.List``); a streaming call adds ``events``
  (messages sent) and ``ended``;
* with a :class:`~gateway.core.drain.Drain`: while draining, every new call but health
  checks and reflection is refused with ``UNAVAILABLE`` (:class:`~gateway.core.errors.
  Draining`, ``RetryInfo`` 1 s), and the calls in flight are counted so the drain waits
  for them (a ``Watch`` until it sent its closing status).

A streaming handler's messages are written by the interceptor's one coroutine
(``context.write``), which counts them: no async generator is stacked per layer.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from contextlib import aclosing, nullcontext
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from gateway.core import errors
from gateway.core.drain import Drain
from gateway.grpc.status import to_status
from gateway.requestid import HEADER, AccessRecord, request_id_of, serving

__all__ = ["CallInterceptor"]

_HEALTH = "/" + health_pb2.DESCRIPTOR.services_by_name["Health"].full_name + "/"

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _code_name(code: Any) -> str:
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    if isinstance(code, int) and code in _CODES:
        return str(_CODES[code].name)
    return "OK"


def _size(message: Any) -> int:
    if message.__class__ is bytes or isinstance(message, bytes | bytearray):
        return len(message)
    size = getattr(message, "ByteSize", None)
    return int(size()) if callable(size) else 0


class _Call:
    """One call's record, sent id, drain gate and access line."""

    def __init__(self, record: AccessRecord, drain: Drain | None) -> None:
        self.record = record
        self.metadata = ((HEADER, record.request_id),)
        #: ``None``: the call is not gated (no drain, health checks, reflection).
        self.drain = drain

    async def begin(self, context: grpc.aio.ServicerContext) -> None:
        await context.send_initial_metadata(self.metadata)
        if self.drain is not None and self.drain.draining:
            await context.abort_with_status(to_status(errors.Draining()))

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
                with call.drain.track() if call.drain is not None else nullcontext():
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


def _stream_response(call: _Call, behavior: Callable[..., Any]) -> Callable[..., Awaitable[None]]:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> None:
        failure: BaseException | None = None
        record = call.record
        record.events = 0
        with serving(record):
            try:
                await call.begin(context)
                with call.drain.track() if call.drain is not None else nullcontext():
                    responses = behavior(request, context)
                    if hasattr(responses, "__aiter__"):
                        write = context.write
                        # closed here when the call ends early (the client left): its
                        # ``finally`` blocks run now, not whenever the GC finds it
                        closing = aclosing(responses) if hasattr(responses, "aclose") else None
                        async with closing or nullcontext():
                            async for message in responses:
                                record.events += 1
                                record.bytes += _size(message)
                                await write(message)
                    elif inspect.isawaitable(responses):
                        await responses  # the handler writes with context.write()
                    else:
                        for message in responses:
                            record.events += 1
                            record.bytes += _size(message)
                            await context.write(message)
            except BaseException as exc:
                failure = exc
                raise
            finally:
                call.end(context, failure)

    return handle


_KINDS: Any = {
    "unary_unary": (grpc.unary_unary_rpc_method_handler, _unary_response),
    "stream_unary": (grpc.stream_unary_rpc_method_handler, _unary_response),
    "unary_stream": (grpc.unary_stream_rpc_method_handler, _stream_response),
    "stream_stream": (grpc.stream_stream_rpc_method_handler, _stream_response),
}


class CallInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The request id, the access line and (given a drain) the drain gate of every call.

    Args:
        drain: the application's drain; ``None``: calls are never refused nor counted.
    """

    def __init__(self, drain: Drain | None = None) -> None:
        self.drain = drain

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
        # Health checks answer while draining; reflection (the one stream-stream method)
        # too.
        gated = (
            self.drain is not None
            and handler.stream_stream is None
            and not method.startswith(_HEALTH)
        )
        call = _Call(
            AccessRecord(
                request_id=request_id_of(given, traceparent),
                transport="grpc",
                method="POST",
                path=method,
                operation=f"{service.rsplit('.', 1)[-1]}.{name}",
                traceparent=traceparent,
            ),
            self.drain if gated else None,
        )
        for attribute, (make, wrap) in _KINDS.items():
            behavior = getattr(handler, attribute)
            if behavior is not None:
                return make(
                    wrap(call, behavior),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler

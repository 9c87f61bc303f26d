"""The admission of every gRPC call: one server interceptor, the only way into any service.

:func:`gateway.grpc.server.start_grpc` builds the one ``grpc.aio.Server`` of the gateway
with :class:`Admission` as its interceptor, and registers every service through
:class:`~gateway.grpc.server.Services`, which gives the admission the names it serves: grpc
runs the interceptor for every call to every handler of the server (generic and registered
ones alike), so a service cannot be reached around it.  Per call, in this order:

* **unknown methods**: a method of a service that was not registered through
  ``Services`` is ``UNIMPLEMENTED`` (reflection lists exactly the registered services, so
  what a client can find is what the admission admits);
* **request id**: from the ``x-request-id`` metadata (else the ``traceparent``'s trace id,
  else a new one), sent back first thing as ``x-request-id`` initial metadata, and on
  every line logged while the call is served (grpc.aio runs the interceptor and the
  handler in one fresh context per call).  An admitted unary-unary call's handler runs
  while that metadata's grpc batch is in flight, and the batch is awaited before the
  answer or a refusal is sent (:class:`_Sent`): its completion, a hop through grpc's
  poller thread, no longer delays the upstream call;
* **access line**: one per call when it ends: ``transport`` ``grpc``, ``method``
  ``POST``, ``path`` the full method name, ``status`` the status code's name,
  ``duration_ms``, ``bytes`` and ``operation`` (``PodService.List``); a streaming call adds
  ``events`` (messages sent) and ``ended``.  Refusals below get one too;
* **impersonation**: any ``impersonate-*`` metadata key is ``PERMISSION_DENIED`` on every
  service, health and reflection included
  (:func:`~gateway.core.upstream.identity.refuse_impersonation`);
* **cluster name**: an ``x-kube-cluster`` that is not a cluster name (``default`` or a DNS
  label: lower-case letters, digits and ``-``, at most 63 characters) is
  ``INVALID_ARGUMENT`` with a message that does not repeat it, before anything could echo
  it (a refusal naming an unknown cluster does, in its message and trailers);
* **drain**: with a :class:`~gateway.core.process.drain.Drain`, while draining every new call but
  health checks and reflection is ``UNAVAILABLE`` (:class:`~gateway.core.errors.Draining`,
  ``RetryInfo`` 1 s), and the calls in flight are counted so the drain waits for them (a
  ``Watch`` until it sent its closing status);
* **decoding**: every request message is parsed here (each handler's own deserialiser,
  wrapped), and one that is not a valid message is ``INVALID_ARGUMENT`` naming its type:
  no handler ever sees it, no exception text reaches the caller, no traceback the log;
* **unauthenticated streams**: a streaming call (server, client or both) without
  ``authorization`` metadata, and every health and reflection stream (nothing checks a
  credential there), holds one of :class:`AnonymousStreams`' places: at most
  ``per_peer`` from one peer (its address without the port) and ``total`` in all, so
  they never take the ``--grpc-max-concurrent-rpcs`` places authenticated callers need.
  One more is ``RESOURCE_EXHAUSTED`` at once.

Message size limits are the server's own options (grpc refuses a request over
``--grpc-max-request-bytes`` before it is read whole), and so apply to every call too.

A streaming handler's messages are counted for the access line as they are written: the
handler gets a context whose ``write`` counts them (the resource services write their own
messages: no async generator is stacked per layer), and a handler that is an async
generator has its messages written and counted by the admission's coroutine.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable
from contextlib import aclosing, nullcontext
from contextvars import ContextVar
from typing import Any, Final, NoReturn

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection

from gateway.core import DEFAULT, Drain, errors, refuse_impersonation
from gateway.grpc.status import internal_status, to_status
from gateway.requestid import HEADER, AccessRecord, request_id_of, serving

__all__ = [
    "CLUSTER_METADATA",
    "Admission",
    "AnonymousStreams",
    "cluster_name_refusal",
    "is_cluster_name",
    "peer_address",
]

log = logging.getLogger(__name__)

#: The call metadata naming the cluster a call is for.
CLUSTER_METADATA: Final = "x-kube-cluster"

_HEALTH: Final = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
#: Services that never look at the caller's credential: their streams always count as
#: unauthenticated, whatever ``authorization`` they carry.
UNCHECKED_SERVICES: Final = frozenset({_HEALTH, reflection.SERVICE_NAME})
#: The largest request message of those services: a service, file or symbol name (a larger
#: one would be held for a health ``Watch``'s whole life).
UNCHECKED_REQUEST_BYTES: Final = 16 * 1024

#: A cluster name a caller may send: ``default``, or what ``--cluster`` and
#: ``--clusters-dir`` accept (a DNS label).
_CLUSTER_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

_CODES = {code.value[0]: code for code in grpc.StatusCode}


def is_cluster_name(name: str) -> bool:
    """Whether a caller's ``name`` can name a cluster (``default`` or a DNS label); what
    cannot is refused without being repeated."""
    return name == DEFAULT or _CLUSTER_NAME.fullmatch(name) is not None


def cluster_name_refusal(metadata: Iterable[tuple[str, Any]] | None) -> errors.GatewayError | None:
    """The refusal of a call whose ``x-kube-cluster`` cannot name a cluster (``None``: it
    can, or the call sends none).  The message never repeats the value sent."""
    for key, value in metadata or ():
        if key != CLUSTER_METADATA:
            continue
        name = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        if not name or is_cluster_name(name):
            continue
        message = (
            f"the {CLUSTER_METADATA} metadata is not a cluster name ({len(name)} characters): "
            "lower-case letters, digits and '-', starting and ending with a letter or digit, "
            "at most 63 characters (ClusterService.ListClusters lists the served ones)"
        )
        return errors.InvalidParameter(
            message, causes=(errors.Cause("FieldValueInvalid", message, CLUSTER_METADATA),)
        )
    return None


def peer_address(peer: str | None) -> str:
    """The address of a peer as grpc names it, without its port: ``ipv4:10.0.0.7:53412``
    is ``10.0.0.7``, ``ipv6:[::1]:53412`` is ``::1``; a Unix socket's peers are one."""
    if not peer:
        return "unknown"
    scheme, _, rest = peer.partition(":")
    if scheme == "ipv6":
        host = rest.rpartition("]")[0].lstrip("[") if rest.startswith("[") else rest
        return host.partition("%")[0] or rest
    if scheme == "ipv4":
        return rest.rpartition(":")[0] or rest
    return scheme  # unix, unix-abstract: one peer


class AnonymousStreams:
    """The places of unauthenticated streams: ``per_peer`` per peer address, ``total`` in all.

    Args:
        per_peer: the most one peer address may hold open.
        total: the most all peers together may hold open.
    """

    def __init__(self, per_peer: int, total: int) -> None:
        if per_peer < 1 or total < 1:
            raise ValueError("the bounds of unauthenticated streams must be at least 1")
        self.per_peer = per_peer
        self.total = total
        self._by_peer: dict[str, int] = {}
        self._open = 0

    def __len__(self) -> int:
        return self._open

    def held(self, peer: str) -> int:
        """How many ``peer`` holds."""
        return self._by_peer.get(peer, 0)

    def take(self, peer: str) -> None:
        """Take one place for ``peer`` (give it back with :meth:`give_back`).

        Raises:
            ResourceExhausted: ``peer`` holds ``per_peer`` already, or all peers ``total``.
        """
        held = self._by_peer.get(peer, 0)
        if held >= self.per_peer:
            raise errors.ResourceExhausted(
                f"too many unauthenticated streams from {peer}: at most {self.per_peer} per "
                "peer (--grpc-anonymous-streams-per-peer); close one, or call with "
                "authorization metadata (health and reflection streams always count)",
                retry_after=1,
            )
        if self._open >= self.total:
            raise errors.ResourceExhausted(
                f"too many unauthenticated streams: at most {self.total} in all "
                "(--grpc-anonymous-streams); call with authorization metadata",
                retry_after=1,
            )
        self._by_peer[peer] = held + 1
        self._open += 1

    def give_back(self, peer: str) -> None:
        """Give back one place :meth:`take` gave ``peer``."""
        held = self._by_peer.get(peer, 0) - 1
        if held > 0:
            self._by_peer[peer] = held
        else:
            self._by_peer.pop(peer, None)
        self._open -= 1


class _Refused:
    """A request message refused before any handler sees it (not a valid message of its
    type, or too large for a service anyone may call)."""

    __slots__ = ("error",)

    def __init__(self, error: errors.GatewayError) -> None:
        self.error = error


def _safe(deserialize: Callable[[bytes], Any], limit: int | None) -> Callable[[bytes], Any]:
    """``deserialize``, answering a message it cannot parse (or one over ``limit`` bytes,
    unparsed) with a :class:`_Refused`."""
    owner = getattr(deserialize, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    type_name = getattr(descriptor, "full_name", None) or "request message"

    def parse(data: bytes) -> Any:
        if limit is not None and len(data) > limit:
            return _Refused(
                errors.ResourceExhausted(
                    f"a {type_name} is at most {limit} bytes ({len(data)} sent): health "
                    "and reflection requests name a service, a file or a symbol"
                )
            )
        try:
            return deserialize(data)
        except (DecodeError, ValueError, TypeError, UnicodeDecodeError):
            return _Refused(errors.BadRequest(f"the request is not a valid {type_name}"))

    return parse


async def _unexpected(context: grpc.aio.ServicerContext, path: str, exc: Exception) -> NoReturn:
    """Fail a call whose handler raised what it should not have: a method its servicer
    does not implement is ``UNIMPLEMENTED``; anything else is a bug, logged with its stack
    and answered ``INTERNAL`` with nothing of it (never grpc's ``UNKNOWN`` and the
    exception's text)."""
    if isinstance(exc, NotImplementedError):
        await context.abort_with_status(
            to_status(errors.MethodNotAllowed(f"{path} is not implemented by this server"))
        )
    log.error("unexpected failure in the gRPC call %s", path, exc_info=exc)
    await context.abort_with_status(internal_status())
    raise AssertionError("unreachable")  # abort_with_status raises


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


class _Sent:
    """A call's initial metadata, its grpc batch started (``send_initial_metadata`` run to
    its first suspension: ``grpc_call_start_batch`` has taken the batch, the metadata is
    on its way) and awaited later, once (:meth:`settle`, awaited): grpc.aio marks the
    metadata sent only when the coroutine ends, and would send an empty one of its own
    with any later batch (the answer's, an abort's), which grpc core refuses while this
    one is in flight.  Closed unawaited when the call is cancelled."""

    __slots__ = ("_coro", "_step")

    def __init__(self, coro: Any) -> None:
        self._coro: Any = coro
        self._step: Any = None
        try:
            self._step = coro.send(None)
        except StopIteration:
            self._coro = None

    def __await__(self) -> Any:
        coro, step = self._coro, self._step
        self._coro = self._step = None
        if coro is None:
            return
        while True:
            try:
                if getattr(step, "done", None) is not None and step.done():
                    sent = None  # completed meanwhile: no suspension of the handler's task
                else:
                    sent = yield step
            except BaseException as exc:  # cancelled while waiting: into the coroutine
                try:
                    step = coro.throw(exc)
                except StopIteration:
                    return
                continue
            try:
                step = coro.send(sent)
            except StopIteration:
                return

    def close(self) -> None:
        if self._coro is not None:
            self._coro.close()
            self._coro = self._step = None


class _Context:
    """A unary-unary handler's context while its initial metadata's batch is in flight:
    what sends (an abort, a message, metadata) awaits that batch first; everything else
    is the call's own context."""

    __slots__ = ("_context", "_sent")

    def __init__(self, context: grpc.aio.ServicerContext, sent: _Sent) -> None:
        self._context = context
        self._sent: _Sent | None = sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    # What every unary handler asks, forwarded without a failed look-up and __getattr__.

    def invocation_metadata(self) -> Any:
        return self._context.invocation_metadata()

    def time_remaining(self) -> float | None:
        return self._context.time_remaining()  # type: ignore[no-any-return]

    def disable_next_message_compression(self) -> None:
        self._context.disable_next_message_compression()

    async def settle(self) -> None:
        """Await the initial metadata's batch (once)."""
        sent, self._sent = self._sent, None
        if sent is not None:
            await sent

    def close(self) -> None:
        sent, self._sent = self._sent, None
        if sent is not None:
            sent.close()

    async def abort(self, *args: Any, **kwargs: Any) -> NoReturn:
        await self.settle()
        await self._context.abort(*args, **kwargs)
        raise AssertionError("unreachable")  # abort raises

    async def abort_with_status(self, status: Any) -> NoReturn:
        await self.settle()
        await self._context.abort_with_status(status)
        raise AssertionError("unreachable")  # abort_with_status raises

    async def send_initial_metadata(self, metadata: Any) -> None:
        await self.settle()
        await self._context.send_initial_metadata(metadata)

    async def write(self, message: Any) -> None:
        await self.settle()
        await self._context.write(message)


class _Counted:
    """A streaming handler's context: its writes are counted on the call's record (the
    access line's ``events`` and ``bytes``); everything else is the call's own context."""

    __slots__ = ("_context", "_record")

    def __init__(self, context: grpc.aio.ServicerContext, record: AccessRecord) -> None:
        self._context = context
        self._record = record

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def write(self, message: Any) -> Awaitable[None]:
        record = self._record
        assert record.events is not None  # a streaming call's record counts its events
        record.events += 1
        record.bytes += _size(message)
        return self._context.write(message)  # type: ignore[no-any-return]


class _Call:
    """One call's record, sent id, refusal, drain gate, stream place and access line."""

    def __init__(
        self,
        record: AccessRecord,
        refusal: errors.GatewayError | None,
        drain: Drain | None,
        streams: AnonymousStreams | None,
    ) -> None:
        self.record = record
        self.metadata = ((HEADER, record.request_id),)
        #: Why the call is refused before its handler runs (metadata), if it is.
        self.refusal = refusal
        #: ``None``: the call is not gated (no drain, health checks, reflection).
        self.drain = drain
        #: ``None``: the call takes no place of an unauthenticated stream.
        self.streams = streams
        self.peer: str | None = None

    def start(self, context: grpc.aio.ServicerContext, request: Any) -> _Sent | None:
        """For a unary-unary call that is admitted, its initial metadata's batch started
        but not awaited (the handler runs meanwhile: the batch's completion, one hop
        through grpc's poller thread, no longer delays the upstream call); ``None`` when
        the call must :meth:`begin` instead (it is refused, or takes a stream's place)."""
        if (
            self.refusal is not None
            or (self.drain is not None and self.drain.draining)
            or request.__class__ is _Refused
            or self.streams is not None
        ):
            return None
        return _Sent(context.send_initial_metadata(self.metadata))

    async def begin(self, context: grpc.aio.ServicerContext, request: Any = None) -> None:
        await context.send_initial_metadata(self.metadata)
        if self.refusal is not None:
            await context.abort_with_status(to_status(self.refusal))
        if self.drain is not None and self.drain.draining:
            await context.abort_with_status(to_status(errors.Draining()))
        if request.__class__ is _Refused:
            await context.abort_with_status(to_status(request.error))
        if self.streams is not None:
            peer = peer_address(context.peer())
            try:
                self.streams.take(peer)
            except errors.GatewayError as exc:
                await context.abort_with_status(to_status(exc))
            self.peer = peer

    def end(
        self,
        context: grpc.aio.ServicerContext,
        failure: BaseException | None,
        *,
        later: bool = False,
    ) -> None:
        """The call's status on its record, and its access line: ``later``, once the loop's
        current step ends (after grpc.aio started the answer's batch: the line's formatting
        and logging no longer delay the answer), its duration taken now."""
        if self.peer is not None and self.streams is not None:
            self.streams.give_back(self.peer)
            self.peer = None
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
        loop = asyncio._get_running_loop() if later else None
        if loop is not None:
            record.stopped = time.perf_counter()
            loop.call_soon(record.log, level)
        else:  # (a call's coroutine closed outside its loop: at once)
            record.log(level)


async def _checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
    """The messages of a client stream, the call failed at the first undecodable one."""
    async for message in requests:
        if message.__class__ is _Refused:
            await context.abort_with_status(to_status(message.error))
        yield message


def _forget(failure: BaseException) -> None:
    """Clear the locals of the finished frames ``failure``'s tracebacks hold (its own, its
    cause's and context's).  grpc keeps an aborted call's exception on the call's state,
    which the handlers' frames hold through ``context``: a cycle, which would keep each
    refused request (a 3.5 MB fleet ``List`` parsed, outside Python's allocator) until a
    full collection, rare in a serving gateway (``tune_garbage_collector``)."""
    pending, seen = [failure], set()
    while pending:
        exc = pending.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)  # skips frames still running
        pending.extend(e for e in (exc.__cause__, exc.__context__) if e is not None)


def _unary_response(behavior: Callable[..., Any], streamed: bool) -> Callable[..., Awaitable[Any]]:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
        failure: BaseException | None = None
        call = _CALL.get()
        # A unary-unary call's initial metadata is awaited after its handler (see _Sent).
        pending: _Context | None = None
        with serving(call.record):
            try:
                if streamed:
                    await call.begin(context)
                    request = _checked(request, context)
                else:
                    sent = call.start(context, request)
                    if sent is None:
                        await call.begin(context, request)
                    else:
                        pending = _Context(context, sent)
                try:
                    with call.drain.track() if call.drain is not None else nullcontext():
                        response = behavior(request, context if pending is None else pending)
                        if inspect.isawaitable(response):
                            response = await response
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:  # CancelledError is not an Exception: it propagates
                    if pending is not None:
                        await pending.settle()
                    await _unexpected(context, call.record.path, exc)
                if pending is not None:
                    await pending.settle()
                call.record.bytes += _size(response)
                return response
            except BaseException as exc:
                failure = exc
                raise
            finally:
                if pending is not None:
                    pending.close()  # cancelled before it was awaited
                # the line once grpc.aio has started the answer (it sends it when this returns)
                call.end(context, failure, later=True)
                if failure is not None:
                    _forget(failure)
                failure = request = pending = None

    return handle


async def _respond(responses: Any, record: AccessRecord, context: grpc.aio.ServicerContext) -> None:
    """Write a streaming handler's messages (or await a handler that writes its own)."""
    assert record.events is not None  # a streaming call's record counts its events
    if hasattr(responses, "__aiter__"):
        write = context.write
        # closed here when the call ends early (the client left): its ``finally`` blocks
        # run now, not whenever the GC finds it
        closing = aclosing(responses) if hasattr(responses, "aclose") else None
        async with closing or nullcontext():
            async for message in responses:
                record.events += 1
                record.bytes += _size(message)
                await write(message)
                # not held while the stream waits for its next event: an idle stream would
                # keep its last message (a snapshot's, encoded for it alone)
                del message
    elif inspect.isawaitable(responses):
        await responses  # the handler writes with context.write()
    else:
        for message in responses:
            record.events += 1
            record.bytes += _size(message)
            await context.write(message)


def _stream_response(
    behavior: Callable[..., Any], streamed: bool
) -> Callable[..., Awaitable[None]]:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> None:
        failure: BaseException | None = None
        responses: Any = None
        call = _CALL.get()
        record = call.record
        record.events = 0
        with serving(record):
            try:
                if streamed:
                    await call.begin(context)
                    request = _checked(request, context)
                else:
                    await call.begin(context, request)
                try:
                    with call.drain.track() if call.drain is not None else nullcontext():
                        responses = behavior(request, _Counted(context, record))
                        if inspect.isawaitable(responses):
                            # the handler writes its messages (counted by _Counted): the
                            # servicers' streams, one generator fewer per message and stream
                            await responses
                        elif hasattr(responses, "__aiter__") and hasattr(responses, "aclose"):
                            # _respond's loop, inline: one coroutine frame fewer for the
                            # stream's whole life
                            write = context.write
                            async with aclosing(responses):
                                async for message in responses:
                                    record.events += 1
                                    record.bytes += _size(message)
                                    await write(message)
                                    del message  # not held while waiting (see _respond)
                        else:
                            await _respond(responses, record, context)
                except grpc.aio.AbortError:
                    raise
                except Exception as exc:  # CancelledError is not an Exception: it propagates
                    await _unexpected(context, record.path, exc)
            except BaseException as exc:
                failure = exc
                raise
            finally:
                call.end(context, failure)
                if failure is not None:
                    _forget(failure)
                failure = request = responses = None

    return handle


#: The call being admitted: set by :meth:`Admission.intercept_service`, read by the handler
#: it returned.  grpc.aio serves each call in a task of its own, which runs the interceptor
#: and then the handler, so each call sees its own; the wrapped handlers are built once per
#: handler and shared by every call.
_CALL: ContextVar[_Call] = ContextVar("kube_gateway_grpc_call")
#: Wrapped handlers kept at most (the router's handlers of every cluster, health,
#: reflection; a fleet rebuilt many times over starts the cache again).
_WRAPPED_MAX: Final = 4096

#: handler attribute -> (grpc's handler maker, the admission's wrapper, a client stream)
_KINDS: Any = {
    "unary_unary": (grpc.unary_unary_rpc_method_handler, _unary_response, False),
    "stream_unary": (grpc.stream_unary_rpc_method_handler, _unary_response, True),
    "unary_stream": (grpc.unary_stream_rpc_method_handler, _stream_response, False),
    "stream_stream": (grpc.stream_stream_rpc_method_handler, _stream_response, True),
}


class Admission(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Every defense of every call (see the module's docstring), in one interceptor.

    Args:
        services: the full names of the services the server serves (the others'
            methods are ``UNIMPLEMENTED``); read at each call, so the server fills it
            while it registers them.
        streams: the places of unauthenticated streams.
        drain: the application's drain; ``None``: calls are never refused nor counted.
    """

    def __init__(
        self, services: Collection[str], streams: AnonymousStreams, drain: Drain | None = None
    ) -> None:
        self.services = services
        self.streams = streams
        self.drain = drain
        #: id of a handler -> (that handler, its wrapped handler); the handler is kept so
        #: that its id names it as long as the entry lives.
        self._wrapped: dict[int, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method: str = handler_call_details.method
        service, _, name = method.lstrip("/").partition("/")
        if service not in self.services:
            return None  # UNIMPLEMENTED: nothing is served around the admission
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        metadata = handler_call_details.invocation_metadata or ()
        given: str | None = None
        traceparent: str | None = None
        authorized = False
        for key, value in metadata:
            if key == HEADER and isinstance(value, str):
                given = value
            elif key == "traceparent" and isinstance(value, str):
                traceparent = value
            elif key == "authorization":
                authorized = True
        refusal: errors.GatewayError | None = None
        try:
            refuse_impersonation((key for key, _ in metadata), "gRPC metadata key")
        except errors.GatewayError as exc:
            refusal = exc
        else:
            refusal = cluster_name_refusal(metadata)
        # Health checks answer while draining; reflection (the one stream-stream method)
        # too.
        gated = self.drain is not None and handler.stream_stream is None and service != _HEALTH
        streaming = handler.request_streaming or handler.response_streaming
        unauthenticated = not authorized or service in UNCHECKED_SERVICES
        call = _Call(
            AccessRecord(
                request_id=request_id_of(given, traceparent),
                transport="grpc",
                method="POST",
                path=method,
                operation=f"{service.rsplit('.', 1)[-1]}.{name}",
                traceparent=traceparent,
            ),
            refusal,
            self.drain if gated else None,
            self.streams if streaming and unauthenticated else None,
        )
        _CALL.set(call)
        return self._wrap(handler, service)

    def _wrap(self, handler: grpc.RpcMethodHandler, service: str) -> grpc.RpcMethodHandler:
        """``handler`` behind the admission's wrapper (built once per handler)."""
        hit = self._wrapped.get(id(handler))
        if hit is not None and hit[0] is handler:
            return hit[1]
        deserialize = handler.request_deserializer
        if deserialize is not None:
            limit = UNCHECKED_REQUEST_BYTES if service in UNCHECKED_SERVICES else None
            deserialize = _safe(deserialize, limit)
        wrapped = handler
        for attribute, (make, wrap, streamed) in _KINDS.items():
            behavior = getattr(handler, attribute)
            if behavior is not None:
                wrapped = make(
                    wrap(behavior, streamed),
                    request_deserializer=deserialize,
                    response_serializer=handler.response_serializer,
                )
                break
        if len(self._wrapped) >= _WRAPPED_MAX:
            self._wrapped.clear()
        self._wrapped[id(handler)] = (handler, wrapped)
        return wrapped

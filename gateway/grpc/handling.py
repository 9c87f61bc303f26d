"""What every gRPC resource service shares: call plumbing, request options, the Watch loop.

Two kinds of service serve the operations table (:mod:`gateway.core.calls.operations`): the typed
services (``PodService``..., :mod:`gateway.grpc.servicer`), whose every method is one fixed
operation, and the generic ``ResourceService`` (:mod:`gateway.grpc.resource_service`), which
resolves the resource of each call.  Both are a :class:`ServicerBase`: it registers the
methods, resolves the call's :class:`~gateway.core.calls.operations.Operation`, counts and times it
(:meth:`~gateway.core.process.metrics.Metrics.operation`, transport ``grpc``), reads the caller's
credential and deadline, and turns every failure into a status (:mod:`gateway.grpc.status`).
The request envelopes of both share their option field names (``label_selector``,
``dry_run``, ``options``...), so one set of functions here turns any of them into the core's
option records, and one Watch loop (:func:`watch_stream`) serves both.
"""

from __future__ import annotations

import abc
import asyncio
import functools
import logging
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Hashable,
    Iterable,
)
from contextlib import AbstractContextManager, aclosing
from typing import Any, Final, NoReturn

import grpc

from gateway.core import (
    JSON,
    Call,
    Credential,
    DeleteOptions,
    Digest,
    Drain,
    FleetStream,
    HubEvent,
    KubeAdapter,
    ListOptions,
    Operation,
    PatchOptions,
    PatchType,
    Preconditions,
    WatchHub,
    WatchSubscription,
    WriteOptions,
    errors,
    open_stream,
)
from gateway.grpc.calls import Deadline, credential_of, timeout_of
from gateway.grpc.status import internal_status, to_status

__all__ = [
    "Handler",
    "OpenStreams",
    "ServicerBase",
    "core_call",
    "delete_options",
    "invalid",
    "list_options",
    "opt",
    "patch_document",
    "patch_options",
    "pump",
    "watch_call",
    "watch_deadline",
    "watch_stream",
    "write_options",
]

log = logging.getLogger(__name__)

_PATCH_TYPES: Final = {
    1: PatchType.JSON,
    2: PatchType.MERGE,
    3: PatchType.STRATEGIC_MERGE,
    4: PatchType.APPLY,
}

Handler = Callable[[Any, grpc.aio.ServicerContext], Any]


class OpenStreams:
    """The core streams (watches, followed logs) one cluster's gRPC calls hold open.

    A cluster removed from the gateway's fleet (or replaced by a new configuration) ends
    them: :meth:`end` records why and ends each stream, and every call still reading or
    about to open one of this cluster's streams fails with that error (the cluster's
    ``ServicerBase._streaming`` raises it when its stream ran out), so a caller never
    mistakes the end for a clean completion.
    """

    __slots__ = ("_enders", "ended")

    def __init__(self) -> None:
        self._enders: set[Callable[[errors.GatewayError], None]] = set()
        #: Why this cluster's streams are over (``None``: they are served).
        self.ended: errors.GatewayError | None = None

    def hold(self, end: Callable[[errors.GatewayError], None]) -> None:
        """Keep ``end`` (which ends one open stream) until :meth:`release`.

        Raises:
            GatewayError: the cluster's streams were already ended.
        """
        if self.ended is not None:
            raise self.ended
        self._enders.add(end)

    def release(self, end: Callable[[errors.GatewayError], None]) -> None:
        """The stream ``end`` ends is over."""
        self._enders.discard(end)

    def end(self, error: errors.GatewayError) -> None:
        """End every open stream with ``error``, and every one opened from now on."""
        self.ended = error
        for end in list(self._enders):
            end(error)

    def __len__(self) -> int:
        return len(self._enders)


def _serialize(response: Any) -> bytes:
    return response if response.__class__ is bytes else bytes(response.SerializeToString())


def invalid(field: str, message: str, reason: str = "FieldValueInvalid") -> errors.InvalidParameter:
    """A request field the gateway refuses before any call (``INVALID_ARGUMENT``)."""
    return errors.InvalidParameter(message, causes=(errors.Cause(reason, message, field),))


async def _abort(context: grpc.aio.ServicerContext, error: BaseException) -> NoReturn:
    if isinstance(error, errors.GatewayError):
        await context.abort_with_status(to_status(error))
    log.error("unexpected failure in a gRPC call", exc_info=error)
    await context.abort_with_status(internal_status())
    raise AssertionError("unreachable")  # abort_with_status raises


def opt(request: Any, field: str) -> Any:
    """An ``optional`` field's value, or ``None`` when unset."""
    return getattr(request, field) if request.HasField(field) else None


# -- request envelopes -> core option records ---------------------------------------------------


def write_options(request: Any) -> WriteOptions:
    return WriteOptions(
        dry_run=request.dry_run,
        field_manager=request.field_manager or None,
        field_validation=request.field_validation or None,
    )


def list_options(request: Any) -> ListOptions:
    return ListOptions(
        label_selector=request.label_selector or None,
        field_selector=request.field_selector or None,
        limit=request.limit or None,
        continue_=getattr(request, "continue") or None,
        resource_version=request.resource_version or None,
        resource_version_match=request.resource_version_match or None,
        timeout_seconds=request.timeout_seconds or None,
    )


def delete_options(request: Any) -> DeleteOptions:
    if not request.HasField("options"):
        return DeleteOptions()
    o = request.options
    dry_run = list(o.dryRun)
    if any(v != "All" for v in dry_run):
        raise invalid(
            "options.dryRun",
            f'Unsupported value: {dry_run!r}: supported values: "All"',
            "FieldValueNotSupported",
        )
    preconditions = None
    if o.HasField("preconditions"):
        p = o.preconditions
        preconditions = Preconditions(uid=opt(p, "uid"), resource_version=opt(p, "resourceVersion"))
    return DeleteOptions(
        grace_period_seconds=opt(o, "gracePeriodSeconds"),
        propagation_policy=opt(o, "propagationPolicy"),
        orphan_dependents=opt(o, "orphanDependents"),
        preconditions=preconditions,
        dry_run=bool(dry_run),
    )


def patch_options(request: Any) -> PatchOptions:
    patch_type = _PATCH_TYPES.get(request.patch_type)
    if patch_type is None:
        raise invalid(
            "patch_type",
            "patch_type is required (JSON, MERGE, STRATEGIC_MERGE or APPLY)",
            "FieldValueRequired",
        )
    return PatchOptions(patch_type, force=opt(request, "force"))


def patch_document(request: Any) -> bytes:
    if not request.patch:
        raise invalid("patch", "patch is required", "FieldValueRequired")
    return bytes(request.patch)


def core_call(
    op: Operation, request: Any, *, namespace: str | None, body: Callable[[], Any]
) -> Call:
    """The core :class:`Call` of a unary request: only the fields its operation takes.

    ``body`` reads the object of a create or replace (each service carries it its own way).
    """
    takes = op.spec.options
    patch = patch_options(request) if "patch" in takes else None
    payload: Any = None
    if op.action in ("create", "replace"):
        payload = body()
    elif op.action == "patch":
        payload = patch_document(request)
    return Call(
        namespace=namespace,
        name=getattr(request, "name", ""),
        body=payload,
        list=list_options(request) if "list" in takes else ListOptions(),
        write=write_options(request) if "write" in takes else WriteOptions(),
        patch=patch,
        delete=delete_options(request) if "delete" in takes else DeleteOptions(),
    )


# -- Watch ------------------------------------------------------------------------------------


def watch_call(request: Any, *, namespace: str | None, resource_version: str | None) -> Call:
    """The core :class:`Call` of a ``Watch`` request, starting after ``resource_version``
    (a fleet watch's is each cluster's own)."""
    return Call(
        namespace=namespace,
        list=ListOptions(
            label_selector=request.label_selector or None,
            field_selector=request.field_selector or None,
            resource_version=resource_version or None,
            resource_version_match=request.resource_version_match or None,
            send_initial_events=opt(request, "send_initial_events"),
            allow_watch_bookmarks=request.allow_watch_bookmarks or None,
            timeout_seconds=request.timeout_seconds or None,
        ),
        changed_only=bool(getattr(request, "changed_fields_only", False)),
    )


def watch_deadline(request: Any) -> float | None:
    """When a ``Watch`` ends cleanly (its ``timeout_seconds``), on the loop's clock."""
    if request.timeout_seconds > 0:
        return float(asyncio.get_running_loop().time() + request.timeout_seconds)
    return None


def watch_stream(
    adapter: KubeAdapter,
    watches: WatchHub,
    op: Operation,
    request: Any,
    *,
    namespace: str | None,
    credential: Credential,
    key: Hashable,
    encode: Callable[[HubEvent], bytes],
    digest_of: Callable[[JSON], Digest],
    opened: OpenStreams,
) -> AsyncGenerator[bytes, None]:
    """A ``Watch`` request's events, through the core's stream entry point, each encoded by
    ``encode``.

    The start (snapshot, now, resume, streaming list) is :meth:`WatchStart.from_options`;
    the stream survives upstream closes and relists (watch rules of
    docs/watch-semantics.md, all in the hub) and ends cleanly after ``timeout_seconds``;
    ``opened`` ends it with the error the cluster's streams end with (the cluster left the
    gateway).  ``key``, ``encode`` and ``digest_of``: see :func:`pump`, which opens the
    subscription when first iterated and serves it (no generator of its own stacked on it:
    one frame fewer per idle stream).
    """
    call = watch_call(request, namespace=namespace, resource_version=request.resource_version)
    return pump(
        functools.partial(open_stream, adapter, watches, op, call, credential=credential),
        watch_deadline(request),
        key,
        encode,
        digest_of,
        opened=opened,
    )


def _digested(digest_of: Callable[[JSON], Digest], event: Any) -> Digest:
    return digest_of(event.object)


async def pump(
    source: WatchSubscription | FleetStream | Callable[[], Awaitable[Any]],
    deadline: float | None,
    key: Hashable,
    encode: Callable[[Any], bytes],
    digest_of: Callable[[JSON], Digest],
    *,
    message: Callable[[Any], bytes] | None = None,
    opened: OpenStreams | None = None,
) -> AsyncGenerator[bytes, None]:
    """The messages of a watch's events (one cluster's subscription or a fleet's merged
    stream) until it ends or ``deadline`` passes (then cleanly, as upstream's do).

    With ``opened``, ``source`` is what opens one cluster's :class:`WatchSubscription`
    (awaited when the pump is first iterated), and the pump owns it: held in ``opened`` (so
    the cluster's removal ends it) and closed when the pump ends.

    With the request's ``changed_fields_only``, a MODIFIED event whose object digests
    (``digest_of``: what this stream sends of it) as the previous one of that object is
    withheld (watch rule 31, compared by the subscription's :class:`StreamChanges`); the
    digest is computed once per event and key.  ``key`` names the encoding (message type,
    read mask, representation): every subscriber of one upstream watch with the same key
    shares one encoding of each event.  ``message`` (a fleet's: the cluster's encoding plus
    the event's cluster) makes each message instead, when given.
    """
    if opened is not None:
        assert callable(source)
        source = await source()
        assert isinstance(source, WatchSubscription)
    assert not callable(source)
    try:
        if opened is not None:
            assert isinstance(source, WatchSubscription)
            opened.hold(source.end)
        changes = source.changes
        digest_key = ("digest", key)
        digested = functools.partial(_digested, digest_of) if changes is not None else None
        while True:
            # Events already queued go out without a timer; only waiting is timed.
            event: Any = source.next_nowait()
            if event is None:
                if deadline is None:  # no timer to hold while waiting
                    event = await source.next()
                else:
                    try:
                        async with asyncio.timeout_at(deadline):
                            event = await source.next()
                    except TimeoutError:
                        return  # timeout_seconds: the stream ends cleanly, as upstream's do
                if event is None:
                    return
            if changes is not None and not await changes.admit(
                event,
                # Digested once per event and key for every stream that asks.
                functools.partial(event.encoded, digest_key, digested),
                digest_of,
            ):
                continue  # nothing this stream sends of the object changed (watch rule 31)
            # Encoded once per event and key for every subscriber.
            yield event.encoded(key, encode) if message is None else message(event)
    finally:
        if opened is not None:
            assert isinstance(source, WatchSubscription)
            opened.release(source.end)
            source.close()


#: A unary response this large is sent uncompressed even to a client that accepts gzip:
#: grpc core compresses a message whole, on the event loop's thread, ~6 ms per MB (a
#: 5,000-pod list: ~100 ms during which no other caller is served).
UNCOMPRESSED_BYTES: Final = 1 << 20
#: A unary response smaller than this is sent uncompressed too: it fits one HTTP/2 DATA
#: frame (16 KiB, the protocol's default frame size) either way, so gzip would save bytes but
#: no frame, at ~25-30 µs of the event loop's CPU per KB (a list of 10 pods, 9.2 KB: ~0.24
#: ms, a fifth of the call's CPU; docs/performance.md "Per-request cost").
COMPRESSED_FROM_BYTES: Final = 16 * 1024


# -- the servicer plumbing ----------------------------------------------------------------------


class ServicerBase(abc.ABC):
    """One grpc.aio service over the core: methods, operation resolution, metrics, statuses.

    Args:
        adapter: the shared upstream adapter (its metrics count every call).
        watches: the core's watch hub (``Watch`` joins it).
        drain: ends followed streams when the gateway drains (watches end through the hub).
        opened: the open streams of the cluster served (ended when it leaves the fleet).
    """

    #: The service's full name (``kubegateway.v1.PodService``).
    full_name: str

    def __init__(
        self,
        adapter: KubeAdapter,
        watches: WatchHub,
        drain: Drain | None = None,
        opened: OpenStreams | None = None,
    ) -> None:
        self.adapter = adapter
        self.watches = watches
        self.drain = drain or Drain()
        self.opened = opened if opened is not None else OpenStreams()

    @abc.abstractmethod
    def methods(self) -> Iterable[tuple[str, Any, bool]]:
        """``(method name, request message class, server streaming)`` of every method."""

    @abc.abstractmethod
    def operation(self, method: str, request: Any) -> Operation:
        """The operation a request asks for.

        Raises:
            GatewayError: it names none (an unknown resource, no resource at all).
        """

    @abc.abstractmethod
    def admit(self, op: Operation, request: Any) -> None:
        """Refuse, before any upstream call, what ``op`` cannot do for ``request`` (counted
        as ``op``).

        Raises:
            GatewayError: refused (a verb or subresource the resource does not serve).
        """

    def metric_name(self, method: str, op: Operation) -> str:
        """What the metrics and traces call a call of ``method`` (its operation's name)."""
        return op.name

    @abc.abstractmethod
    def unresolved(self, method: str) -> Operation:
        """The operation a call is counted as when :meth:`operation` refused it."""

    @abc.abstractmethod
    async def answer(
        self,
        method: str,
        op: Operation,
        request: Any,
        credential: Credential,
        timeout: float | None,
    ) -> bytes:
        """The response bytes of a unary call."""

    @abc.abstractmethod
    def stream(
        self, method: str, op: Operation, request: Any, credential: Credential
    ) -> AsyncGenerator[bytes, None]:
        """The response messages of a server-streaming call."""

    def method_handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        """The handler of every method of the service, by method name."""
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for name, request_cls, streaming in self.methods():
            make = (
                grpc.unary_stream_rpc_method_handler
                if streaming
                else grpc.unary_unary_rpc_method_handler
            )
            handlers[name] = make(
                self._streaming(name) if streaming else self._unary(name),
                # parsed by the admission, which refuses what does not parse
                request_deserializer=request_cls.FromString,
                response_serializer=_serialize,
            )
        return handlers

    def _resolved(self, method: str, request: Any) -> tuple[Operation, Exception | None]:
        """The call's operation, or the one it is counted as when refused and why."""
        try:
            return self.operation(method, request), None
        except Exception as exc:  # counted as a refusal of the unresolved operation
            return self.unresolved(method), exc

    def _unary(self, method: str) -> Handler:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> bytes:
            try:
                with _Served(self, method, request) as op:
                    identified = self.adapter.identity.identified
                    credential = await identified(credential_of(context.invocation_metadata()))
                    timeout = timeout_of(context.time_remaining())
                    deadline = Deadline(timeout) if timeout is not None else None
                    try:
                        data = await self.answer(method, op, request, credential, timeout)
                    except BaseException as exc:
                        passed = deadline.end(exc) if deadline is not None else False
                        if passed or isinstance(exc, TimeoutError):
                            raise errors.Timeout("the call's deadline passed") from None
                        raise
                    if deadline is not None:
                        deadline.end()
                    if not COMPRESSED_FROM_BYTES <= len(data) < UNCOMPRESSED_BYTES:
                        context.disable_next_message_compression()
                    return data
            except Exception as exc:  # CancelledError is not an Exception: it propagates
                await _abort(context, exc)

        call.__name__ = f"{self.full_name}.{method}"
        return call

    def _streaming(self, method: str) -> Handler:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> None:
            # The messages are written here (the admission's context counts them): no
            # generator of this call's own between the stream and grpc, and no generator
            # context manager held for the stream's whole life (an idle Watch keeps fewer
            # frames).
            failure: Exception | None = None
            try:
                with _Served(self, method, request) as op:
                    identified = self.adapter.identity.identified
                    credential = await identified(credential_of(context.invocation_metadata()))
                    write = context.write
                    async with aclosing(self.stream(method, op, request, credential)) as stream:
                        async for message in stream:
                            await write(message)
                            del message  # not held while waiting for the next one
                    if self.opened.ended is not None:
                        # a followed log ended by the cluster's removal ends cleanly
                        raise self.opened.ended
            except Exception as exc:  # CancelledError is not an Exception: it propagates
                failure = exc
            if failure is not None:
                await _abort(context, failure)

        call.__name__ = f"{self.full_name}.{method}"
        return call


class _Served:
    """``with _Served(servicer, method, request) as op``: the call counted and timed as its
    operation (a refused one as the servicer's ``unresolved``), refused or admitted on
    entering.  A class, not a generator: a unary call enters one each (no generator and
    context manager objects), a stream holds it for its whole life (no frame kept)."""

    __slots__ = ("_method", "_request", "_servicer", "_timer")

    def __init__(self, servicer: ServicerBase, method: str, request: Any) -> None:
        self._servicer: ServicerBase | None = servicer
        self._method = method
        self._request = request
        self._timer: AbstractContextManager[None] | None = None

    def __enter__(self) -> Operation:
        servicer, request = self._servicer, self._request
        assert servicer is not None
        self._servicer = self._request = None
        # Resolved here, not in __init__: a refusal's traceback then holds only frames the
        # admission clears (a finished frame of __init__ would keep the request).
        op, refused = servicer._resolved(self._method, request)
        timer = self._timer = servicer.adapter.metrics.operation(
            "grpc", servicer.metric_name(self._method, op), op.resource.key
        )
        timer.__enter__()
        try:
            if refused is not None:
                raise refused
            servicer.admit(op, request)
        except BaseException as exc:
            timer.__exit__(type(exc), exc, exc.__traceback__)
            raise
        finally:  # its traceback holds this frame: no cycle through the local
            refused = None
        return op

    def __exit__(self, kind: Any, failure: BaseException | None, traceback: Any) -> None:
        assert self._timer is not None
        self._timer.__exit__(kind, failure, traceback)

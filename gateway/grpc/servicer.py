"""One generic servicer, parameterised by a registry resource: convert, delegate, convert back.

:func:`resource_handler` turns a :class:`~gateway.grpc.contract.Service` into a grpc.aio
generic handler.  Every RPC is an operation of the core's table
(:mod:`gateway.core.operations`): a unary request becomes a core
:class:`~gateway.core.operations.Call` run by :func:`~gateway.core.operations.perform`; a
``Watch`` subscribes to the core :class:`~gateway.core.hub.WatchHub`; a followed log reads
the core :class:`~gateway.core.logfollow.LogFollower`.  The codec turns the decoded answer
into wire bytes; errors go through :mod:`gateway.grpc.status`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, Final, NoReturn

import grpc
import orjson
from google.protobuf.message import DecodeError

from gateway.core import errors, gcpause, slicedjson
from gateway.core.adapter import Credential, KubeAdapter
from gateway.core.drain import Drain
from gateway.core.hub import WatchHub, WatchStart, WatchTarget
from gateway.core.logfollow import LogFollower
from gateway.core.operations import Call, perform
from gateway.core.options import (
    DeleteOptions,
    ListOptions,
    LogOptions,
    PatchOptions,
    PatchType,
    Preconditions,
    WriteOptions,
)
from gateway.core.registry import Resource
from gateway.grpc import mask as masks
from gateway.grpc.calls import credential_of, timeout_of
from gateway.grpc.codec import Codec, codec
from gateway.grpc.contract import Rpc, Service
from gateway.grpc.messages import message_class
from gateway.grpc.status import internal_status, to_status
from gateway.grpc.wire import field_tag, length_prefixed

__all__ = ["ResourceServicer", "resource_handler"]

log = logging.getLogger(__name__)

#: Log bytes per LogChunk when the whole log is read at once.
LOG_CHUNK_BYTES: Final = 64 * 1024
#: A unary response this large is sent uncompressed even to a client that accepts gzip:
#: grpc core compresses a message whole, on the event loop's thread, ~6 ms per MB (a
#: 5,000-pod list: ~100 ms during which no other caller is served).
UNCOMPRESSED_BYTES: Final = 1 << 20

_PATCH_TYPES: Final = {
    1: PatchType.JSON,
    2: PatchType.MERGE,
    3: PatchType.STRATEGIC_MERGE,
    4: PatchType.APPLY,
}

Handler = Callable[[Any, grpc.aio.ServicerContext], Any]


class _Undecodable:
    """What a request that is not a valid message deserialises to (refused as INVALID_ARGUMENT)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _deserializer(cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except DecodeError:
            return _Undecodable(f"the request is not a valid {cls.DESCRIPTOR.full_name}")

    return parse


def _serialize(response: Any) -> bytes:
    return response if response.__class__ is bytes else bytes(response.SerializeToString())


def _invalid(
    field: str, message: str, reason: str = "FieldValueInvalid"
) -> errors.InvalidParameter:
    return errors.InvalidParameter(message, causes=(errors.Cause(reason, message, field),))


async def _abort(context: grpc.aio.ServicerContext, error: BaseException) -> NoReturn:
    if isinstance(error, errors.GatewayError):
        await context.abort_with_status(to_status(error))
    log.error("unexpected failure in a gRPC call", exc_info=error)
    await context.abort_with_status(internal_status())
    raise AssertionError("unreachable")  # abort_with_status raises


def _opt(request: Any, field: str) -> Any:
    """An ``optional`` field's value, or ``None`` when unset."""
    return getattr(request, field) if request.HasField(field) else None


class ResourceServicer:
    """Serves one resource's service (``kubegateway.v1.PodService``...) over the core.

    Args:
        adapter: the shared upstream adapter.
        hub: the shared watches (``Watch`` joins them).
        service: the contract service (its resource and RPCs).
        conversions: the dict <-> message codec.
        drain: ends followed logs when the gateway drains (watches end through the hub).
    """

    def __init__(
        self,
        adapter: KubeAdapter,
        hub: WatchHub,
        service: Service,
        conversions: Codec,
        drain: Drain | None = None,
    ) -> None:
        self.drain = drain or Drain()
        self.adapter = adapter
        self.hub = hub
        self.service = service
        self.resource: Resource = service.resource
        self.codec = conversions
        self.kind = service.resource.kind
        self._object_message = conversions.contract.kinds[self.kind][0]

    # -- plumbing ------------------------------------------------------------------------------

    def handler(self) -> grpc.GenericRpcHandler:
        """The generic handler serving every RPC of the service."""
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for rpc in self.service.rpcs:
            request_cls = message_class(rpc.request, self.codec.contract)
            if rpc.streaming:
                handlers[rpc.name] = grpc.unary_stream_rpc_method_handler(
                    self._streaming(rpc),
                    request_deserializer=_deserializer(request_cls),
                    response_serializer=_serialize,
                )
            else:
                handlers[rpc.name] = grpc.unary_unary_rpc_method_handler(
                    self._unary(rpc),
                    request_deserializer=_deserializer(request_cls),
                    response_serializer=_serialize,
                )
        return grpc.method_handlers_generic_handler(self.service.full_name, handlers)

    def _unary(self, rpc: Rpc) -> Handler:
        async def call(request: Any, context: grpc.aio.ServicerContext) -> bytes:
            try:
                with self.adapter.metrics.operation("grpc", rpc.operation):
                    if isinstance(request, _Undecodable):
                        raise errors.BadRequest(request.reason)
                    credential = credential_of(context.invocation_metadata())
                    timeout = timeout_of(context.time_remaining())
                    try:
                        async with asyncio.timeout(timeout):
                            data = await self._perform(rpc, request, credential, timeout)
                    except TimeoutError:
                        raise errors.Timeout("the call's deadline passed") from None
                    if len(data) >= UNCOMPRESSED_BYTES:
                        context.disable_next_message_compression()
                    return data
            except Exception as exc:  # CancelledError is not an Exception: it propagates
                await _abort(context, exc)

        call.__name__ = f"{self.service.name}.{rpc.name}"
        return call

    def _streaming(self, rpc: Rpc) -> Handler:
        action: Callable[[Rpc, Any, Credential], AsyncGenerator[bytes, None]] = getattr(
            self, f"_{rpc.action}"
        )

        async def call(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            failure: Exception | None = None
            try:
                with self.adapter.metrics.operation("grpc", rpc.operation):
                    if isinstance(request, _Undecodable):
                        raise errors.BadRequest(request.reason)
                    credential = credential_of(context.invocation_metadata())
                    async with aclosing(action(rpc, request, credential)) as stream:
                        async for message in stream:
                            yield message
            except Exception as exc:  # CancelledError is not an Exception: it propagates
                failure = exc
            if failure is not None:
                await _abort(context, failure)

        call.__name__ = f"{self.service.name}.{rpc.name}"
        return call

    # -- request -> core ---------------------------------------------------------------------

    def _given_namespace(self, request: Any) -> str | None:
        """The namespace the caller sent (cluster-scoped requests have no such field)."""
        return request.namespace if self.resource.namespaced else None

    def _mask(self, request: Any) -> masks.Tree | None:
        if not request.HasField("read_mask"):
            return None
        return masks.parse(list(request.read_mask.paths), self._object_message, self.codec.contract)

    @staticmethod
    def _write(request: Any) -> WriteOptions:
        return WriteOptions(
            dry_run=request.dry_run,
            field_manager=request.field_manager or None,
            field_validation=request.field_validation or None,
        )

    @staticmethod
    def _list_options(request: Any) -> ListOptions:
        return ListOptions(
            label_selector=request.label_selector or None,
            field_selector=request.field_selector or None,
            limit=request.limit or None,
            continue_=getattr(request, "continue") or None,
            resource_version=request.resource_version or None,
            resource_version_match=request.resource_version_match or None,
            timeout_seconds=request.timeout_seconds or None,
        )

    def _body(self, request: Any) -> dict[str, Any]:
        which = request.WhichOneof("body")
        if which == "object":
            return self.codec.to_json(request.object)
        if which == "raw_json":
            try:
                body = orjson.loads(request.raw_json)
            except orjson.JSONDecodeError:
                raise _invalid("raw_json", "raw_json is not valid JSON") from None
            if not isinstance(body, dict):
                raise _invalid("raw_json", "raw_json must be a JSON object")
            return body
        raise _invalid("body", "one of object or raw_json is required", "FieldValueRequired")

    @staticmethod
    def _delete_options(request: Any) -> DeleteOptions:
        if not request.HasField("options"):
            return DeleteOptions()
        o = request.options
        dry_run = list(o.dryRun)
        if any(v != "All" for v in dry_run):
            raise _invalid(
                "options.dryRun",
                f'Unsupported value: {dry_run!r}: supported values: "All"',
                "FieldValueNotSupported",
            )
        preconditions = None
        if o.HasField("preconditions"):
            p = o.preconditions
            preconditions = Preconditions(
                uid=_opt(p, "uid"), resource_version=_opt(p, "resourceVersion")
            )
        return DeleteOptions(
            grace_period_seconds=_opt(o, "gracePeriodSeconds"),
            propagation_policy=_opt(o, "propagationPolicy"),
            orphan_dependents=_opt(o, "orphanDependents"),
            preconditions=preconditions,
            dry_run=bool(dry_run),
        )

    # -- actions -----------------------------------------------------------------------------

    def _call(self, rpc: Rpc, request: Any) -> Call:
        """The core :class:`Call` of a request: only the fields its operation takes."""
        takes = rpc.operation.spec.options
        patch = self._patch_options(request) if "patch" in takes else None
        body: Any = None
        if rpc.action in ("create", "replace"):
            body = self._body(request)
        elif rpc.action == "patch":
            body = self._patch_document(request)
        return Call(
            namespace=self._given_namespace(request),
            name=getattr(request, "name", ""),
            body=body,
            list=self._list_options(request) if "list" in takes else ListOptions(),
            write=self._write(request) if "write" in takes else WriteOptions(),
            patch=patch,
            delete=self._delete_options(request) if "delete" in takes else DeleteOptions(),
        )

    async def _perform(
        self, rpc: Rpc, request: Any, credential: Credential, timeout: float | None
    ) -> bytes:
        mask = self._mask(request) if rpc.action in ("get", "list") else None
        if rpc.action == "list":
            return await self._list(rpc, request, credential, timeout, mask)
        answer = await perform(
            self.adapter,
            rpc.operation,
            self._call(rpc, request),
            credential=credential,
            timeout=timeout,
        )
        if rpc.action == "delete":
            return self._object_or_status(
                rpc, answer, "object", lambda d: self.codec.object_bytes(self.kind, d)
            )
        if rpc.action == "deletecollection":
            return self._object_or_status(
                rpc, answer, "list", lambda d: self.codec.list_bytes(self.kind, d)
            )
        return self.codec.object_bytes(self.kind, answer, mask)

    async def _list(
        self,
        rpc: Rpc,
        request: Any,
        credential: Credential,
        timeout: float | None,
        mask: masks.Tree | None,
    ) -> bytes:
        """A list's wire bytes; a large one never holds the event loop for long.

        The adapter decodes it in slices, the codec encodes it in slices, and it is freed in
        slices; the cyclic GC stays off from its decode until it is freed
        (:func:`gateway.core.gcpause.scope`).
        """
        with gcpause.scope():
            answer = await perform(
                self.adapter,
                rpc.operation,
                self._call(rpc, request),
                credential=credential,
                timeout=timeout,
            )
            data = await self.codec.list_bytes_async(self.kind, answer, mask)
            await slicedjson.release(answer)
        return data

    @staticmethod
    def _patch_options(request: Any) -> PatchOptions:
        patch_type = _PATCH_TYPES.get(request.patch_type)
        if patch_type is None:
            raise _invalid(
                "patch_type",
                "patch_type is required (JSON, MERGE, STRATEGIC_MERGE or APPLY)",
                "FieldValueRequired",
            )
        return PatchOptions(patch_type, force=_opt(request, "force"))

    @staticmethod
    def _patch_document(request: Any) -> bytes:
        if not request.patch:
            raise _invalid("patch", "patch is required", "FieldValueRequired")
        return bytes(request.patch)

    def _object_or_status(
        self,
        rpc: Rpc,
        answer: dict[str, Any],
        member: str,
        encode: Callable[[dict[str, Any]], bytes],
    ) -> bytes:
        response = message_class(rpc.response, self.codec.contract)
        fields = response.DESCRIPTOR.fields_by_name
        if answer.get("kind") == "Status":
            return bytes(response(status=self.codec.message("Status", answer)).SerializeToString())
        return length_prefixed(field_tag(fields[member].number), encode(answer))

    async def _watch(
        self, rpc: Rpc, request: Any, credential: Credential
    ) -> AsyncGenerator[bytes, None]:
        mask = self._mask(request)
        mask_key = tuple(request.read_mask.paths) if mask is not None else None
        options = ListOptions(
            label_selector=request.label_selector or None,
            field_selector=request.field_selector or None,
            resource_version=request.resource_version or None,
            resource_version_match=request.resource_version_match or None,
            send_initial_events=_opt(request, "send_initial_events"),
            allow_watch_bookmarks=request.allow_watch_bookmarks or None,
            timeout_seconds=request.timeout_seconds or None,
        )
        start = WatchStart.from_options(options)
        if options.timeout_seconds is not None and options.timeout_seconds > 0:
            deadline: float | None = asyncio.get_running_loop().time() + options.timeout_seconds
        else:
            deadline = None
        target = WatchTarget(
            self.resource,
            rpc.operation.namespace(self._given_namespace(request)),
            options.label_selector,
            options.field_selector,
        )
        kind = self.kind

        def encode(event: Any) -> bytes:
            return self.codec.watch_event_bytes(kind, event, mask)

        sub = await self.hub.subscribe(target, start, credential)
        try:
            while True:
                # Events already queued go out without a timer; only waiting is timed.
                event = sub.next_nowait()
                if event is None:
                    try:
                        async with asyncio.timeout_at(deadline):
                            event = await sub.next()
                    except TimeoutError:
                        return  # timeout_seconds: the stream ends cleanly, as upstream's do
                    if event is None:
                        return
                # Encoded once per event and read mask for every subscriber.
                yield event.encoded(mask_key, encode)
        finally:
            sub.close()

    async def _log(
        self, rpc: Rpc, request: Any, credential: Credential
    ) -> AsyncGenerator[bytes, None]:
        chunk = message_class("LogChunk", self.codec.contract)
        options = LogOptions(
            container=request.container or None,
            follow=request.follow,
            previous=request.previous,
            timestamps=request.timestamps,
            tail_lines=_opt(request, "tail_lines"),
            since_seconds=_opt(request, "since_seconds"),
            since_time=request.since_time or None,
            limit_bytes=_opt(request, "limit_bytes"),
            insecure_skip_tls_verify_backend=request.insecure_skip_tls_verify_backend,
        )
        namespace = rpc.operation.namespace(self._given_namespace(request))
        assert namespace is not None  # logs are of pods, which are namespaced
        if options.follow:
            # Resumes after upstream breaks without loss or duplicates; ends when the
            # container stops (gateway/core/logfollow.py, shared with GraphQL).
            follower = LogFollower(
                self.adapter,
                namespace=namespace,
                name=request.name,
                options=options,
                credential=credential,
            )
            # A drain ends it with UNAVAILABLE (no resume point: the caller follows again).
            async with aclosing(follower.lines()) as lines:
                async for line in self.drain.until_draining(lines):
                    data = line.data + b"\n"
                    if options.timestamps and line.stamp is not None:
                        data = line.stamp + b" " + data
                    yield chunk(data=data).SerializeToString()
            return
        data = await perform(
            self.adapter,
            rpc.operation,
            Call(namespace=namespace, name=request.name, log=options),
            credential=credential,
        )
        for start in range(0, len(data), LOG_CHUNK_BYTES):
            yield chunk(data=data[start : start + LOG_CHUNK_BYTES]).SerializeToString()


def resource_handler(
    adapter: KubeAdapter,
    hub: WatchHub,
    service: Service,
    conversions: Codec | None = None,
    drain: Drain | None = None,
) -> grpc.GenericRpcHandler:
    """The grpc.aio generic handler of one resource service."""
    return ResourceServicer(adapter, hub, service, conversions or codec(), drain).handler()

"""One generic servicer, parameterised by a registry resource: convert, delegate, convert back.

:class:`ResourceServicer` serves a :class:`~gateway.grpc.contract.Service` (its method
handlers, which the server's router registers per cluster).  Every RPC is an operation of
the core's table (:mod:`gateway.core.calls.operations`): a unary request becomes a core
:class:`~gateway.core.calls.operations.Call` run by
:func:`~gateway.core.calls.operations.perform`; a
``Watch`` and a followed ``GetLog`` open the core's stream
(:func:`~gateway.core.calls.streaming.open_stream`), as GraphQL's subscriptions do.  The codec
turns the decoded answer into wire bytes; the plumbing (metrics, credentials, deadlines,
statuses) and the request options are :mod:`gateway.grpc.handling`, shared with the
generic ``ResourceService``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Any, Final

import orjson

from gateway.core import (
    Call,
    Credential,
    Digest,
    Drain,
    KubeAdapter,
    LogOptions,
    Operation,
    ReadAhead,
    Resource,
    Undecoded,
    WatchHub,
    digest,
    errors,
    field_tag,
    get_body,
    length_prefixed,
    list_body,
    open_stream,
    perform,
)
from gateway.grpc import mask as masks
from gateway.grpc.codec import Codec
from gateway.grpc.contract import Rpc, Service
from gateway.grpc.handling import (
    OpenStreams,
    ServicerBase,
    core_call,
    invalid,
    opt,
    watch_stream,
)
from gateway.grpc.messages import message_class

__all__ = ["ResourceServicer"]

log = logging.getLogger(__name__)

#: Log bytes per LogChunk when the whole log is read at once.
LOG_CHUNK_BYTES: Final = 64 * 1024


#: A list body shorter than this is written from its bytes (:meth:`Codec.small_list`), well
#: under what the large-list scope decodes in slices or hands to a list worker (1 MiB).
SMALL_LIST_BYTES: Final = 256 * 1024

#: A get's body shorter than this is written from its bytes (:meth:`Codec.object_from_bytes`);
#: a larger one is decoded by the large-list scope (which lets the loop go between slices of
#: a body of 1 MiB or more) and written as before.  The memo keeps no object over 64 KiB.
SMALL_GET_BYTES: Final = 256 * 1024

#: Watch encodings (read masks) a servicer keeps at most; past that it starts again.
_ENCODINGS_MAX: Final = 256


class _WatchEncoding:
    """How a typed ``Watch`` encodes its events and digests its objects for one read mask."""

    __slots__ = ("_codec", "_kind", "_mask")

    def __init__(self, codec: Codec, kind: str, mask: masks.Tree | None) -> None:
        self._codec = codec
        self._kind = kind
        self._mask = mask

    def encode(self, event: Any) -> bytes:
        return self._codec.watch_event_bytes(self._kind, event, self._mask)

    def digest_of(self, obj: Any) -> Digest:
        return digest(self._codec.object_bytes(self._kind, obj, self._mask))


class ResourceServicer(ServicerBase):
    """Serves one resource's service (``kubegateway.v1.PodService``...) over the core.

    Args:
        adapter: the shared upstream adapter.
        watches: the core's watch hub (``Watch`` joins it).
        service: the contract service (its resource and RPCs).
        conversions: the dict <-> message codec.
        drain: ends followed logs when the gateway drains (watches end through the hub).
        opened: the open streams of the cluster served (ended when it leaves the fleet).
    """

    def __init__(
        self,
        adapter: KubeAdapter,
        watches: WatchHub,
        service: Service,
        conversions: Codec,
        drain: Drain | None = None,
        *,
        opened: OpenStreams | None = None,
    ) -> None:
        super().__init__(adapter, watches, drain, opened)
        self.service = service
        self.full_name = service.full_name
        self.resource: Resource = service.resource
        self.codec = conversions
        self.kind = service.resource.kind
        self._object_message = conversions.contract.kinds[self.kind][0]
        self._rpcs = {rpc.name: rpc for rpc in service.rpcs}
        #: read mask paths (``None``: no mask) -> a Watch's encoder and digest for them
        self._encodings: dict[
            tuple[str, ...] | None, tuple[Callable[[Any], bytes], Callable[[Any], Digest]]
        ] = {}

    # -- plumbing ------------------------------------------------------------------------------

    def methods(self) -> Iterable[tuple[str, Any, bool]]:
        for rpc in self.service.rpcs:
            yield rpc.name, message_class(rpc.request, self.codec.contract), rpc.streaming

    def operation(self, method: str, request: Any) -> Operation:
        return self._rpcs[method].operation

    def unresolved(self, method: str) -> Operation:
        return self._rpcs[method].operation

    def admit(self, op: Operation, request: Any) -> None:
        """Nothing to check: the contract has a method only for what the resource serves."""

    def stream(
        self, method: str, op: Operation, request: Any, credential: Credential
    ) -> AsyncGenerator[bytes, None]:
        rpc = self._rpcs[method]
        return (
            self._log(rpc, request, credential)
            if op.action == "log"
            else self._watch(rpc, request, credential)
        )

    # -- request -> core ---------------------------------------------------------------------

    def _given_namespace(self, request: Any) -> str | None:
        """The namespace the caller sent (cluster-scoped requests have no such field)."""
        return request.namespace if self.resource.namespaced else None

    def _mask(self, request: Any) -> masks.Tree | None:
        if not request.HasField("read_mask"):
            return None
        return masks.parse(list(request.read_mask.paths), self._object_message, self.codec.contract)

    def _body(self, request: Any) -> dict[str, Any]:
        which = request.WhichOneof("body")
        if which == "object":
            return self.codec.to_json(request.object)
        if which == "raw_json":
            try:
                body = orjson.loads(request.raw_json)
            except orjson.JSONDecodeError:
                raise invalid("raw_json", "raw_json is not valid JSON") from None
            if not isinstance(body, dict):
                raise invalid("raw_json", "raw_json must be a JSON object")
            return body
        raise invalid("body", "one of object or raw_json is required", "FieldValueRequired")

    # -- actions -----------------------------------------------------------------------------

    async def answer(
        self,
        method: str,
        op: Operation,
        request: Any,
        credential: Credential,
        timeout: float | None,
    ) -> bytes:
        rpc = self._rpcs[method]
        mask = self._mask(request) if rpc.action in ("get", "list") else None
        call = core_call(
            op, request, namespace=self._given_namespace(request), body=lambda: self._body(request)
        )
        if rpc.action == "list":
            return await self._list(request, op, call, credential, timeout=timeout, mask=mask)
        if rpc.action == "get":
            return await self._get(request, op, call, credential, timeout=timeout, mask=mask)
        answer = await perform(self.adapter, op, call, credential=credential, timeout=timeout)
        if rpc.action == "delete":
            return self._object_or_status(
                rpc, answer, "object", lambda d: self.codec.object_bytes(self.kind, d)
            )
        if rpc.action == "deletecollection":
            return self._object_or_status(
                rpc, answer, "list", lambda d: self.codec.list_bytes(self.kind, d)
            )
        return self.codec.object_bytes(self.kind, answer, mask)

    async def _get(
        self,
        request: Any,
        op: Operation,
        call: Call,
        credential: Credential,
        *,
        timeout: float | None,
        mask: masks.Tree | None,
    ) -> bytes:
        """A ``Get``'s answer, written from the body's bytes (:meth:`Codec.object_from_bytes`:
        an unchanged object from what was written before) when it is small; else, or when
        it is not surely a JSON object, decoded and written the ordinary way."""
        data = await get_body(self.adapter, op, call, credential=credential, timeout=timeout)
        if len(data) < SMALL_GET_BYTES:
            key = tuple(request.read_mask.paths) if mask is not None else None
            done = self.codec.object_from_bytes(self.kind, data, mask, key)
            if done is not None:
                return done
        return self.codec.object_bytes(self.kind, await self.adapter.object_of(data), mask)

    async def _list(
        self,
        request: Any,
        op: Operation,
        call: Call,
        credential: Credential,
        *,
        timeout: float | None,
        mask: masks.Tree | None,
    ) -> bytes:
        """A ``List``'s answer.  The body is fetched as the core's large-list scope would
        fetch it (kept gzipped for a list worker when there are workers); a small one is
        written from its bytes (:meth:`Codec.small_list`: its unchanged objects from what
        was written before), anything else is decoded, encoded and freed by the scope
        (:mod:`gateway.core.lists.large`), as before."""
        lists = self.adapter.large_lists
        body = await list_body(
            self.adapter, op, call, credential=credential, timeout=timeout, gzipped=lists.compacts
        )
        if body.feed is None and not body.gzipped and len(body.data) < SMALL_LIST_BYTES:
            key = tuple(request.read_mask.paths) if mask is not None else None
            done = self.codec.small_list(self.kind, body.data, mask, key, cap=body.cap)
            if done is not None:
                return done

        async def fetched(gzipped: bool) -> Undecoded:
            return body  # fetched above, as the scope asks (``gzipped`` is ``lists.compacts``)

        return await lists.answer(fetched, self.codec.list_encoding(self.kind, mask))

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

    def _watch(self, rpc: Rpc, request: Any, credential: Credential) -> AsyncGenerator[bytes, None]:
        key = tuple(request.read_mask.paths) if request.HasField("read_mask") else None
        encoding = self._encodings.get(key)
        if encoding is None:
            encoding = self._encoding(request)
        encode, digest_of = encoding
        return watch_stream(
            self.adapter,
            self.watches,
            rpc.operation,
            request,
            namespace=self._given_namespace(request),
            credential=credential,
            key=key,
            encode=encode,
            digest_of=digest_of,
            opened=self.opened,
        )

    def _encoding(self, request: Any) -> tuple[Callable[[Any], bytes], Callable[[Any], Digest]]:
        """A Watch's event encoder and object digest for the request's read mask, made once
        per read mask and shared by every stream that asks for it (an idle stream holds
        neither closure nor mask of its own).

        Raises:
            GatewayError: the read mask is not one of this kind's.
        """
        key = tuple(request.read_mask.paths) if request.HasField("read_mask") else None
        encoding = _WatchEncoding(self.codec, self.kind, self._mask(request))
        made = (encoding.encode, encoding.digest_of)
        if len(self._encodings) >= _ENCODINGS_MAX:
            self._encodings.clear()
        self._encodings[key] = made
        return made

    async def _log(
        self, rpc: Rpc, request: Any, credential: Credential
    ) -> AsyncGenerator[bytes, None]:
        chunk = message_class("LogChunk", self.codec.contract)
        options = LogOptions(
            container=request.container or None,
            follow=request.follow,
            previous=request.previous,
            timestamps=request.timestamps,
            tail_lines=opt(request, "tail_lines"),
            since_seconds=opt(request, "since_seconds"),
            since_time=request.since_time or None,
            limit_bytes=opt(request, "limit_bytes"),
            insecure_skip_tls_verify_backend=request.insecure_skip_tls_verify_backend,
        )
        namespace = rpc.operation.namespace(self._given_namespace(request))
        assert namespace is not None  # logs are of pods, which are namespaced
        call = Call(namespace=namespace, name=request.name, log=options)
        if options.follow:
            # Resumes after upstream breaks without loss or duplicates; ends when the
            # container stops (the core's stream, as GraphQL's followPodLog).
            lines = await open_stream(
                self.adapter, self.watches, rpc.operation, call, credential=credential
            )
            assert isinstance(lines, ReadAhead)

            def end(error: errors.GatewayError) -> None:
                lines.close()  # the servicer then fails the call with ``error``

            try:
                self.opened.hold(end)
                # A drain ends it with UNAVAILABLE (no resume point: the caller follows again).
                async for line in self.drain.until_draining(lines):
                    data = line.data + b"\n"
                    if line.timestamp is not None:
                        data = line.timestamp + b" " + data
                    yield chunk(data=data).SerializeToString()
            finally:
                self.opened.release(end)
                lines.close()
            return
        data = await perform(self.adapter, rpc.operation, call, credential=credential)
        for start in range(0, len(data), LOG_CHUNK_BYTES):
            yield chunk(data=data[start : start + LOG_CHUNK_BYTES]).SerializeToString()

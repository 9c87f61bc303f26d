"""The large-list scope: decoding, encoding and freeing a large list answer without holding
the event loop, with the cyclic garbage collector held off from the decode until it is freed.

A list of a few thousand objects is tens of megabytes of JSON.  Done in one piece, each step
of its life holds the event loop for a long time: ``orjson.loads`` of 5,000 pods ~200 ms,
encoding them for gRPC as long again, freeing them ~60 ms.  So each step is done a slice at a
time with a yield to the loop in between: the body is decoded a run of items at a time
(:mod:`gateway.core.lists.slicedjson`), encoded a few items at a time, and freed a few items at a
time once nothing else holds it.

Meanwhile the decoded body is millions of young dicts, lists and strings, and every one of
them counts towards the collector's generation-0 threshold: a collection would start again
and again in the middle of the work and traverse the young objects allocated so far, work
proportional to the body that finds nothing (decoded JSON holds no reference cycles).  The
body is freed by reference counting once dropped, so the collector need never see it: it is
held off from the decode until the body is gone.  Not earlier: the objects allocated while
it was off are all in the youngest generation, so the first allocation after it comes back
on starts a collection that traverses every one still alive (measured: 100-170 ms, one loop
stall, for 5,000 pods).

Who decides: this module alone.  The front ends name what kind of list answer they have and
hand over a fetch of the list's body as the upstream sent it (``calls.list_body``, an
:class:`~gateway.core.lists.body.Undecoded`); the scope decides whether the body goes to a
list worker (:mod:`gateway.core.lists.pool`: there are workers, the answer has a job they
can do, and the body is large), is decoded in slices (large) or in one piece:

* :meth:`LargeLists.answer` — a list written out here (gRPC, typed and generic): fetched,
  encoded by the front end's :class:`ListEncoding` (or by a worker, ``encoding.job``) and
  freed, all in one scope;
* :meth:`LargeLists.handed_on` — a list whose value is handed on to be completed in the same
  event-loop step (a GraphQL list field): decoded and held until that step ends, when
  :meth:`LargeLists.complete` (the projection's sliced completion) takes over, or
  :meth:`LargeLists.hold_until_next_turn` when it is completed in one piece; or, with
  ``deferrable``, the large body itself, which :meth:`LargeLists.projected` has a worker
  project (or decodes here when none can);
* :meth:`LargeLists.decode` — any other JSON body (the adapter's), held off in the scope
  it is given, else during its decode.

The state (how many holds are open, the tasks freeing values) lives in a
:class:`LargeLists` the adapter owns, one per gateway, and in each :class:`ListScope`.
Holds are counted there, and together they are one hold of the process's count
(:mod:`gateway.core.process.collector`, which schema builds and view fills hold too), so
overlapping lists, builds and fills keep the collector off until the last one ends, and
none of them ever turns on a collector it did not turn off.  No ambient state: each call
names the scope it works in.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar, overload

import orjson

from gateway.core import errors
from gateway.core.lists import slicedjson
from gateway.core.lists.body import Undecoded, over_cap
from gateway.core.lists.gzipped import gzip_size, inflated
from gateway.core.lists.jobs import OVER_CAP, Job, project, projected_part, split_wire
from gateway.core.lists.parted import run_parts
from gateway.core.lists.pool import ListWorkers
from gateway.core.lists.projections import Spec
from gateway.core.model.values import JSON
from gateway.core.process.collector import HOLD
from gateway.core.support import deepjson

__all__ = [
    "FREE_ITEMS",
    "LARGE_BODY_BYTES",
    "LARGE_LIST",
    "SMALL_PROJECTED_BYTES",
    "FetchBody",
    "LargeLists",
    "ListEncoding",
    "ListScope",
    "decode_now",
    "encode_now",
    "is_large",
    "paused",
]

#: A JSON body at least this large is decoded in slices, with the collector held off.
LARGE_BODY_BYTES: Final = 1 << 20
#: A list (of a list response's ``items``) at least this long is a large list.
LARGE_LIST: Final = 500
#: A list body under this many bytes (not gzipped) that a GraphQL list field takes is handed
#: on undecoded (:meth:`LargeLists.handed_on`, ``deferrable``) and projected in this process
#: from only what its selection reads (:meth:`LargeLists.projected_here`).
SMALL_PROJECTED_BYTES: Final = 256 * 1024
#: Items freed between two yields by :meth:`ListScope.release` (~0.3 ms of realistic pods).
FREE_ITEMS: Final = 25

T = TypeVar("T")

#: Fetches a list's body as the upstream sent it (``calls.list_body``), told whether it may
#: keep a body the upstream gzipped as it came (``True``: a list worker may take it, and
#: inflates it there).
FetchBody = Callable[[bool], Awaitable[Undecoded]]


class _Paused:
    """The block of :func:`paused` (a small class rather than a generator: every body's
    decode enters one)."""

    __slots__ = ("_paused",)

    def __init__(self, paused: bool) -> None:
        self._paused = paused

    def __enter__(self) -> None:
        if self._paused:
            HOLD.take()

    def __exit__(self, *exc: object) -> None:
        if self._paused:
            HOLD.give()


def paused(when: bool = True) -> _Paused:
    """A ``with`` block of synchronous work run with the cyclic collector off (``when``
    false, or the collector already off: left as it is).

    A hold of the process's count (:mod:`gateway.core.process.collector`): a schema build
    in a thread that starts or ends meanwhile neither turns the collector on under it nor
    has it turned on under itself; it ends with the block, also by an exception.
    """
    return _Paused(when and gc.isenabled())


def is_large(value: Any) -> bool:
    """A large decoded list (or a list object with a large ``items``)."""
    if type(value) is dict:
        value = value.get("items")
    return type(value) is list and len(value) >= LARGE_LIST


def decode_now(data: bytes) -> Any:
    """Decode a JSON body in one piece (at any depth: :func:`gateway.core.support.deepjson.loads`);
    a large one with the collector held off.

    Raises:
        Internal: the upstream sent something that is not JSON.
    """
    with paused(len(data) >= LARGE_BODY_BYTES):
        try:
            return deepjson.loads(data)
        except orjson.JSONDecodeError:
            raise _not_json() from None


def _not_json() -> errors.Internal:
    return errors.Internal("the upstream sent a response that is not valid JSON")


@dataclass(frozen=True, slots=True)
class ListEncoding:
    """How a front end writes a list answer as bytes, in pieces the scope can interleave
    with the event loop: the bytes are ``head(body)`` followed by what ``items`` appends
    for each slice of the body's items, in order."""

    #: The encoding of everything but the items.
    head: Callable[[Mapping[str, Any]], bytes]
    #: Appends the encoding of a run of items to the list of parts.
    items: Callable[[Sequence[Any], list[bytes]], None]
    #: Items encoded between two yields (a fraction of a millisecond of work).
    slice_items: int
    #: The same encoding as a list worker's job (:func:`gateway.core.lists.jobs.wire`), when
    #: a worker can do it: a large body is then encoded there, never decoded here.
    job: Job | None = None
    #: The same encoding as jobs for ``n`` list workers at once, each on a run of the items
    #: (:mod:`gateway.core.lists.parted`), and the answer's bytes from their answers (with
    #: neither, ``job``'s answer is :func:`split_wire`'s head and items).
    split: Callable[[int], Sequence[Job]] | None = None
    finish: Callable[[Sequence[bytes]], bytes] | None = None


def encode_now(body: Mapping[str, Any], encoding: ListEncoding) -> bytes:
    """A list answer's bytes in one piece (the same bytes as :meth:`LargeLists.encode`);
    a large list with the collector held off."""
    items = body.get("items") or ()
    with paused(len(items) >= LARGE_LIST):
        parts = [encoding.head(body)]
        encoding.items(items, parts)
        return b"".join(parts)


class ListScope:
    """The large-list work of one answer: at most one hold of the collector, ended once.

    Opened as a ``with`` block (which may span ``await``), it is the scope a large decode
    given it holds the collector off in (:meth:`LargeLists.decode`): until the block ends,
    or with ``linger`` until the end of the event-loop step it ends in.  The block must drop
    what it decoded before it ends: the collector finds nothing young to traverse only if
    the body is gone by then.
    """

    __slots__ = ("_held", "_linger", "_lists")

    def __init__(self, lists: LargeLists, *, linger: bool = False) -> None:
        self._lists = lists
        self._linger = linger
        self._held = False

    def __enter__(self) -> ListScope:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._linger:
            self.end_after_turn()
        else:
            self.end()

    def hold(self) -> None:
        """Hold the collector off until the scope ends (once however often called)."""
        if not self._held:
            self._held = True
            self._lists._take()

    def end(self) -> None:
        """End the scope's hold now (if it holds)."""
        if self._held:
            self._held = False
            self._lists._give()

    def end_after_turn(self) -> None:
        """End the scope's hold when the running event loop's current step ends: for a value
        still in use in this step and dropped at its end."""
        if self._held:
            asyncio.get_running_loop().call_soon(self.end)

    async def release(self, body: dict[str, Any], per_turn: int = FREE_ITEMS) -> None:
        """Empty a decoded list body the caller owns, freeing its items ``per_turn`` per
        event-loop step.

        Freeing 5,000 decoded pods at once takes ~60 ms (millions of objects, one by one),
        as long a stall of the event loop as decoding a slice of them many times over.  The
        body and its ``items`` list are emptied in place: nothing else may still use them.
        """
        items = body.get("items")
        body.clear()
        if type(items) is list:
            await _free_in_slices(items, per_turn)

    def release_later(self, value: Any, per_turn: int) -> None:
        """Take over ``value`` (a large decoded list, or list object) once whoever handed it
        over has dropped it, free it ``per_turn`` items per step, and end the scope's hold
        when it is gone."""
        lists = self._lists
        task = asyncio.get_running_loop().create_task(self._free_when_dropped(value, per_turn))
        lists._freeing.add(task)
        task.add_done_callback(lists._freeing.discard)

    async def _free_when_dropped(self, value: Any, per_turn: int) -> None:
        """Free ``value`` in slices if nothing else holds it.

        This task starts in the step after the one that handed the value over, when its
        user (a GraphQL execution) has written its response and dropped the value; if only
        this task holds it then (the reference counts say so: nothing else can see it), its
        list is emptied from the end.  Otherwise it is left to whoever still holds it.  The
        collector stays off until then: the value's objects are young, and a collection
        while they live would traverse them all.
        """
        try:
            # References: ``value`` here and getrefcount's argument; for a list object's
            # ``items``: the object's, the local and the argument.
            owned = sys.getrefcount(value) <= 2
            items = value.get("items") if type(value) is dict else value
            if owned and items is not value:
                owned = type(items) is list and sys.getrefcount(items) <= 3
            del value
            if owned and type(items) is list:
                await _free_in_slices(items, per_turn)
            del items
        finally:
            self.end()


def _small(body: Undecoded) -> bool:
    """A body :meth:`LargeLists.projected_here` may project: small, as the upstream sent it
    (not gzipped, not fed to a list worker)."""
    return not body.gzipped and body.feed is None and len(body.data) < SMALL_PROJECTED_BYTES


async def _free_in_slices(items: list[Any], per_turn: int) -> None:
    """Empty ``items`` from the end, ``per_turn`` items per event-loop step."""
    while len(items) > per_turn:
        del items[-per_turn:]
        await asyncio.sleep(0)
    items.clear()


class LargeLists:
    """The large-list work of one gateway (its adapter holds one; share it between the
    adapters of one process, so that their holds are counted together).

    One event loop thread uses it: no lock is needed.
    """

    __slots__ = ("_freeing", "_holders", "workers")

    def __init__(self, workers: ListWorkers | None = None) -> None:
        #: The process's list workers (``None``: none; :mod:`gateway.core.lists.pool`).
        self.workers = workers
        #: Holds open now (scopes that hold); together one hold of the process's count.
        self._holders = 0
        #: The tasks freeing values handed over (the event loop only weakly holds a task).
        self._freeing: set[asyncio.Task[None]] = set()

    # -- holds ---------------------------------------------------------------------------

    def _take(self) -> None:
        # the process's count (schema builds and view fills hold it too): the last hold
        # of all, not of this scope's kind, turns the collector back on
        if self._holders == 0:
            HOLD.take()
        self._holders += 1

    def _give(self) -> None:
        self._holders -= 1
        if self._holders == 0:
            HOLD.give()

    def scope(self, *, linger: bool = False) -> ListScope:
        """A new scope (see :class:`ListScope`); it holds nothing until asked to."""
        return ListScope(self, linger=linger)

    def hold_until_next_turn(self) -> None:
        """Hold the collector off until the running event loop's current step ends: for a
        large value completed in one piece in this step and dropped at its end.

        Outside a running event loop nothing happens.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        scope = self.scope()
        scope.hold()
        scope.end_after_turn()

    # -- the steps of a list answer ------------------------------------------------------

    async def decode(self, data: bytes, scope: ListScope | None = None) -> Any:
        """Decode a JSON body (``orjson.loads``' value) without holding the event loop long.

        A body of :data:`LARGE_BODY_BYTES` or more is decoded a run of list items at a time
        (:mod:`gateway.core.lists.slicedjson`; anything else in one piece, but for a body nested
        deeper than ``orjson`` takes: :mod:`gateway.core.support.deepjson`, a step at a time),
        yielding to the loop in between, with the collector held off: until ``scope`` ends
        when one is given, else until the decode ends.

        Raises:
            Internal: the upstream sent something that is not JSON.
        """
        if len(data) < LARGE_BODY_BYTES:
            try:
                return orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                if not deepjson.too_deep(exc):
                    raise _not_json() from None
            # an object nested deeper than orjson takes: decoded here a step at a time
            return await _decode_in_slices(data)
        if scope is not None:
            scope.hold()
            return await _decode_in_slices(data)
        with self.scope() as own:
            own.hold()
            return await _decode_in_slices(data)

    def _workers_for(self, job: bool) -> ListWorkers | None:
        """The workers a body may go to (``job``: the answer has a job they can do), if any."""
        workers = self.workers
        return workers if job and workers is not None and workers.enabled else None

    @staticmethod
    def _for_a_worker(body: Undecoded) -> bool:
        """Is ``body`` large enough to go to a list worker (:data:`LARGE_BODY_BYTES` or more;
        gzipped: as it came, or inflated by the gzip trailer's count)?"""
        data = body.data
        return len(data) >= LARGE_BODY_BYTES or (
            body.gzipped and gzip_size(data) >= LARGE_BODY_BYTES
        )

    async def _decoded_in(self, scope: ListScope, body: Undecoded) -> JSON:
        """``body`` decoded here (inflated first, in a thread, when gzipped), a large one with
        the collector held off in ``scope``; a JSON object, within its cap.

        Raises:
            Internal: the body is not a JSON object.
            Unavailable: the body is not gzip (``gzipped``).
            RequestEntityTooLarge: more items than the cap.
        """
        data = await inflated(body.data) if body.gzipped else body.data
        value = await self.decode(data, scope)
        if not isinstance(value, dict):
            raise errors.Internal("the upstream sent JSON that is not an object")
        if body.cap and over_cap(value, body.cap):
            raise body.refusal()
        return value

    async def encode(self, body: Mapping[str, Any], encoding: ListEncoding) -> bytes:
        """A list answer's bytes (:func:`encode_now`'s) without holding the event loop long.

        A large list (:data:`LARGE_LIST` items or more) is encoded ``encoding.slice_items``
        at a time, yielding to the event loop between slices, the collector held off: the
        encoding is Python (and upb) code under the GIL, so a worker thread would not let
        the loop run any sooner (measured: ``tests/bench/bench_loop_hold.py``).
        """
        items = body.get("items") or ()
        if len(items) < LARGE_LIST:
            return encode_now(body, encoding)
        step = encoding.slice_items
        scope = self.scope()
        scope.hold()
        try:
            parts = [encoding.head(body)]
            for start in range(0, len(items), step):
                await asyncio.sleep(0)
                encoding.items(items[start : start + step], parts)
            return b"".join(parts)
        finally:
            scope.end()

    async def answer(self, fetch: FetchBody, encoding: ListEncoding) -> bytes:
        """A list answer written out here: fetched, decoded in slices, encoded in slices and
        freed in slices, the collector off from its decode until it is freed.  With list
        workers and an encoding they can do (``encoding.job``), a large body is encoded by a
        worker and never decoded here (:mod:`gateway.core.lists.pool`)."""
        workers = self._workers_for(encoding.job is not None)
        with self.scope() as scope:
            body = await fetch(workers is not None)
            if workers is not None and encoding.job is not None and self._for_a_worker(body):
                if encoding.split is not None and encoding.finish is not None:
                    answers = await run_parts(workers, body, encoding.split(workers.count))
                    if answers is not None:
                        return encoding.finish(answers)
                elif (done := await workers.run(body, encoding.job)) is not None:
                    rest, items = split_wire(done)
                    return encoding.head(rest) + items
            value = await self._decoded_in(scope, body)
            del body
            data = await self.encode(value, encoding)
            await scope.release(value)
            del value
        return data

    @overload
    async def handed_on(self, fetch: FetchBody) -> JSON: ...

    @overload
    async def handed_on(self, fetch: FetchBody, *, deferrable: bool) -> JSON | Undecoded: ...

    async def handed_on(self, fetch: FetchBody, *, deferrable: bool = False) -> JSON | Undecoded:
        """A list answer whose decoded value the caller hands on, to be completed later in
        the same event-loop step (a GraphQL list field's value): the collector stays off
        from its decode to the end of that step, and from then on by whoever completes it
        (:meth:`complete`, :meth:`hold_until_next_turn`) until it is freed.

        ``deferrable``: whoever completes it takes a body undecoded too (a GraphQL list
        field, which passes it to :meth:`projected_here`, then :meth:`projected`): a small
        one (:data:`SMALL_PROJECTED_BYTES`) is answered as it came, to be projected here
        from only what the selection reads, and with list workers a large one is too, for
        a worker to decode and project instead of this process.

        Raises:
            Internal: the body is not a JSON object.
            RequestEntityTooLarge: more items than the cap.
        """
        workers = self._workers_for(deferrable)
        with self.scope(linger=True) as scope:
            body = await fetch(workers is not None)
            small = deferrable and _small(body)
            if small or (workers is not None and self._for_a_worker(body)):
                return body
            return await self._decoded_in(scope, body)

    @property
    def compacts(self) -> bool:
        """Whether a list body may go to a list worker to be made compact (:meth:`compacted`;
        then fetch it gzipped as it came)."""
        return self._workers_for(True) is not None

    async def compacted(self, body: Undecoded, job: Job) -> bytes | None:
        """A large list body made compact by a list worker (``job``:
        :func:`gateway.core.lists.compacting.compact`; its answer, for
        :func:`~gateway.core.lists.compacting.taken`); ``None`` when no worker did it (none,
        a small body, or one a worker gave back): the caller decodes it (:meth:`decoded`).

        Raises:
            RequestEntityTooLarge: more items than the body's cap.
        """
        workers = self._workers_for(True)
        if workers is None or not self._for_a_worker(body):
            return None
        return await workers.run(body, job)

    async def projected(self, body: Undecoded, spec: Spec | None) -> bytes | JSON:
        """A body :meth:`handed_on` undecoded, projected by ``spec`` (a GraphQL list
        field's plan, :mod:`gateway.core.lists.projections`): a large one by a list worker
        into the projection's JSON (``bytes``, to embed as it is), or, when none can (no
        plan, a value only a serialiser here completes, no worker, a body not large
        enough for one), decoded here (:meth:`decoded`) for the caller to complete.

        Raises:
            Internal: the body is not a JSON object.
            Unavailable: the body is not gzip (``gzipped``).
            RequestEntityTooLarge: more items than the cap.
        """
        workers = self.workers
        if spec is not None and workers is not None and self._for_a_worker(body):
            done = await workers.run(body, project(spec))
            if done is not None:
                return done
        return await self.decoded(body)

    @staticmethod
    def projected_here(body: Undecoded, spec: Spec | None) -> bytes | None:
        """A small body :meth:`handed_on` undecoded (under :data:`SMALL_PROJECTED_BYTES`),
        projected by ``spec`` here and now, from only what ``spec`` reads
        (:func:`~gateway.core.lists.jobs.projected_part`: a list worker's projection, the
        same JSON): ``None`` where that is not sure (no plan, a value only a serialiser
        here completes, a large list, a body that is not a JSON object), for the caller to
        have it decoded (:meth:`projected`) and completed the ordinary way.

        Raises:
            RequestEntityTooLarge: more items than the body's cap.
        """
        if spec is None or not _small(body):
            return None
        done = projected_part(body.data, spec, body.cap, LARGE_LIST)
        if done == OVER_CAP:
            raise body.refusal()
        return done if type(done) is bytes else None

    async def decoded(self, body: Undecoded, *, linger: bool = True) -> JSON:
        """A list body decoded here, the ordinary way, the cap checked; a large one with the
        collector held off until the end of the event-loop step its decode ends in (as
        :meth:`handed_on`'s: completed next), or, not ``linger``, only during its decode.

        Raises:
            Internal: the body is not a JSON object.
            Unavailable: the body is not gzip (``gzipped``).
            RequestEntityTooLarge: more items than the cap.
        """
        with self.scope(linger=linger) as scope:
            return await self._decoded_in(scope, body)

    async def complete(
        self, value: Any, work: Callable[[Any], Awaitable[T]], *, per_turn: int
    ) -> T:
        """``await work(value)``, the completion of a large value that yields to the event
        loop between slices, with the collector held off across the slices; then ``value``
        is freed ``per_turn`` items per step once its user has dropped it
        (:meth:`ListScope.release_later`), still held off until it is gone.

        If the work raises, the hold lasts to the end of the current step: the value is
        then completed another way (or the error handled) and dropped in this step, and the
        collector, turned on before, would traverse all of it.
        """
        scope = self.scope()
        scope.hold()
        try:
            done = await work(value)
        except BaseException:
            scope.end_after_turn()
            raise
        scope.release_later(value, per_turn)
        return done


async def _decode_in_slices(data: bytes) -> Any:
    """:func:`gateway.core.lists.slicedjson.decoder` run with a yield to the event loop between
    slices."""
    gen = slicedjson.decoder(data)
    try:
        while True:
            try:
                next(gen)
            except StopIteration as stop:
                return stop.value
            await asyncio.sleep(0)
    except orjson.JSONDecodeError:
        raise _not_json() from None

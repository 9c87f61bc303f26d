"""List work in worker processes: a large list body decoded and projected off the gateway's
interpreter.

Decoding a list of 5,000 pods (27 MB of JSON), projecting it to what a GraphQL query selects
and freeing the decoded objects is about 90 % of the gateway's CPU for that answer, all of
it Python under one interpreter lock.  Sliced, it does not stall the event loop for long
(:mod:`gateway.core.lists.large`), but it cannot run beside other work: a fleet list of two
clusters costs two decodes one after the other, whatever the cores, and every small request
waits for a core the list holds.

With list workers (``--list-workers N``), a large list body (``LARGE_BODY_BYTES`` or
more) that a GraphQL list field will complete is not decoded by the gateway: the adapter
hands on an :class:`Undecoded` body, and the field's completion sends the body and the
selection's projection plan (plain data, :mod:`gateway.core.lists.projections`) to a worker
process (a :func:`project` job), which decodes what the projection reads of it
(:func:`read_part`), projects it and returns the projected JSON.  The gateway embeds those
bytes in its answer without decoding them (``orjson.Fragment``).  A gRPC
``ResourceService`` list without a read mask is a :func:`wire` job the same way: the worker
writes the items' protobuf bytes.  N lists are then decoded on N cores at once, and the
gateway's own interpreter only moves bytes.  A body the upstream gzipped (as the apiserver
does for a large answer) is handed on gzipped, and the worker inflates it too.

Anything a worker cannot do exactly as the gateway would (a value the projection would give
to a scalar's serialiser, a body that is not a JSON object, a broken worker) comes back as
"not done", and the gateway decodes and completes that list itself, the ordinary way: the
answer is the same bytes either way (``tests/gateway/test_list_workers.py``).

Workers are started on the first large list, not before (a gateway that never lists much
never starts one), and stopped with the gateway.  Each is a fresh interpreter running this
module (``python -m gateway.core.lists.workers``), which imports
:mod:`gateway.core.lists.projections`
and little else: nothing of the gateway is forked or re-imported there (not its threads,
gRPC's among them, nor the script that started it), and it speaks a small framed protocol
over its stdin and stdout, one list at a time; the body itself goes through a memory file
the two share (Linux), mapped by the worker, not sent down the pipe.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import gc
import logging
import mmap
import os
import pickle
import signal
import struct
import sys
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, BinaryIO, Final

import msgspec
import orjson

from gateway.core import errors
from gateway.core.lists.projections import (
    WHOLE,
    Fallback,
    Items,
    Project,
    Spec,
    build,
    merged,
    reader,
    shape,
)
from gateway.core.lists.protowire import encode_struct, length_prefixed
from gateway.core.support import deepjson

log = logging.getLogger("gateway")

__all__ = [
    "ListWorkers",
    "Undecoded",
    "gunzip",
    "gzip_size",
    "inflated",
    "over_cap",
    "project",
    "read_part",
    "split_wire",
    "too_many",
    "wire",
    "work",
    "workers_for",
]

#: The command that starts a worker.
WORKER: Final = (sys.executable, "-m", "gateway.core.lists.workers")
#: Workers ending in a row without an answer after which none are started again.
GIVE_UP: Final = 3
#: A worker's job, plain data: :func:`project` or :func:`wire`.
Job = tuple[Any, ...]
#: What a worker answers when the caller must do the work itself.
NOT_DONE: Final = "not-done"
#: What a worker answers for a list with more items than the cap.
OVER_CAP: Final = "over-cap"
#: Plans a worker keeps built (and decoders of what they read), the least recent dropped.
_PLANS_KEPT: Final = 256


def too_many(cap: int, plural: str) -> errors.RequestEntityTooLarge:
    """The refusal of a list without ``limit`` that holds more than ``cap`` items."""
    return errors.RequestEntityTooLarge(
        f"more than {cap} {plural} match: ask for pages with `limit` and `continue`, or "
        "narrow the list with selectors"
    )


def over_cap(answer: Mapping[str, Any], cap: int) -> bool:
    """Does a list answer asked for ``cap + 1`` items hold more than ``cap``, or promise
    more (a ``continue`` token)?"""
    meta = answer.get("metadata") or {}
    items = answer.get("items") or []
    return bool(meta.get("continue")) or len(items) > cap


class Undecoded:
    """A large list body not decoded yet, handed on to whoever completes it.

    Attributes:
        data: the upstream's JSON body, or, ``gzipped``, that body as the upstream gzipped
            it (``Content-Encoding: gzip``: a worker inflates it).
        cap: at most this many items may be answered (0: no cap); more are refused with
            :meth:`refusal`.
        plural: the resource's plural, for the refusal's message.

    It knows nothing of who decodes it: a worker (:meth:`ListWorkers.run`), else the
    large-list scope's owner (:meth:`gateway.core.lists.large.LargeLists.decoded`).
    """

    __slots__ = ("cap", "data", "gzipped", "plural")

    def __init__(self, data: bytes, *, gzipped: bool = False) -> None:
        self.data = data
        self.gzipped = gzipped
        self.cap = 0
        self.plural = ""

    def refusal(self) -> errors.RequestEntityTooLarge:
        return too_many(self.cap, self.plural)


def gzip_size(data: bytes | memoryview) -> int:
    """The size of gzipped ``data`` inflated, as its trailer says (modulo 2**32, of its
    last member); 0 when it is too short to have one."""
    return int.from_bytes(data[-4:], "little") if len(data) >= _GZIP_SMALLEST else 0


def gunzip(data: bytes | memoryview) -> bytes:
    """``data`` inflated: every gzip member, as ``gzip.decompress`` does, at zlib's speed
    (one ``decompressobj`` per member, no copies for the usual one member).

    Raises:
        zlib.error: not gzip, or damaged.
        EOFError: cut short.
    """
    parts: list[bytes] = []
    rest: bytes | memoryview = data
    while rest:
        inflater = zlib.decompressobj(_GZIP_WBITS)
        parts.append(inflater.decompress(rest))
        if not inflater.eof:
            raise EOFError("the gzip body ends before its end")
        rest = inflater.unused_data.lstrip(b"\0")  # members may be padded with zeros
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def inflated(data: bytes) -> bytes:
    """:func:`gunzip` in a thread (zlib lets the event loop go on meanwhile).

    Raises:
        Unavailable: the body is not gzip, or is damaged or cut short (as httpx's own
            inflating of a response says it).
    """
    try:
        return await asyncio.to_thread(gunzip, data)
    except (zlib.error, EOFError) as exc:
        raise errors.Unavailable("upstream unreachable: DecodingError") from exc


#: ``zlib``'s window bits for a gzip header and trailer.
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
#: Header (10) and trailer (8) bytes of the smallest gzip member.
_GZIP_SMALLEST: Final = 18

#: What :func:`over_cap` reads of a list, whatever the projection reads.
_COUNTED: Final = {"metadata": {"continue": WHOLE}, "items": Items({})}


def project(spec: Spec) -> Job:
    """The job of a GraphQL list field: the list projected by ``spec``, as JSON."""
    return ("project", spec)


def wire(item_tag: bytes, object_tag: bytes, *, as_struct: bool) -> Job:
    """The job of a gRPC ``ResourceList``: each item written as ``item_tag`` holding a
    ``ResourceObject`` whose ``object_tag`` field is the item's JSON (or, ``as_struct``,
    its ``google.protobuf.Struct``); everything but the items comes back as JSON, for the
    front end to write its head."""
    return ("wire", item_tag, object_tag, as_struct)


def work(
    data: bytes | memoryview,
    job: Job,
    cap: int,
    keep: list[Any] | None = None,
    *,
    gzipped: bool = False,
) -> bytes | str:
    """Run in a worker: ``job`` done on the JSON of ``data`` (``gzipped``: inflated first),
    or :data:`NOT_DONE`, or :data:`OVER_CAP`.  ``keep``: the decoded value is appended to
    it, for the caller to free after it has answered.

    A projection decodes only what it reads (:func:`read_part`) when that gives what a whole
    decode would; anything else is decoded whole."""
    if gzipped:
        try:
            data = gunzip(data)
        except (zlib.error, EOFError):
            return NOT_DONE  # the gateway's own inflating says what is wrong
    part = read_part(data, job[1]) if job[0] == "project" else None
    if part is not None:
        if keep is not None:
            keep.append(part)
        try:
            return _answer(part, job, cap)
        except TypeError:
            pass  # an integer past 64 bits, which a whole decode reads as a float
    try:
        value = deepjson.loads(data)  # at any depth, as the gateway decodes it
    except orjson.JSONDecodeError:
        return NOT_DONE
    if keep is not None:
        keep.append(value)
    try:
        return _answer(value, job, cap)
    except TypeError:  # a value orjson cannot write, or a list that is not one
        return NOT_DONE


def _answer(value: Any, job: Job, cap: int) -> bytes | str:
    if type(value) is not dict:
        return NOT_DONE
    if cap and over_cap(value, cap):
        return OVER_CAP
    try:
        if job[0] == "project":
            return _projected(value, job[1])
        return _written(value, *job[1:])
    except Fallback:
        return NOT_DONE


def read_part(data: bytes | memoryview, spec: Spec) -> dict[str, Any] | None:
    """Only what the projection ``spec`` reads of the list (and what the cap needs),
    decoded; ``None`` when that cannot be trusted to be what a whole decode would give (the
    body is not UTF-8, or not JSON, or a value's type is not the one read), and the body is
    decoded whole.

    A projection of a few fields of each item builds a fraction of the objects a whole
    decode does: about a seventh of the time for the 15 fields of a pod out of 5 KB."""
    read = _reader_of(spec)
    try:
        str(data, "utf-8")  # checked whole, as orjson does: the reader skips strings unread
        value = read(data)
    except (UnicodeDecodeError, msgspec.DecodeError, RecursionError):
        return None
    return value if type(value) is dict else None


def _projected(value: dict[str, Any], spec: Spec) -> bytes:
    return orjson.dumps(_projection_of(spec)(value))


@functools.lru_cache(maxsize=_PLANS_KEPT)
def _projection_of(spec: Spec) -> Project:
    return build(spec)


@functools.lru_cache(maxsize=_PLANS_KEPT)
def _reader_of(spec: Spec) -> Callable[[bytes | memoryview], Any]:
    return reader(merged(shape(spec), _COUNTED))


def _written(value: dict[str, Any], item_tag: bytes, object_tag: bytes, as_struct: bool) -> bytes:
    items = value.pop("items", None) or []
    if type(items) is not list:
        raise Fallback
    parts: list[bytes] = []
    for item in items:
        if item.__class__ is dict:
            obj = encode_struct(item) if as_struct else orjson.dumps(item)
            parts.append(length_prefixed(item_tag, length_prefixed(object_tag, obj)))
    rest = orjson.dumps(value)
    return _REST.pack(len(rest)) + rest + b"".join(parts)


def split_wire(done: bytes) -> tuple[dict[str, Any], bytes]:
    """A ``wire`` job's answer: the list without its items (decoded), the items' bytes."""
    (size,) = _REST.unpack_from(done)
    start = _REST.size
    return orjson.loads(done[start : start + size]), done[start + size :]


# A request: ``<QQB`` (lengths, shared), the pickled ``(job, cap, gzipped)``, the body (when
# not shared).  An answer: ``<BQ`` (status, length), then the job's bytes (status 0) or
# nothing.
_REQUEST = struct.Struct("<QQB")  # the job's size, the body's size, whether it is shared
_ANSWER = struct.Struct("<BQ")
_DONE, _NOT_DONE, _OVER_CAP = 0, 1, 2
# A ``wire`` answer: the length of the JSON of everything but the items, that JSON, the items.
_REST = struct.Struct("<Q")


def serve(stdin: BinaryIO, stdout: BinaryIO, shared: int | None = None) -> None:
    """A worker's loop: requests in on ``stdin``, answers out on ``stdout``, until EOF.
    ``shared``: a memory file the gateway writes each body into (read here in one call),
    rather than sending it down the pipe.

    The cyclic collector is off: a decoded body is millions of young objects and no cycle,
    and a collection would traverse them again and again during the decode (the gateway
    holds it off the same way, :mod:`gateway.core.lists.large`).  Each decoded body is freed
    after its answer is written, not before: its caller need not wait for the free.
    """
    gc.disable()
    decoded: list[Any] = []
    while True:
        head = stdin.read(_REQUEST.size)
        if len(head) < _REQUEST.size:
            return  # the gateway closed the pipe (or is gone): done
        spec_size, body_size, in_shared = _REQUEST.unpack(head)
        job, cap, gzipped = pickle.loads(stdin.read(spec_size))  # the gateway's own job
        if in_shared and shared is not None and body_size:
            # Mapped, not copied: the decode reads the gateway's copy in place.
            with (
                mmap.mmap(shared, body_size, access=mmap.ACCESS_READ) as mapped,
                memoryview(mapped) as body,
            ):
                answer = work(body, job, cap, decoded, gzipped=gzipped)
            os.ftruncate(shared, 0)  # its pages go back to the system, off the gateway's loop
        else:
            answer = work(stdin.read(body_size), job, cap, decoded, gzipped=gzipped)
        if isinstance(answer, bytes):
            stdout.write(_ANSWER.pack(_DONE, len(answer)))
            stdout.write(answer)
        else:
            stdout.write(_ANSWER.pack(_OVER_CAP if answer == OVER_CAP else _NOT_DONE, 0))
        stdout.flush()
        decoded.clear()


class _Worker:
    """One worker process, its two pipes and its shared memory file; one request at a time.

    A body goes through the memory file when there is one (Linux): one copy in, one read
    out, where a pipe would hand a 27 MB body over in dozens of pieces, each a wait for the
    other process to be scheduled, which on a busy machine costs more than the decode.
    """

    __slots__ = ("proc", "shared", "stopped")

    def __init__(self, proc: asyncio.subprocess.Process, shared: int | None) -> None:
        self.proc = proc
        self.shared = shared
        self.stopped = False

    async def call(self, job: Job, cap: int, data: bytes, *, gzipped: bool) -> bytes | str:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        head = pickle.dumps((job, cap, gzipped), protocol=pickle.HIGHEST_PROTOCOL)
        shared = self.shared
        if shared is not None:
            # A thread copies it (the event loop would otherwise wait for the whole copy),
            # to its end even when the caller goes: the file is not closed under it.
            copy = asyncio.ensure_future(asyncio.to_thread(os.pwrite, shared, data, 0))
            try:
                await asyncio.shield(copy)
            except asyncio.CancelledError:
                await asyncio.wait({copy})
                raise
        stdin.write(_REQUEST.pack(len(head), len(data), shared is not None))
        stdin.write(head)
        if shared is None:
            stdin.write(data)
        await stdin.drain()
        status, size = _ANSWER.unpack(await stdout.readexactly(_ANSWER.size))
        if status == _DONE:
            return await stdout.readexactly(size)
        return OVER_CAP if status == _OVER_CAP else NOT_DONE

    @property
    def done(self) -> bool:
        """The process has ended and its output pipe is read to its end."""
        stdout = self.proc.stdout
        return self.proc.returncode is not None and (stdout is None or stdout.at_eof())

    async def reaped(self) -> None:
        """Wait for the process to end and read its output to the end: the event loop then
        closes its transport (as it does by itself for a worker nobody waits for)."""
        await self.proc.wait()
        if self.proc.stdout is not None:
            await self.proc.stdout.read()
        self.close_shared()

    def stop(self, *, kill: bool = True) -> None:
        """End the process and close its memory file: a kill for one that may be
        mid-request, else the end of its input (it exits at EOF; one that has already died
        is left to the event loop's child watcher, which a kill would race to reap)."""
        self.stopped = True
        if kill and self.proc.returncode is None:
            self.proc.kill()
        elif self.proc.stdin is not None:
            self.proc.stdin.close()
        self.close_shared()

    def close_shared(self) -> None:
        shared, self.shared = self.shared, None
        if shared is not None:
            os.close(shared)


class ListWorkers:
    """The gateway's list worker processes (one set per process, shared by every cluster).

    ``count`` 0: none, every list is decoded by the gateway itself.  A worker is a child
    process (``python -m gateway.core.lists.workers``) that serves one list at a time over its
    stdin and stdout: nothing but this module and :mod:`gateway.core.lists.projections` is
    imported there, and the gateway's own modules and threads are never copied into it.
    """

    def __init__(
        self,
        count: int,
        counted: Callable[[str], None] | None = None,
        *,
        command: Sequence[str] = WORKER,
    ) -> None:
        self.count = count
        #: Hears each list's outcome: ``done``, ``returned``, ``died`` (the metrics').
        self._counted = counted or (lambda outcome: None)
        #: What starts a worker (its memory file's descriptor is appended, when there is one).
        self._command = tuple(command)
        #: Workers that ended in a row without answering; at :data:`GIVE_UP`, none are used.
        self._deaths = 0
        self._idle: list[_Worker] = []
        #: Every worker started and not yet reaped (a dropped one stays until its process
        #: and pipes are done: the event loop closes them, or :meth:`aclose` waits).
        self._all: set[_Worker] = set()
        self._slots: asyncio.Semaphore | None = None
        self._closed = False
        #: Lists projected by a worker, and lists a worker gave back (not done, or died).
        self.projected = 0
        self.returned = 0

    @property
    def enabled(self) -> bool:
        return self.count > 0 and not self._closed

    async def _take(self) -> _Worker:
        while self._idle:
            worker = self._idle.pop()
            if worker.proc.returncode is None:
                return worker
            self._drop(worker)  # died while idle
        return await self._start()

    async def _start(self) -> _Worker:
        memfd = getattr(os, "memfd_create", None)
        shared = None if memfd is None else memfd("kube-gateway-list", os.MFD_CLOEXEC)
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._command,
                *([] if shared is None else [str(shared)]),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                pass_fds=() if shared is None else (shared,),
            )
        except BaseException:
            if shared is not None:
                os.close(shared)
            raise
        worker = _Worker(proc, shared)
        self._all.add(worker)
        return worker

    def _drop(self, worker: _Worker, *, kill: bool = False) -> None:
        worker.stop(kill=kill)
        # The ones ended earlier whose process and pipes are done need no more waiting.
        self._all = {w for w in self._all if not w.done}

    async def run(self, body: Undecoded, job: Job) -> bytes | None:
        """``job`` done on ``body`` in a worker (:func:`project`: JSON; :func:`wire`: see
        :func:`split_wire`); ``None`` when the caller must decode it and do it itself.

        Raises:
            RequestEntityTooLarge: more items than the body's cap.
        """
        if not self.enabled:
            return None
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.count)
        async with self._slots:
            try:
                worker = await self._take()
            except OSError as exc:
                self._give_up(f"a list worker cannot start ({exc})")
                return None
            try:
                done = await worker.call(job, body.cap, body.data, gzipped=body.gzipped)
            except (OSError, asyncio.IncompleteReadError):
                # The worker died (killed, out of memory): this list is decoded here, and
                # the next one starts a new worker, unless they all die at once.
                self._drop(worker)
                self.returned += 1
                self._counted("died")
                self._deaths += 1
                if self._deaths >= GIVE_UP:
                    self._give_up(f"{self._deaths} list workers in a row ended without answering")
                else:
                    log.warning("a list worker process ended unexpectedly; starting a new one")
                return None
            except BaseException:
                self._drop(worker, kill=True)  # cancelled mid-request: pipes mid-frame
                raise
            self._deaths = 0
            if self._closed:
                self._drop(worker)
            else:
                self._idle.append(worker)
        if done == OVER_CAP:
            self._counted("done")
            raise body.refusal()
        if isinstance(done, bytes):
            self.projected += 1
            self._counted("done")
            return done
        self.returned += 1
        self._counted("returned")
        return None

    def _give_up(self, why: str) -> None:
        """Use no worker from now on: every list is decoded by the gateway, as with
        ``--list-workers 0`` (said once, as an error: the operator should look)."""
        if not self._closed:
            log.error("%s: large lists are decoded by the gateway itself from now on", why)
        self._closed = True

    async def ready(self) -> list[int]:
        """Start every worker now (rather than on first use): their process ids."""
        started = [await self._start() for _ in range(self.count - len(self._idle))]
        self._idle.extend(started)
        return [w.proc.pid for w in self._idle]

    async def aclose(self) -> None:
        """Stop the workers: idle ones see EOF and exit; one mid-request is killed (its
        caller is gone too); each is waited for to its pipes' end, so that nothing of it
        is left for the garbage collector."""
        self._closed = True
        workers, self._all = list(self._all), set()
        idle = set(self._idle)
        self._idle.clear()
        for worker in workers:
            if not worker.stopped:  # idle: EOF; else mid-request
                worker.stop(kill=worker not in idle)
        for worker in workers:
            try:
                async with asyncio.timeout(5):
                    await worker.reaped()
            except TimeoutError:
                worker.stop()
                await worker.reaped()


def _widen(fd: int) -> None:
    """Give a worker's pipe the largest buffer the system allows (Linux: 1 MiB by default;
    elsewhere the default 64 KiB stays): a 27 MB body then crosses in a few dozen writes,
    not hundreds, each one a handover between two processes that, on a busy machine, waits
    for a CPU.  Set from the worker's end: the size is the pipe's, whichever end sets it."""
    size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if size is None:
        return
    try:
        with open("/proc/sys/fs/pipe-max-size") as most:
            fcntl.fcntl(fd, size, int(most.read()))
    except OSError:
        pass  # the default size works, only with more handovers


def workers_for(setting: str) -> int:
    """The worker count a ``--list-workers`` setting means: ``auto`` is the CPUs this
    process may use (its CPU affinity, and its cgroup's CPU quota: a pod limited to 2 CPUs
    on a 64-core node gets 2), at most 4; ``0`` is none."""
    if setting != "auto":
        return int(setting)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_cpus()
    if quota is not None:
        cpus = min(cpus, quota)
    return max(1, min(4, cpus))


def cgroup_cpus(root: str = "/sys/fs/cgroup") -> int | None:
    """The CPUs the process's cgroup may use, rounded up (``None``: no quota, or no
    cgroup to read): cgroup v2's ``cpu.max``, else v1's ``cpu.cfs_quota_us``."""
    for quota_file, period_file in (
        ("cpu.max", None),
        ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us"),
    ):
        try:
            with open(os.path.join(root, quota_file)) as f:
                fields = f.read().split()
            if period_file is not None:
                with open(os.path.join(root, period_file)) as f:
                    fields.append(f.read().strip())
        except OSError:
            continue
        if len(fields) < 2 or fields[0] in ("max", "-1"):
            return None
        try:
            quota, period = int(fields[0]), int(fields[1])
        except ValueError:
            return None
        if quota <= 0 or period <= 0:
            return None
        return max(1, -(-quota // period))
    return None


if __name__ == "__main__":
    # A worker: Ctrl-C reaches the whole process group, but the gateway ends its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _widen(sys.stdin.fileno())
    _widen(sys.stdout.fileno())
    serve(sys.stdin.buffer, sys.stdout.buffer, int(sys.argv[1]) if len(sys.argv) > 1 else None)

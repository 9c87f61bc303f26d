"""The gateway's pool of list worker processes (:class:`ListWorkers`): a large list body
decoded and projected (or written for gRPC) off the gateway's interpreter.

Decoding a list of 5,000 pods (27 MB of JSON), projecting it to what a GraphQL query selects
and freeing the decoded objects is about 90 % of the gateway's CPU for that answer, all of
it Python under one interpreter lock.  Sliced, it does not stall the event loop for long
(:mod:`gateway.core.lists.large`), but it cannot run beside other work: a fleet list of two
clusters costs two decodes one after the other, whatever the cores, and every small request
waits for a core the list holds.

With list workers (``--list-workers N``), a large list body that a GraphQL list field or a
gRPC ``ResourceService`` list without a read mask will complete is not decoded by the
gateway: the large-list scope (:class:`gateway.core.lists.large.LargeLists`) sends the body
and a job (:mod:`gateway.core.lists.jobs`: the selection's projection plan, plain data, or
the protobuf items to write) to a worker process (:mod:`gateway.core.lists.worker`), which
decodes what the job reads, does it and returns the bytes.  N lists are then decoded on N
cores at once, and the gateway's own interpreter only moves bytes.  A body the upstream
gzipped (as the apiserver does for a large answer) is handed on gzipped, and the worker
inflates it too.  Whatever a worker gives back (not done, or it died) the caller decodes and
completes itself.

A long body is not handed over at its end but fed to a worker as it arrives (:class:`Feed`,
which the adapter's read of a list body opens once it is long enough): the worker inflates
each piece as it comes and holds the body for the job that follows, so that only the decode
and the job are left after the last byte.

Workers are started on the first large list, not before (a gateway that never lists much
never starts one), and stopped with the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import mmap
import os
import pickle
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, Final, TypeVar

from gateway.core.lists.body import Undecoded
from gateway.core.lists.compacting import Sliced, sliced
from gateway.core.lists.jobs import NOT_DONE, OVER_CAP, Job
from gateway.core.lists.worker import (
    ANSWER,
    CHUNK,
    COMMAND,
    DROP,
    FED,
    HELD,
    REQUEST,
    STATUS_DONE,
    STATUS_NOT_DONE,
    STATUS_OVER_CAP,
    STATUS_PART,
    STATUS_PARTS_END,
    STATUS_SHARED,
    part_after,
)
from gateway.core.process.cpus import usable_cpus

log = logging.getLogger("gateway")

__all__ = [
    "FEED_FROM",
    "FEED_FROM_GZIPPED",
    "GIVE_UP",
    "MOST_AUTO",
    "Feed",
    "ListWorkers",
    "workers_for",
]

#: Workers ending in a row without an answer after which none are started again.
GIVE_UP: Final = 3
#: The most workers ``--list-workers auto`` starts.
MOST_AUTO: Final = 4


def workers_for(setting: str) -> int:
    """The worker count a ``--list-workers`` setting means: ``auto`` is the CPUs this
    process may use (:func:`gateway.core.process.cpus.usable_cpus`: its CPU affinity and its
    cgroup's CPU quota), at most :data:`MOST_AUTO`; ``0`` is none."""
    if setting != "auto":
        return int(setting)
    return max(1, min(MOST_AUTO, usable_cpus()))


T = TypeVar("T")


async def _whole_in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a thread (the event loop free meanwhile), waited for to its end
    even when the caller is cancelled (the memory file it reads or writes is not closed
    under it); the cancellation goes on after."""
    done = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        await asyncio.wait({done})
        raise


def _retrieved(task: asyncio.Future[Any]) -> None:
    """A task's end seen (its error, if any, is its awaiter's, or no one's to log)."""
    if not task.cancelled():
        task.exception()


def _read_part(shared: int, at: int, size: int) -> Sliced:
    """A part of a compact job's answer that a worker wrote at ``at`` in the memory file
    (:data:`~gateway.core.lists.worker.STATUS_PART`), its objects apart (:func:`sliced`);
    the file is left as it is (the worker writes the next part beyond it).

    Raises:
        ValueError: the part's sections do not add up.
    """
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    with mmap.mmap(shared, size or 1, flags=flags, prot=mmap.PROT_READ, offset=at) as mapped:
        return sliced(mapped, size)


def _read_shared(shared: int, size: int, compact: bool = False) -> bytes:
    """The ``size`` bytes a worker wrote into the memory file from its start; the file then
    emptied (its pages back to the system).  ``compact``: the answer of a compact job, read
    with its objects apart (:func:`~gateway.core.lists.compacting.sliced`: each object's
    JSON copied once, straight out of the mapped file, here in the reading thread, not
    the whole answer first and each object again on the event loop)."""
    if compact and size:
        try:
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)  # no fault per page
            with mmap.mmap(shared, size, flags=flags, prot=mmap.PROT_READ) as mapped:
                found: bytes = sliced(mapped, size)
        except ValueError:
            found = os.pread(shared, size, 0)  # for taken() to refuse, as it is
    else:
        found = os.pread(shared, size, 0)
    if len(found) != size and not isinstance(found, Sliced):
        raise OSError(f"a list worker's answer is {len(found)} bytes, not {size}")
    os.ftruncate(shared, 0)
    return found


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
            await _whole_in_thread(os.pwrite, shared, data, 0)
        stdin.write(REQUEST.pack(len(head), len(data), shared is not None))
        stdin.write(head)
        if shared is None:
            stdin.write(data)
        await stdin.drain()
        return await self._answer(job)

    async def call_held(
        self, job: Job, cap: int, answering: asyncio.Future[bytes | str] | None = None
    ) -> bytes | str:
        """``job`` done on the body fed to this worker (:class:`Feed`), which it holds;
        ``answering``: its answer being read already (a compact job named with the body,
        whose parts the worker says as it makes them)."""
        stdin = self.proc.stdin
        assert stdin is not None
        head = pickle.dumps((job, cap, False), protocol=pickle.HIGHEST_PROTOCOL)
        stdin.write(REQUEST.pack(len(head), 0, HELD) + head)
        await stdin.drain()
        return await (self._answer(job) if answering is None else answering)

    async def _answer(self, job: Job) -> bytes | str:
        stdout, shared = self.proc.stdout, self.shared
        assert stdout is not None
        status, size = ANSWER.unpack(await stdout.readexactly(ANSWER.size))
        if status == STATUS_DONE:
            return await stdout.readexactly(size)
        if status == STATUS_PART and shared is not None:
            return await self._parts(size)
        if status == STATUS_SHARED and shared is not None:
            # read in a thread (one copy, the event loop free meanwhile), to its end even
            # when the caller goes: the file is not closed under it
            compact = job[0] == "compact"
            return await _whole_in_thread(_read_shared, shared, size, compact)
        return OVER_CAP if status == STATUS_OVER_CAP else NOT_DONE

    async def _parts(self, size: int) -> Sliced:
        """A compact job's answer in parts (:data:`~gateway.core.lists.worker.STATUS_PART`):
        the first, read now, with the others to come (:attr:`Sliced.more
        <gateway.core.lists.compacting.Sliced.more>`: a :class:`_Parts` reading them)."""
        shared = self.shared
        assert shared is not None
        try:
            first = await _whole_in_thread(_read_part, shared, 0, size)
        except ValueError as exc:  # as a worker that died: dropped, the list decoded here
            raise OSError(f"a list worker's answer could not be read ({exc})") from None
        first.more = _Parts(self, part_after(0, size))
        return first

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


class _Parts:
    """The parts of a compact job's answer after its first, read as the worker says each
    is written (each in a thread, off the event loop: :func:`_read_part`) while it makes
    the next, whether or not anyone iterates them yet (the caller may list a next page
    first, and wait for this worker).  The worker is its pool's again at their end
    (:attr:`ended`: whether it answered them all); :meth:`close` before then stops it."""

    def __init__(self, worker: _Worker, at: int) -> None:
        #: Set by the pool: hears the end (whether the worker answered every part).
        self.ended: Callable[[bool], None] = lambda answered: None
        self._over = False
        #: The consumer told the end (:meth:`_tell`); the memory file emptied already.
        self._told = self._emptied = False
        #: What the consumer gets after the last part read: ``None`` (the worker said its
        #: last), else why the answer has no end (it died or was stopped, by default).
        self._last: ValueError | None = ValueError(
            "a list worker ended in the middle of its answer"
        )
        self._worker = worker
        self._queue: asyncio.Queue[Sliced | ValueError | None] = asyncio.Queue()
        self._task = asyncio.create_task(self._read(worker, at), name="list-worker-parts")
        # (a task cancelled before its first step never runs its ``finally``)
        self._task.add_done_callback(lambda _: self._end(False))

    async def _read(self, worker: _Worker, at: int) -> None:
        answered = False
        put = self._queue.put_nowait
        count = 1
        try:
            while True:
                stdout, shared = worker.proc.stdout, worker.shared
                if stdout is None or shared is None:  # stopped meanwhile (the pool closing)
                    return
                try:
                    status, size = ANSWER.unpack(await stdout.readexactly(ANSWER.size))
                except (OSError, asyncio.IncompleteReadError):
                    return  # it ended (died, or was stopped)
                if status != STATUS_PART:
                    answered = status in (STATUS_PARTS_END, STATUS_NOT_DONE)
                    if status == STATUS_PARTS_END and size == count:
                        self._last = None
                    else:  # an item it could not make compact past the first part (rare)
                        self._last = ValueError("a list worker gave its answer up in the middle")
                    if answered:
                        # the consumer told at once; the file emptied in a thread (its
                        # pages freed: ~13 ms for 100 MB, the event loop's else), the worker
                        # its pool's again after that, not before (its next body goes there)
                        self._tell()
                        await _whole_in_thread(os.ftruncate, shared, 0)
                        self._emptied = True
                    return
                try:
                    part = await _whole_in_thread(_read_part, shared, at, size)
                except (ValueError, OSError) as exc:
                    self._last = ValueError(f"a list worker's part could not be read ({exc})")
                    return
                at = part_after(at, size)
                count += 1
                put(part)
                del part
        finally:
            self._end(answered)

    def _end(self, answered: bool) -> None:
        """The parts' end, once: the consumer told (the end, or why there is none), the
        memory file emptied where the worker said its last, the pool told."""
        if not self._over:
            self._over = True
            self._tell()
            shared = self._worker.shared
            if answered and shared is not None and not self._emptied:
                os.ftruncate(shared, 0)  # its pages back to the system
            self.ended(answered)

    def _tell(self) -> None:
        """The consumer told the end (once): ``None``, or why there is none."""
        if not self._told:
            self._told = True
            self._queue.put_nowait(self._last)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            found = await self._queue.get()
            if found is None:
                return
            if isinstance(found, ValueError):
                raise found
            yield found
            del found

    async def over(self) -> None:
        """Wait until the parts' reading is over (a read or emptying in a thread ended)."""
        await asyncio.wait([self._task])

    def close(self) -> None:
        """No more parts wanted: a worker that has not said its last is stopped (one that
        has is left to the emptying of its file)."""
        if not self._task.done() and not (self._told and self._last is None):
            self._task.cancel()
        dropped = False
        while not self._queue.empty():  # parts read and not taken: freed now
            self._queue.get_nowait()
            dropped = True
        if dropped and self._told:  # (whoever still iterates learns they are gone)
            self._queue.put_nowait(ValueError("a list worker's answer was dropped"))


#: A body at least this long as it comes (``Content-Length``, or read so far) is fed to a
#: list worker as it arrives (:class:`Feed`); gzipped, a quarter of it (a gzipped list body
#: inflates to four to ten times its size: one this long is a list for a worker).
FEED_FROM: Final = 1 << 20
FEED_FROM_GZIPPED: Final = FEED_FROM // 4


class Feed:
    """A large list body fed to a list worker as the gateway reads it from the upstream
    (:meth:`ListWorkers.feed`; ``calls.list_body``), so that the worker inflates it while
    the rest is on the wire, and the job that comes after (:meth:`ListWorkers.run`) only
    decodes and does its work.

    The gateway keeps every piece it reads too (the body a caller decodes when the worker
    gives the job back or dies: the same answer as before).  Each piece is written down the
    worker's pipe and waited for (:meth:`send`): a worker slower than the upstream holds
    the upstream's read back (at most the pipe's buffer, 1 MiB, and the event loop's write
    buffer, 64 KiB, ahead of the worker), rather than the gateway buffering more.

    The worker and its slot are the feed's until :meth:`taken` (the job's), :meth:`release`
    (the body decoded here: the worker frees it and is idle again), or :meth:`abandon`
    (the body cut short: the caller went, or the upstream broke off: the worker is killed,
    as a worker mid-request is, and a new one starts on the next list); a feed dropped
    unsettled is released.
    """

    __slots__ = (
        "_answering",
        "_ended",
        "_loop",
        "_slots",
        "_worker",
        "died",
        "job",
        "pool",
        "sent",
    )

    def __init__(
        self,
        pool: ListWorkers,
        worker: _Worker,
        slots: asyncio.Semaphore,
        gzipped: bool,
        job: Job | None = None,
    ) -> None:
        self.pool = pool
        self._worker: _Worker | None = worker
        self._slots = slots
        self._ended = False
        #: Its worker died as it was fed (the job is the caller's).
        self.died = False
        self._loop = asyncio.get_running_loop()
        #: Bytes written to the worker so far.
        self.sent = 0
        pool.feeding += 1
        #: The job to come on the body, when known (a compact job is made as the body
        #: comes: :class:`~gateway.core.lists.compacting.Streaming`).
        self.job = job
        spec = gzipped if job is None else (gzipped, job)
        head = pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)
        self._write(REQUEST.pack(len(head), 0, FED) + head)
        #: A compact job's answer, read as the worker says each part it makes as the body
        #: comes (its first part at once, the others by its :class:`_Parts`), so that the
        #: gateway takes them in beside the rest of the body; ``None``: read after.
        self._answering: asyncio.Task[bytes | str] | None = None
        if job is not None and job[0] == "compact" and worker.shared is not None:
            self._answering = pool._answering(worker, job)

    @property
    def alive(self) -> bool:
        """Not settled, and its worker has not died as it was fed."""
        return self._worker is not None

    def _write(self, data: bytes) -> None:
        worker = self._worker
        assert worker is not None
        stdin = worker.proc.stdin
        assert stdin is not None
        stdin.write(data)

    async def send(self, piece: bytes) -> None:
        """The next piece of the body, written to the worker once it has taken in all but
        about a pipe's worth of the ones before (nothing when it has died)."""
        worker = self._worker
        if worker is None or not piece:
            return
        stdin = worker.proc.stdin
        assert stdin is not None
        try:
            stdin.write(CHUNK.pack(len(piece)))
            stdin.write(piece)
            self.sent += len(piece)
            await stdin.drain()
        except OSError:  # it died (its pipe broke): the caller decodes the body itself
            self._worker = None
            self.died = True
            self._settle(worker, idle=False, kill=False)

    def end(self) -> None:
        """The body is complete: the worker finishes inflating it and holds it."""
        if self._worker is not None:
            self._write(CHUNK.pack(0))
            self._ended = True

    def taken(
        self, job: Job
    ) -> tuple[_Worker, asyncio.Semaphore, asyncio.Future[bytes | str] | None] | None:
        """The worker, which holds the whole body, its slot, and its answer to ``job`` if
        it is being read already, for the job on it; ``None`` when it died as it was fed
        (:attr:`died`) or the feed was settled or cut short, or ``job`` is not the one it
        was named (its worker is then ended: it may have said parts of another)."""
        worker, self._worker = self._worker, None
        if worker is None or not self._ended or (self._answering is not None and job != self.job):
            if worker is not None:
                self._settle(worker, idle=False)
            return None
        self.pool.feeding -= 1
        answering, self._answering = self._answering, None
        return worker, self._slots, answering

    def _settle(self, worker: _Worker, *, idle: bool, kill: bool = True) -> None:
        """The worker given back unused (see :meth:`ListWorkers._settle`); where its answer
        was being read, once that read is over (a part is read in a thread from its memory
        file: the file is not closed under it), and the worker ended."""
        answering, self._answering = self._answering, None
        if answering is None:
            self.pool._settle(worker, self._slots, idle=idle, kill=kill)
        else:
            self.pool._settle_after(answering, worker, self._slots, kill=kill)

    def release(self) -> None:
        """Not wanted (the body is decoded here): a worker that holds the whole body frees
        it and is idle again; one in the middle of it is ended."""
        worker, self._worker = self._worker, None
        if worker is None:
            return
        idle = self._ended and self._answering is None  # (else it may have said parts)
        if idle:
            stdin = worker.proc.stdin
            if stdin is None or stdin.is_closing():
                idle = False
            else:
                stdin.write(REQUEST.pack(0, 0, DROP))
        self._settle(worker, idle=idle)

    def abandon(self) -> None:
        """The body cut short (the caller went, the upstream broke off): the worker ended."""
        worker, self._worker = self._worker, None
        if worker is not None:
            self._settle(worker, idle=False)

    def __del__(self) -> None:
        if self._worker is not None:  # dropped unsettled: released on the event loop
            with contextlib.suppress(RuntimeError):  # (the loop is closed: nothing to free)
                self._loop.call_soon_threadsafe(self.release)


class ListWorkers:
    """The gateway's list worker processes (one set per process, shared by every cluster).

    ``count`` 0: none, every list is decoded by the gateway itself.  A worker is a child
    process (:mod:`gateway.core.lists.worker`) that serves one list at a time over its stdin
    and stdout; the gateway's own modules and threads are never copied into it.
    """

    def __init__(
        self,
        count: int,
        counted: Callable[[str], None] | None = None,
        *,
        command: Sequence[str] = COMMAND,
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
        #: Answers in parts being read (:class:`_Parts`), until their end.
        self._streams: set[_Parts] = set()
        #: Answers read as their bodies are fed (:meth:`_answering`), until taken or over.
        self._early: set[asyncio.Task[Any]] = set()
        #: Lists projected by a worker, and lists a worker gave back (not done, or died).
        self.projected = 0
        self.returned = 0
        #: Bodies fed to a worker as they arrived (:meth:`feed`), and those open now.
        self.fed = 0
        self.feeding = 0

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

    async def feed(self, gzipped: bool, job: Job | None = None) -> Feed | None:
        """A worker to feed a large list body to as it arrives (:class:`Feed`), if one is
        free now (else ``None``: the body is read whole and handed over after, as before);
        ``gzipped``: it inflates each piece as it comes; ``job``: the job to come on it,
        when known (a compact job is then made as the body comes:
        :class:`~gateway.core.lists.compacting.Streaming`)."""
        # every worker busy: no wait here (the body is read meanwhile)
        held = await self._slot_and_worker(wait=False)
        if held is None:
            return None
        self.fed += 1
        return Feed(self, *held, gzipped, job)

    async def run(self, body: Undecoded, job: Job) -> bytes | None:
        """``job`` done on ``body`` in a worker (:func:`project`: JSON; :func:`wire`: see
        :func:`split_wire`); ``None`` when the caller must decode it and do it itself.
        A body fed to a worker as it arrived (``body.feed``) is done by that worker.

        Raises:
            RequestEntityTooLarge: more items than the body's cap.
        """
        feed, body.feed = body.feed, None
        if isinstance(feed, Feed):
            if feed.pool is self and self.enabled:
                taken = feed.taken(job)
                if taken is not None:
                    worker, slots, answering = taken
                    call = worker.call_held(job, body.cap, answering)
                    return await self._done(body, worker, slots, call)
                if feed.died:  # it died as it was fed: decoded by the caller, as before
                    self._died()
                    return None
            feed.release()  # (settled already, or another pool's: handed over whole)
        held = await self._slot_and_worker(wait=True)
        if held is None:
            return None
        worker, slots = held
        call = worker.call(job, body.cap, body.data, gzipped=body.gzipped)
        return await self._done(body, worker, slots, call)

    async def _slot_and_worker(self, *, wait: bool) -> tuple[_Worker, asyncio.Semaphore] | None:
        """A slot of the pool and a worker in it (started if none is idle), or ``None``: no
        workers (or none can start), or, without ``wait``, every slot taken."""
        if not self.enabled:
            return None
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.count)
        slots = self._slots
        if not wait and slots.locked():
            return None
        await slots.acquire()
        try:
            worker = await self._take()
        except OSError as exc:
            slots.release()
            self._give_up(f"a list worker cannot start ({exc})")
            return None
        except BaseException:
            slots.release()
            raise
        return worker, slots

    async def _done(
        self,
        body: Undecoded,
        worker: _Worker,
        slots: asyncio.Semaphore,
        call: Coroutine[Any, Any, bytes | str],
    ) -> bytes | None:
        """The answer of ``call``, a request to ``worker``, which holds a slot of ``slots``
        (given back here, or by an answer in parts at its end)."""
        handed = False  # to an answer in parts, which gives the worker and the slot back
        try:
            try:
                done = await call
            except (OSError, asyncio.IncompleteReadError):
                # The worker died (killed, out of memory): this list is decoded here, and
                # the next one starts a new worker, unless they all die at once.
                self._drop(worker)
                self._died()
                return None
            except BaseException:
                self._drop(worker, kill=True)  # cancelled mid-request: pipes mid-frame
                raise
            self._deaths = 0
            more = done.more if isinstance(done, Sliced) else None
            if isinstance(more, _Parts):
                self._streams.add(more)
                more.ended = lambda answered: self._after_parts(more, worker, answered, slots)
                handed = True
            elif self._closed:
                self._drop(worker)
            else:
                self._idle.append(worker)
        finally:
            if not handed:
                slots.release()
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

    def _died(self) -> None:
        """A worker ended without answering: counted, and after :data:`GIVE_UP` in a row,
        no more workers."""
        self.returned += 1
        self._counted("died")
        self._deaths += 1
        if self._deaths >= GIVE_UP:
            self._give_up(f"{self._deaths} list workers in a row ended without answering")
        else:
            log.warning("a list worker process ended unexpectedly; starting a new one")

    def _settle(
        self, worker: _Worker, slots: asyncio.Semaphore, *, idle: bool, kill: bool = True
    ) -> None:
        """A fed worker given back unused: idle again (``idle``, it is well), else ended
        (``kill``: it may be in the middle of a body; else it died); its slot given back."""
        self.feeding -= 1
        if idle and not self._closed and worker.proc.returncode is None:
            self._idle.append(worker)
        else:
            self._drop(worker, kill=kill)
        slots.release()

    def _answering(self, worker: _Worker, job: Job) -> asyncio.Task[bytes | str]:
        """``worker``'s answer to ``job`` read from now on (:class:`Feed`), while its body
        is fed: the first part read as soon as it is said (in a thread), the next ones by
        its :class:`_Parts`."""
        task = asyncio.create_task(worker._answer(job), name="list-worker-fed-answer")
        self._early.add(task)
        task.add_done_callback(self._early.discard)
        task.add_done_callback(_retrieved)  # (a worker that died: its caller learns so)
        return task

    def _settle_after(
        self,
        answering: asyncio.Future[bytes | str],
        worker: _Worker,
        slots: asyncio.Semaphore,
        *,
        kill: bool = True,
    ) -> None:
        """A fed worker whose answer was being read (:meth:`_answering`) given back unused:
        the read stopped, and once it is over (a part being read in a thread goes to its
        end; parts read after it, by its :class:`_Parts`, too), the worker ended."""

        def read(done: asyncio.Future[bytes | str]) -> None:
            found = None if done.cancelled() or done.exception() is not None else done.result()
            more = found.more if isinstance(found, Sliced) else None
            if isinstance(more, _Parts):
                more.close()
                over = asyncio.ensure_future(more.over())
                self._early.add(over)
                over.add_done_callback(self._early.discard)
                over.add_done_callback(lambda _: self._settle(worker, slots, idle=False, kill=kill))
            else:
                self._settle(worker, slots, idle=False, kill=kill)

        if answering.done():
            read(answering)
        else:
            answering.cancel()
            answering.add_done_callback(read)

    def _after_parts(
        self, parts: _Parts, worker: _Worker, answered: bool, slots: asyncio.Semaphore
    ) -> None:
        """An answer in parts over: its worker idle again if it said its last part, else
        stopped (its caller went, or it died), and its slot given back."""
        self._streams.discard(parts)
        if answered and not self._closed:
            self._idle.append(worker)
        else:
            self._drop(worker, kill=not answered)
        slots.release()

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
        for early in list(self._early):  # answers read as their bodies were fed
            early.cancel()
        while self._early:  # (their reads in threads over, and their parts' reads)
            await asyncio.wait(list(self._early))
        streams = list(self._streams)
        for parts in streams:  # answers being read: their workers are stopped
            parts.close()
        # ... once their reads are over: a read or an emptying of the memory file runs in a
        # thread to its end, and the file is closed with the worker (its descriptor, reused
        # at once, would be another file's)
        for parts in streams:
            await parts.over()
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

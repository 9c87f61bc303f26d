"""A list worker process: its main loop, which does one list job at a time
(:func:`gateway.core.lists.jobs.work`), and the frames it reads and writes.

The gateway's pool (:mod:`gateway.core.lists.pool`) starts each worker as a fresh
interpreter running :func:`main` (:data:`COMMAND`): nothing of the gateway is forked or
re-imported there (not its threads, gRPC's among them, nor the script that started it), and
it imports what a job needs (:mod:`~gateway.core.lists.jobs`,
:mod:`~gateway.core.lists.projections`, :mod:`~gateway.core.lists.protowire`, ``msgspec``,
``orjson``) and little else: ``gateway.core`` is registered as a bare package before, so that
the core's front door (``gateway/core/__init__.py``, which imports all of the core, httpx
among it) is not run there (``tests/core/lists/test_worker.py`` holds it to that).

It speaks a small framed protocol over its stdin and stdout, one list at a time; the body
itself goes through a memory file the two share (Linux), mapped here, not sent down the pipe,
or, fed (:data:`FED`), comes down the pipe a piece at a time as the gateway reads it from the
upstream, inflated here as it arrives; the job on it comes after (:data:`HELD`).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import itertools
import mmap
import os
import pickle
import signal
import struct
import sys
import zlib
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO, Final

from gateway.core.lists.body import over_cap
from gateway.core.lists.compacting import NotCompact, Streaming, read_list
from gateway.core.lists.gzipped import Gunzipping
from gateway.core.lists.jobs import NOT_DONE, OVER_CAP, work

__all__ = [
    "ANSWER",
    "CHUNK",
    "COMMAND",
    "DROP",
    "FED",
    "HELD",
    "PART_ALIGN",
    "REQUEST",
    "STATUS_DONE",
    "STATUS_NOT_DONE",
    "STATUS_OVER_CAP",
    "STATUS_PART",
    "STATUS_PARTS_END",
    "STATUS_SHARED",
    "main",
    "part_after",
    "serve",
]

# A request: ``<QQB`` (the pickled job's size, the body's size, whether the body is in the
# shared memory file, or one of the modes below), the pickled ``(job, cap, gzipped)``, the
# body (when not shared).
REQUEST: Final = struct.Struct("<QQB")
#: A request's mode (its third field) for a body fed as it arrives: the pickled ``gzipped``,
#: or ``(gzipped, job)`` where the job to come is known, then the body's pieces, each a
#: :data:`CHUNK` (its length) and its bytes, then a :data:`CHUNK` of 0 (the end).  No
#: answer: the worker inflates each piece as it comes and holds the body for the request
#: after, which is :data:`HELD` (the job on it, answered as any) or :data:`DROP` (the body
#: freed, no answer).  A body that could not be inflated is held as such, and its job
#: answered ``STATUS_NOT_DONE``.  A compact job named with the body is made as the body
#: comes (:class:`~gateway.core.lists.compacting.Streaming`: its parts written into the
#: memory file as they are made, said only when the job comes, then all at once).
FED, HELD, DROP = 2, 3, 4
#: A fed piece's length (0: the body's end).
CHUNK: Final = struct.Struct("<Q")
# An answer: ``<BQ`` (status, length), then the job's bytes (STATUS_DONE) or nothing.
ANSWER: Final = struct.Struct("<BQ")
#: An answer's status: done, not done (the caller does the work), over the list cap, done
#: with the answer's bytes in the shared memory file (from its start), not in the pipe.
STATUS_DONE, STATUS_NOT_DONE, STATUS_OVER_CAP, STATUS_SHARED = 0, 1, 2, 3
#: A compact job's answer in parts (:func:`~gateway.core.lists.compacting.written_parts`),
#: each in the shared memory file as soon as it is written, so that the gateway takes one in
#: while the next is made: ``STATUS_PART`` and its length for each (the first at the file's
#: start, each next at the end of the one before rounded up to :data:`PART_ALIGN`), then
#: ``STATUS_PARTS_END`` and the count of parts; or, when one cannot be made, after any
#: number of parts, ``STATUS_NOT_DONE`` (the gateway does the whole job itself).
STATUS_PART, STATUS_PARTS_END = 4, 5
#: Where a part may start in the memory file (the gateway maps each part on its own).
PART_ALIGN: Final = mmap.ALLOCATIONGRANULARITY
#: Buffers per ``pwritev`` (Linux's ``IOV_MAX``).
_IOV_MAX: Final = 1024

#: What starts a worker: :func:`main` in a fresh interpreter, ``gateway.core`` a bare package
#: (its ``__init__``, the core's front door, left unrun: a worker needs a few of its modules,
#: not all of the core).  The pool appends the shared memory file's descriptor, if any.
COMMAND: Final = (
    sys.executable,
    "-c",
    "import importlib.machinery, os, sys, types, gateway\n"
    "core = types.ModuleType('gateway.core')\n"
    "core.__spec__ = importlib.machinery.ModuleSpec('gateway.core', None, is_package=True)\n"
    "core.__path__ = [os.path.join(os.path.dirname(gateway.__file__), 'core')]\n"
    "sys.modules['gateway.core'] = core\n"
    "from gateway.core.lists.worker import main\n"
    "main()\n",
)


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
    held: bytearray | None = None  # a fed body (None: none, or one that could not be inflated)
    made: _Made | None = None  # the answer made as it was fed, in the memory file
    while True:
        head = stdin.read(REQUEST.size)
        if len(head) < REQUEST.size:
            return  # the gateway closed the pipe (or is gone): done
        spec_size, body_size, in_shared = REQUEST.unpack(head)
        if in_shared == FED:
            fed_spec = pickle.loads(stdin.read(spec_size))
            gzipped, fed_job = fed_spec if type(fed_spec) is tuple else (fed_spec, None)
            streaming = (
                Streaming(fed_job)
                if shared is not None and fed_job is not None and fed_job[0] == "compact"
                else None
            )
            try:
                held, made = _fed(stdin, gzipped, streaming, shared, stdout)
            except EOFError:
                return  # the gateway is gone mid-body
            continue
        if in_shared == DROP:
            if made is not None and made.sizes and not made.said:
                os.ftruncate(made.shared, 0)  # its parts' pages freed (none said: the
                # gateway drops no body whose parts were said, it ends the worker)
            held = made = None
            continue
        job, cap, gzipped = pickle.loads(stdin.read(spec_size))  # the gateway's own job
        if in_shared == HELD:
            fed, held = held, None
            streamed, made = made, None
            if streamed is not None:
                _held(streamed, fed, job, cap, stdout=stdout, decoded=decoded)
                stdout.flush()
                decoded.clear()
                del fed, streamed
                continue
            answer = (
                NOT_DONE if fed is None else work(fed, job, cap, decoded, parts=shared is not None)
            )
            del fed
        elif in_shared and shared is not None and body_size:
            # Mapped, not copied: the decode reads the gateway's copy in place.
            # (a compact job's parts are made after: they hold nothing of the mapping)
            with (
                mmap.mmap(shared, body_size, access=mmap.ACCESS_READ) as mapped,
                memoryview(mapped) as body,
            ):
                answer = work(body, job, cap, decoded, gzipped=gzipped, parts=True)
            os.ftruncate(shared, 0)  # its pages go back to the system, off the gateway's loop
        else:
            answer = work(stdin.read(body_size), job, cap, decoded, gzipped=gzipped)
        if isinstance(answer, Iterator):  # a compact job's parts, into the memory file
            assert shared is not None
            _stream(answer, stdout, shared)
        elif isinstance(answer, list):  # buffers, written one after the other
            size = sum(map(len, answer))
            if shared is not None:
                _write_shared(shared, answer)
                stdout.write(ANSWER.pack(STATUS_SHARED, size))
            else:
                stdout.write(ANSWER.pack(STATUS_DONE, size))
                for part in answer:
                    stdout.write(part)
        elif isinstance(answer, bytes):
            stdout.write(ANSWER.pack(STATUS_DONE, len(answer)))
            stdout.write(answer)
        else:
            stdout.write(ANSWER.pack(STATUS_OVER_CAP if answer == OVER_CAP else STATUS_NOT_DONE, 0))
        stdout.flush()
        decoded.clear()


class _Made:
    """A compact job's answer made as its body is fed (:class:`Streaming`): its parts
    written into the memory file (each at :func:`part_after` the one before) and said on
    ``stdout`` as they are (:data:`STATUS_PART`), so that the gateway reads each while the
    rest of the body comes.  Once a part is said, the file is the gateway's to empty."""

    __slots__ = ("at", "job", "said", "shared", "sizes", "stdout", "streaming")

    def __init__(self, streaming: Streaming, shared: int, stdout: BinaryIO) -> None:
        self.streaming = streaming
        self.shared = shared
        self.stdout = stdout
        self.job = streaming.job
        #: The parts' sizes, and how many of them are said.
        self.sizes: list[int] = []
        self.said = 0
        self.at = 0

    @property
    def done(self) -> bool:
        """Made whole (:meth:`Streaming.finish` gave its last parts)."""
        return self.streaming.done

    def write(self, parts: list[list[Any]], *, say: bool = True) -> None:
        """``parts`` into the memory file, each said as soon as it is there (``say``)."""
        for part in parts:
            size = sum(map(len, part))
            _write_shared(self.shared, part, self.at)
            self.sizes.append(size)
            self.at = part_after(self.at, size)
            if say:
                self.stdout.write(ANSWER.pack(STATUS_PART, size))
                self.stdout.flush()
                self.said += 1


def _held(
    made: _Made, fed: bytearray | None, job: Any, cap: int, *, stdout: BinaryIO, decoded: list[Any]
) -> None:
    """The answer to ``job`` on a body fed with a compact job named (:class:`_Made`).

    Made whole, and ``job`` the one named: its parts not said yet said, and its end
    (:data:`STATUS_PARTS_END`), or, more items than ``cap``, ``STATUS_OVER_CAP`` as
    :func:`~gateway.core.lists.jobs.work` says, where no part was said (the last parts
    are said only now, after the cap is known; the gateway names no job for a capped list,
    whose parts are then never said as the body comes).  Else the job is done on the whole
    body, as for a body fed without one, the parts said by then left out (the very same
    parts: :class:`Streaming` makes the whole body's first parts); where that cannot be
    (another job, a cap, a body the worker could not inflate), after parts said,
    ``STATUS_NOT_DONE`` (the gateway's answer given up).
    """
    said = made.said
    if made.done and job == made.job:
        rest, count = made.streaming.rest, made.streaming.count
        if not (cap and over_cap({**rest, "items": range(count)}, cap)):
            _stream(iter(()), stdout, made.shared, made.sizes, said)
        elif not said:
            os.ftruncate(made.shared, 0)  # the parts' pages freed
            stdout.write(ANSWER.pack(STATUS_OVER_CAP, 0))
        else:
            stdout.write(ANSWER.pack(STATUS_NOT_DONE, 0))
        return
    answer: Any = NOT_DONE
    if not said:  # as for a body fed without a job
        if made.sizes:
            os.ftruncate(made.shared, 0)
        if fed is not None:
            answer = work(fed, job, cap, decoded, parts=True)
        if isinstance(answer, Iterator):
            _stream(answer, stdout, made.shared)
        else:
            status = STATUS_OVER_CAP if answer == OVER_CAP else STATUS_NOT_DONE
            stdout.write(ANSWER.pack(status, 0))
        return
    if fed is not None and job == made.job and not cap:
        whole = read_list(fed)  # (the parts said hold the list's fields as its head had them)
        if whole is not None and made.streaming.head == {
            k: v for k, v in whole.items() if k != "items"
        }:
            answer = work(fed, job, 0, decoded, parts=True)
        del whole
    if isinstance(answer, Iterator):
        unsaid = itertools.islice(answer, said, None)
        _stream(unsaid, stdout, made.shared, made.sizes[:said], said)
    else:
        stdout.write(ANSWER.pack(STATUS_NOT_DONE, 0))


def _fed(
    stdin: BinaryIO,
    gzipped: bool,
    streaming: Streaming | None = None,
    shared: int | None = None,
    stdout: BinaryIO | None = None,
) -> tuple[bytearray | None, _Made | None]:
    """A body fed a piece at a time (:data:`FED`), each inflated as it comes when
    ``gzipped``: the body (inflated), or ``None`` when it could not be (not gzip, damaged,
    cut short: the gateway's own inflating then says what is wrong); and, with
    ``streaming``, a compact job's answer made as it comes (:class:`_Made`: its parts
    written into the ``shared`` memory file and said on ``stdout``; ``None``: none asked,
    or none made where none was said).

    Raises:
        EOFError: the pipe ended in the middle of the body.
    """
    # One buffer grown as the pieces come (its pages moved, not copied, as it grows): the
    # body whole at its end, where joining the pieces then would copy it all (~100 ms for
    # 155 MB on a busy machine, after the last piece: the very wait feeding saves).
    body = bytearray()
    inflating = Gunzipping() if gzipped else None
    failed = False
    made = None
    if streaming is not None and shared is not None and stdout is not None:
        made = _Made(streaming, shared, stdout)
    while True:
        (size,) = CHUNK.unpack(_exactly(stdin, CHUNK.size))
        if not size:
            break
        piece = _exactly(stdin, size)
        if failed:
            continue
        if inflating is None:
            body += piece
        else:
            try:
                for inflated in inflating.feed(piece):
                    body += inflated
            except zlib.error:
                failed = True
                body = bytearray()
        del piece
        if made is not None and not failed:
            made.write(made.streaming.step(body))
    if inflating is not None and not failed:
        try:
            inflating.end()
        except EOFError:
            failed = True
    if made is not None and not failed:
        last = made.streaming.finish(body)
        if last is not None:
            made.write(last, say=False)  # (said with the job: after the cap is known)
    if made is not None and not made.sizes and not made.done:
        made = None  # nothing said: the job on the body as if none was named
    return (None if failed else body), made


def _exactly(stdin: BinaryIO, size: int) -> bytes:
    """``size`` bytes of ``stdin``.

    Raises:
        EOFError: it ends first.
    """
    data = stdin.read(size)
    if len(data) < size:
        raise EOFError("the gateway's pipe ended in the middle of a body")
    return data


def part_after(at: int, size: int) -> int:
    """Where the part after one of ``size`` bytes at ``at`` starts in the memory file."""
    return at + max(1, -(-size // PART_ALIGN)) * PART_ALIGN


def _stream(
    parts: Iterator[list[Any]],
    stdout: BinaryIO,
    shared: int,
    ready: Sequence[int] = (),
    said: int = 0,
) -> None:
    """A compact job's answer, part by part into the memory file, each said on ``stdout``
    as soon as it is there (see :data:`STATUS_PART`); ``ready``: the sizes of parts in the
    file already, from its start (:class:`_Made`), said first but the first ``said``."""
    at = count = 0
    for size in ready:
        if count >= said:
            stdout.write(ANSWER.pack(STATUS_PART, size))
        count += 1
        at = part_after(at, size)
    try:
        for part in parts:
            size = sum(map(len, part))
            _write_shared(shared, part, at)
            del part
            stdout.write(ANSWER.pack(STATUS_PART, size))
            stdout.flush()
            count += 1
            at = part_after(at, size)
    except (TypeError, NotCompact):  # an item it cannot write as the gateway would
        stdout.write(ANSWER.pack(STATUS_NOT_DONE, 0))
        return
    stdout.write(ANSWER.pack(STATUS_PARTS_END, count))


def _write_shared(shared: int, parts: list[bytes], at: int = 0) -> None:
    """``parts`` one after the other into the memory file, from ``at`` (a large answer:
    the gateway reads it in one call, in a thread, where a pipe would hand it over in
    pieces, each a step of the gateway's event loop, and copy it once more at the end)."""
    for start in range(0, len(parts), _IOV_MAX):
        chunk = parts[start : start + _IOV_MAX]
        want = sum(map(len, chunk))
        wrote = os.pwritev(shared, chunk, at)
        if wrote != want:  # a short write (not seen on a memory file): the rest one by one
            data = b"".join(chunk)[wrote:]
            while data:
                n = os.pwrite(shared, data, at + wrote)
                data, wrote = data[n:], wrote + n
        at += want


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


#: How much lower a worker's scheduling priority is than the gateway's (``nice``): where the
#: cores are contended, the event loop (small requests, streams) runs before list work, which
#: is background work a caller waits for as a whole.  On a free core a worker runs as fast.
NICENESS: Final = 10


def main() -> None:
    """A worker process: serves its stdin and stdout until EOF; ``argv[1]``, when given, is
    the descriptor of the memory file it shares with the gateway."""
    # Ctrl-C reaches the whole process group, but the gateway ends its workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a priority that cannot be lowered: the worker runs as the gateway does
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    _widen(sys.stdin.fileno())
    _widen(sys.stdout.fileno())
    serve(sys.stdin.buffer, sys.stdout.buffer, int(sys.argv[1]) if len(sys.argv) > 1 else None)


if __name__ == "__main__":
    main()

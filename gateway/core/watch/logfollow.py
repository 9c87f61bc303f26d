"""A pod log follow that survives the upstream (``docs/watch-semantics.md`` rules 27 to 30).

The kubelet's follow stream ends for three reasons: the container exited (the follow is
over), log rotation or the kubelet's idle timeout (it is not), and a broken connection (it
is not either).  :class:`LogFollower` asks for ``timestamps=true`` so that every line says
where it is; after a break, or a clean end while the same container instance still runs, it
asks again with ``sinceTime`` set to the second of the last delivered line.  The kubelet
then repeats that whole second, so lines older than the last delivered one, and as many
lines of exactly its timestamp as were delivered, are dropped: nothing is delivered twice
and nothing is skipped.  Timestamps are removed again unless the caller asked for them.

Which instance of the container runs (restartCount, containerID, startedAt) is read from
the pod's status when the follow starts and at each clean end: the same running instance
means the kubelet merely ended the stream, anything else means the container exited.  If
the status cannot be read (no ``get`` on pods, say), a clean end ends the follow.  A
resumed request that finds the pod gone (404) or the container waiting again (400) ends
the follow too; errors of the first request, transient ones included, go to the caller.

Bytes are split into lines here (chunks split lines and characters; the last line may lack
a newline); a partial line cut by a break is discarded, since the resumed request repeats it
whole.  ``limitBytes`` is applied here, to the bytes the caller sees, because a resumed
request cannot know how many the caller has already had.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, replace
from typing import Any

from gateway.core import errors
from gateway.core.model.options import LogOptions
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.budget import scope_of
from gateway.core.upstream.credentials import Credential
from gateway.core.watch.watcher import Backoff

log = logging.getLogger(__name__)

#: Failures after which a follow reconnects (with backoff) instead of ending.
TRANSIENT = (
    errors.Unavailable,
    errors.Timeout,
    errors.ServiceUnavailable,
    errors.TooManyRequests,
    errors.Internal,
)

Stamp = tuple[int, int]  # unix seconds, nanoseconds


def parse_stamp(text: bytes) -> Stamp | None:
    """The kubelet's RFC 3339 timestamp (any fraction length, ``Z`` or an offset)."""
    try:
        raw = text.decode("ascii")
        if raw.endswith(("Z", "z")):
            base, offset = raw[:-1], 0
        else:
            base, sign, zone = raw[:-6], raw[-6], raw[-5:]
            if sign not in "+-" or zone[2] != ":":
                return None
            offset = (int(zone[:2]) * 3600 + int(zone[3:]) * 60) * (1 if sign == "+" else -1)
        whole, _, fraction = base.partition(".")
        if fraction and not fraction.isdigit():
            return None
        parsed = dt.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    except (UnicodeDecodeError, ValueError, IndexError):
        return None
    nanos = int((fraction + "000000000")[:9]) if fraction else 0
    return int(parsed.timestamp()) - offset, nanos


def since_time(stamp: Stamp) -> str:
    """``sinceTime`` for the second of ``stamp`` (what the kubelet compares at)."""
    return dt.datetime.fromtimestamp(stamp[0], dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class RawLine:
    """One line as delivered: its text bytes (no timestamp, no newline), its kubelet
    timestamp (the follow asks for them to resume exactly) and whether the caller asked for
    ``timestamps``."""

    data: bytes
    stamp: bytes | None
    timestamps: bool = False

    @property
    def timestamp(self) -> bytes | None:
        """The timestamp the caller is to see (``None`` unless it asked for them)."""
        return self.stamp if self.timestamps else None


@dataclass(slots=True)
class _Position:
    """The last delivered line's timestamp and how many delivered lines carry exactly it."""

    stamp: Stamp | None = None
    count: int = 0

    def advance(self, stamp: Stamp) -> None:
        if stamp == self.stamp:
            self.count += 1
        else:
            self.stamp, self.count = stamp, 1


#: The longest line a follow holds before delivering it in pieces.
MAX_LINE_BYTES = 1024 * 1024


class _Ended(Exception):
    """The caller's ``limitBytes`` is used up."""


class LogFollower:
    """The lines of one followed container log, across upstream breaks.

    Args:
        adapter: the shared upstream adapter.
        namespace: the pod's namespace.
        name: the pod.
        options: the caller's options (``follow`` and ``timestamps`` are managed here).
        credential: the caller's credential, for every upstream call.
        backoff: reconnect policy after failures.
        max_line_bytes: a line longer than this (one that never ends) is delivered in
            pieces of this size rather than held whole.

    Attributes:
        reconnects: how many times the follow was resumed.
    """

    def __init__(
        self,
        adapter: KubeAdapter,
        *,
        namespace: str,
        name: str,
        options: LogOptions,
        credential: Credential,
        backoff: Backoff = Backoff(),
        clock: Callable[[], float] = time.monotonic,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self.adapter = adapter
        self.max_line_bytes = max_line_bytes
        self.namespace = namespace
        self.name = name
        self.options = options
        self.credential = credential
        self.backoff = backoff
        self.reconnects = 0
        self._clock = clock
        self._budget = options.limit_bytes
        self._position = _Position()
        #: A last line without its newline, held until we know whether the follow ends.
        self._tail: tuple[bytes, bytes | None, Stamp | None] | None = None
        self._opened = False

    # -- public ----------------------------------------------------------------------------

    async def lines(self) -> AsyncGenerator[RawLine, None]:
        """The lines, in order; ends when the container stops (or ``limitBytes`` is reached).

        Raises:
            GatewayError: an error of the first request (400 container choices, 403, 404...),
                or a non-transient error of a resumed one.
        """
        self.options.validate()
        # A follow holds an upstream stream for its whole life: it draws from the stream
        # budget (refused at once past the caller's share), released when it ends.
        lease = self.adapter.streams.acquire(scope_of(self.credential))
        try:
            async for line in self._lines():
                yield line
        finally:
            lease.release()

    async def _lines(self) -> AsyncGenerator[RawLine, None]:
        try:
            baseline = await self._instance()
        except TRANSIENT:
            baseline = None  # unknown: a clean end of the stream will end the follow
        failures = 0
        first = True
        while True:
            started = self._clock()
            delivered = 0
            self._tail = None
            self._opened = False
            try:
                async for line in self._one_stream(first):
                    delivered += 1
                    failures = 0
                    yield line
            except _Ended:
                return
            except (errors.NotFound, errors.BadRequest):
                if first:
                    raise
                # While we were away the pod went (404), or the container we followed
                # exited and the next one waits to start (400): the follow is over.
                return
            except TRANSIENT as exc:
                if first and not self._opened:
                    raise  # the follow never started: the caller learns it at once
                delay = exc.retry_after if exc.retry_after else self.backoff.delay(failures)
                log.info(
                    "log follow of %s/%s interrupted (%s); resuming in %.2fs",
                    self.namespace,
                    self.name,
                    exc.reason,
                    delay,
                )
                failures += 1
                await asyncio.sleep(delay)
            else:
                # A clean end: the container exited, or the kubelet ended the stream (log
                # rotation, idle timeout) while the same instance still runs.
                try:
                    current = await self._instance()
                except TRANSIENT:
                    current = None
                if baseline is None or current != baseline:
                    if self._tail is not None:
                        # the last line may lack its newline: it is a line all the same
                        try:
                            last = self._deliver(*self._tail)
                        except _Ended:
                            return
                        yield last
                    return
                # Resuming: a partial last line is served again, whole.
                if delivered == 0 and self._clock() - started < 1.0:
                    # an empty stream that ends at once is a failure, not progress
                    await asyncio.sleep(self.backoff.delay(failures))
                    failures += 1
            first = False
            self.reconnects += 1

    # -- internals -------------------------------------------------------------------------

    def _request_options(self, first: bool) -> LogOptions:
        options = replace(self.options, follow=True, timestamps=True, limit_bytes=None)
        if first or self._position.stamp is None:
            return options
        return replace(
            options,
            tail_lines=None,
            since_seconds=None,
            since_time=since_time(self._position.stamp),
        )

    async def _one_stream(self, first: bool) -> AsyncGenerator[RawLine, None]:
        """One upstream request's new lines; a clean end leaves a partial line in _tail."""
        resume = _Position(self._position.stamp, self._position.count)
        skip = resume.count

        def fresh(stamp: Stamp | None) -> bool:
            nonlocal skip
            if resume.stamp is None or stamp is None or stamp > resume.stamp:
                return True
            if stamp == resume.stamp and skip == 0:
                return True
            if stamp == resume.stamp:
                skip -= 1
            return False

        async with self.adapter.stream_log(
            self.name,
            namespace=self.namespace,
            options=self._request_options(first),
            credential=self.credential,
        ) as chunks:
            self._opened = True
            buffer = bytearray()
            async for chunk in chunks:
                buffer += chunk
                if b"\n" not in chunk:
                    if len(buffer) > self.max_line_bytes:
                        # A line that never ends must not grow forever: it goes out in
                        # pieces of max_line_bytes (the rest continues without a stamp).
                        piece = bytes(buffer[: self.max_line_bytes])
                        del buffer[: self.max_line_bytes]
                        stamp_text, stamp = _split(piece)
                        if fresh(stamp):
                            yield self._deliver(piece, stamp_text, stamp)
                            if self._budget == 0:
                                raise _Ended
                    continue
                *complete, rest = buffer.split(b"\n")
                buffer = bytearray(rest)
                for raw in complete:
                    stamp_text, stamp = _split(bytes(raw))
                    if fresh(stamp):
                        yield self._deliver(bytes(raw), stamp_text, stamp)
                        if self._budget == 0:
                            raise _Ended
        if buffer:
            stamp_text, stamp = _split(bytes(buffer))
            if fresh(stamp):
                self._tail = (bytes(buffer), stamp_text, stamp)

    def _deliver(self, raw: bytes, stamp_text: bytes | None, stamp: Stamp | None) -> RawLine:
        if stamp is not None:
            self._position.advance(stamp)
        data = raw[len(stamp_text) + 1 :] if stamp_text is not None else raw
        if self._budget is not None:
            # Count what the caller would have been served: "<stamp> " when it asked for
            # timestamps, the line, its newline; the last line may be cut.
            prefix = len(stamp_text) + 1 if self.options.timestamps and stamp_text else 0
            size = prefix + len(data) + 1
            if size < self._budget:
                self._budget -= size
            else:
                keep = self._budget - prefix
                self._budget = 0
                if keep <= 0:
                    raise _Ended
                data = data[:keep]
        return RawLine(data, stamp_text, self.options.timestamps)

    async def _instance(self) -> tuple[str, Any] | None:
        """Which instance of the container runs now (``None``: none, or we cannot tell)."""
        try:
            pod = await self.adapter.get(
                "pods", self.name, namespace=self.namespace, credential=self.credential
            )
        except TRANSIENT:
            raise
        except errors.GatewayError:
            return None
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        container = self.options.container
        if not container:
            containers = spec.get("containers") or []
            if len(containers) != 1:
                return None
            container = containers[0].get("name")
        for group in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
            for cs in status.get(group) or []:
                if isinstance(cs, dict) and cs.get("name") == container:
                    running = (cs.get("state") or {}).get("running")
                    if not isinstance(running, dict):
                        return None
                    return str(pod.get("metadata", {}).get("uid")), (
                        cs.get("restartCount"),
                        cs.get("containerID"),
                        running.get("startedAt"),
                    )
        return None


def _split(raw: bytes) -> tuple[bytes | None, Stamp | None]:
    """A line's leading timestamp (as sent, and parsed), if it has one."""
    head, sep, _ = raw.partition(b" ")
    if not sep:
        return None, None
    stamp = parse_stamp(head)
    return (head, stamp) if stamp is not None else (None, None)

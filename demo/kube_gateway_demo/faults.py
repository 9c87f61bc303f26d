"""Fault injection: the failures a client of a real apiserver must survive, on demand.

Every fault is armed in-process (``demo.faults.fail_requests(...)``); :meth:`Faults.reset`
disarms all of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kube_gateway_demo.status import DemoApiError, generic

ExpireMode = Literal["event", "http"]


@dataclass(slots=True)
class _Rule:
    remaining: int
    verb: str | None
    resource: str | None

    def matches(self, verb: str, resource: str) -> bool:
        if self.remaining <= 0:
            return False
        if self.verb is not None and self.verb != verb:
            return False
        if self.resource is None:
            return True
        return self.resource == resource or self.resource == resource.split("/", 1)[0]


@dataclass(slots=True)
class _FailRule(_Rule):
    status: int = 500
    message: str | None = None
    retry_after: int | None = None


@dataclass(slots=True)
class _DropRule(_Rule):
    after_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class WatchCut:
    """How watch streams are being cut short."""

    after_events: int
    cut_last_line: bool
    abrupt: bool


class Faults:
    """The fault switchboard of one demo upstream.

    Resource filters take a plural (``pods``), or a plural and subresource (``pods/log``);
    verb filters take a Kubernetes verb (``get``, ``list``, ``watch``, ``create``,
    ``update``, ``patch``, ``delete``, ``deletecollection``).
    """

    def __init__(self, compact: Callable[[], int]) -> None:
        self._compact = compact
        self.reset()

    def reset(self) -> None:
        """Disarm every fault and zero every counter."""
        self.watch_cut: WatchCut | None = None
        self._expire: list[tuple[int, ExpireMode]] = []
        self.delay_seconds = 0.0
        self._delay_verb: str | None = None
        self._fail: list[_FailRule] = []
        self._drop: list[_DropRule] = []
        self.initial_events_rejected = False
        self.watch_requests = 0
        self.failed_requests = 0
        self.dropped_requests = 0
        self.delayed_requests = 0
        self._hold_verb: str | None = None
        self._held = asyncio.Condition()
        self._release = asyncio.Event()
        #: Requests being held now (see :meth:`hold`).
        self.held_requests = 0

    # --- arming ------------------------------------------------------------------------------

    def close_watches_after(
        self, events: int, *, cut_last_line: bool = False, abrupt: bool = False
    ) -> None:
        """End every watch stream (current and future) after ``events`` event lines.

        Args:
            events: lines to deliver (initial ADDEDs and BOOKMARKs count).
            cut_last_line: send only the first half of the last line, then end.
            abrupt: drop the connection instead of ending the chunked body cleanly.
        """
        if events < 1:
            raise ValueError("events must be at least 1")
        self.watch_cut = WatchCut(events, cut_last_line, abrupt)

    def expire_watches(self, count: int = 1, *, mode: ExpireMode = "event") -> None:
        """Make the next ``count`` watch requests fail with 410 Expired.

        ``mode="event"`` answers HTTP 200 with one ERROR event (what the watch cache does);
        ``mode="http"`` answers HTTP 410 with a Status body.
        """
        self._expire.append((count, mode))

    def compact(self) -> int:
        """Compact every resource's history now: older resourceVersions answer 410.

        Returns:
            The resourceVersion compacted up to.
        """
        return self._compact()

    def set_delay(self, seconds: float, *, verb: str | None = None) -> None:
        """Delay every response (or those of ``verb``) by ``seconds`` until reset."""
        self.delay_seconds = max(0.0, seconds)
        self._delay_verb = verb

    def hold(self, *, verb: str) -> None:
        """Hold every request of ``verb`` (before it is answered) until :meth:`release`:
        a request that is certainly in flight, without timing.  ``openapi`` holds the
        reads of OpenAPI v3 documents (not of their index)."""
        self._hold_verb = verb
        self._release = asyncio.Event()

    def release(self) -> None:
        """Let the held requests (and later ones) go on."""
        self._hold_verb = None
        self._release.set()

    async def wait_held(self, count: int = 1) -> None:
        """Wait until ``count`` requests are being held."""
        async with self._held:
            await self._held.wait_for(lambda: self.held_requests >= count)

    def holding(self, verb: str) -> bool:
        """Whether requests of ``verb`` are to be held."""
        return self._hold_verb is not None and self._hold_verb == verb

    async def held(self, verb: str) -> None:
        """Hold a request of ``verb`` until :meth:`release` (the server calls this)."""
        release = self._release
        async with self._held:
            self.held_requests += 1
            self._held.notify_all()
        try:
            await release.wait()
        finally:
            self.held_requests -= 1

    def fail_requests(
        self,
        count: int,
        *,
        status: int = 500,
        verb: str | None = None,
        resource: str | None = None,
        message: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        """Answer the next ``count`` matching requests with ``status`` and an apiserver Status.

        A 429 or 503 with ``retry_after`` carries a ``Retry-After`` header and
        ``details.retryAfterSeconds``, like API priority and fairness does.
        """
        self._fail.append(_FailRule(count, verb, resource, status, message, retry_after))

    def drop_connections(
        self,
        count: int = 1,
        *,
        verb: str | None = None,
        resource: str | None = None,
        after_bytes: int | None = None,
    ) -> None:
        """Drop the connection mid-response for the next ``count`` matching requests.

        Headers and ``after_bytes`` body bytes (default: half of the first chunk) are sent,
        then the connection is closed without completing the body.
        """
        self._drop.append(_DropRule(count, verb, resource, after_bytes))

    def reject_initial_events(self, enabled: bool = True) -> None:
        """Behave like a server without the WatchList feature: refuse ``sendInitialEvents``."""
        self.initial_events_rejected = enabled

    # --- consulted by the server -------------------------------------------------------------

    def delay_for(self, verb: str) -> float:
        """Seconds to delay a request of ``verb``."""
        if self.delay_seconds > 0 and self._delay_verb in (None, verb):
            self.delayed_requests += 1
            return self.delay_seconds
        return 0.0

    def take_failure(self, verb: str, resource: str) -> DemoApiError | None:
        """Consume a matching failure rule."""
        for rule in self._fail:
            if rule.matches(verb, resource):
                rule.remaining -= 1
                self.failed_requests += 1
                return generic(rule.status, rule.message, rule.retry_after)
        return None

    def take_drop(self, verb: str, resource: str) -> int | None:
        """Consume a matching drop rule; returns the byte budget (-1: half the first chunk)."""
        for rule in self._drop:
            if rule.matches(verb, resource):
                rule.remaining -= 1
                self.dropped_requests += 1
                return -1 if rule.after_bytes is None else rule.after_bytes
        return None

    def take_expire(self) -> ExpireMode | None:
        """Consume one armed 410 for a watch request."""
        self.watch_requests += 1
        while self._expire:
            count, mode = self._expire[0]
            if count <= 0:
                self._expire.pop(0)
                continue
            self._expire[0] = (count - 1, mode)
            return mode
        return None

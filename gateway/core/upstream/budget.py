"""Budgets: counted shares of a limited thing, per identity and in total, refused at once.

The gateway serves many callers through one process and one upstream, so every shared
resource has a budget and a fast refusal: a caller past its share gets
:class:`~gateway.core.errors.ResourceExhausted` immediately (gRPC ``RESOURCE_EXHAUSTED``,
GraphQL ``extensions.code``), never a pool timeout, and nobody else notices.

Identities are never kept in clear text: a scope is :func:`scope_of` a credential, a
hash of the token.  :class:`Newcomers` is the one budget of what callers not yet known
cost (the reviews that learn who a token is), shared by every way in.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from gateway.core import errors

ANONYMOUS_SCOPE = "anonymous"


class Bearer(Protocol):
    """What a scope is made of: a caller's bearer token, or the user the gateway
    impersonates for it, or none (``credentials.Credential.subject``).

    Structural, so that budgets need not import the adapter that imports them.
    """

    @property
    def subject(self) -> str | None: ...


def scope_of(credential: Bearer) -> str:
    """The key of an identity: a hash of its token or impersonated user (never the token
    itself), or ``anonymous``."""
    subject = credential.subject
    if not subject:
        return ANONYMOUS_SCOPE
    return hashlib.blake2b(subject.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass(eq=False, slots=True)
class Lease:
    """One unit of a :class:`Budget`, held until :meth:`release` (idempotent)."""

    budget: Budget | None
    scope: str

    def release(self) -> None:
        budget, self.budget = self.budget, None
        if budget is not None:
            budget._release(self.scope)


@dataclass(slots=True)
class Budget:
    """At most ``total`` units at once, and at most ``per_scope`` for one identity.

    Args:
        what: what is counted, for the refusal message (``"upstream streams"``).
        total: units for everyone together.
        per_scope: units for one identity.
    """

    what: str
    total: int
    per_scope: int
    used: int = 0
    by_scope: Counter[str] = field(default_factory=Counter)
    #: Refusals so far (for the metrics endpoint).
    refused: int = 0

    def acquire(self, scope: str) -> Lease:
        """Take one unit for ``scope``.

        Raises:
            ResourceExhausted: the identity's share or the total is spent.
        """
        if self.by_scope[scope] >= self.per_scope:
            self.refused += 1
            raise errors.ResourceExhausted(
                f"too many {self.what} for this identity (at most {self.per_scope} at once); "
                "close some before opening more"
            )
        if self.used >= self.total:
            self.refused += 1
            raise errors.ResourceExhausted(
                f"the gateway serves at most {self.total} {self.what} at once; retry later",
                retry_after=1.0,
            )
        self.used += 1
        self.by_scope[scope] += 1
        return Lease(self, scope)

    def _release(self, scope: str) -> None:
        self.used -= 1
        left = self.by_scope[scope] - 1
        if left > 0:
            self.by_scope[scope] = left
        else:
            del self.by_scope[scope]


class Newcomers:
    """The one budget of the reviews that callers the gateway does not know yet cost.

    Before anything is kept about a caller's token, learning who it is costs an upstream
    review: in forward mode a SelfSubjectReview per cluster (:mod:`gateway.core.fleet.visibility`),
    in impersonate mode the home cluster's TokenReview.  A flood of fresh random tokens
    would be a flood of reviews, and per-identity budgets do not hold it back (each token
    is a new identity).  So reviews of a scope that is not *known* share one token bucket,
    for everyone together: ``rate`` a second, at most ``burst`` at once after a quiet time;
    past it :meth:`admit` refuses at once with
    :class:`~gateway.core.errors.ResourceExhausted` (retry after a second), nothing is sent.

    A scope is known once a review authenticated it (:meth:`remember`): for ``memory``
    seconds (at most ``max_known`` scopes, the oldest forgotten first) its reviews pass
    free, so a caller the gateway has served is never held behind a flood of strangers.

    Args:
        rate: reviews a second of unknown scopes, in total.
        burst: reviews of unknown scopes at once after a quiet time (default: 5 s of rate).
        memory: seconds a scope stays known after its last successful review.
        max_known: known scopes kept at most.
        clock: monotonic clock, in seconds.
    """

    def __init__(
        self,
        rate: float = 20.0,
        burst: float | None = None,
        *,
        memory: float = 3600.0,
        max_known: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate <= 0:
            raise ValueError("the rate of reviews of new callers must be greater than 0")
        self.rate = rate
        self.burst = max(1.0, burst if burst is not None else 5 * rate)
        self.memory = memory
        self.max_known = max_known
        self.clock = clock
        self._tokens = self.burst
        self._at = clock()
        #: Known scope -> when it stops being known (oldest first).
        self._known: OrderedDict[str, float] = OrderedDict()
        #: Reviews of unknown scopes admitted, and refused (for tests and metrics).
        self.admitted = 0
        self.refused = 0

    def known(self, scope: str) -> bool:
        """Whether a review authenticated ``scope`` within the last ``memory`` seconds."""
        until = self._known.get(scope)
        if until is None:
            return False
        if until <= self.clock():
            del self._known[scope]
            return False
        return True

    def remember(self, scope: str) -> None:
        """A review authenticated ``scope``: its reviews pass free from now on."""
        self._known[scope] = self.clock() + self.memory
        self._known.move_to_end(scope)
        while len(self._known) > self.max_known:
            self._known.popitem(last=False)

    def admit(self, scope: str) -> None:
        """Let one review of ``scope`` go upstream (free when it is known).

        Raises:
            ResourceExhausted: ``scope`` is not known and the shared budget is spent.
        """
        if self.known(scope):
            return
        now = self.clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1:
            self.refused += 1
            raise errors.ResourceExhausted(
                "the gateway is reviewing too many new callers at once; retry in a second",
                retry_after=1.0,
            )
        self._tokens -= 1
        self.admitted += 1

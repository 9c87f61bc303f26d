"""Budgets: counted shares of a limited thing, per identity and in total, refused at once.

The gateway serves many callers through one process and one upstream, so every shared
resource has a budget and a fast refusal: a caller past its share gets
:class:`~gateway.core.errors.ResourceExhausted` immediately (gRPC ``RESOURCE_EXHAUSTED``,
GraphQL ``extensions.code``), never a pool timeout, and nobody else notices.

Identities are never kept in clear text: a scope is :func:`scope_of` a credential, a
hash of the token.
"""

from __future__ import annotations

import hashlib
from collections import Counter
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

"""The clusters a caller may see: those that authenticate it, asked of each cluster, kept briefly.

A gateway in front of a fleet tells callers cluster names in several places: gRPC's
``ListClusters``, the GraphQL ``clusters`` query, the ``NOT_FOUND`` of a name it does not
serve, and the default set of a fleet call (``clusters`` omitted, or ``"*"``).  Telling
everyone every name (and server URL) would show the fleet's layout to anyone holding any
token, and would fill a fleet answer with an ``UNAUTHENTICATED`` for every cluster that
has never heard of the caller.  So by default (``--cluster-visibility authenticated``) a
caller is shown only the clusters that *authenticate* it:

- forward mode: a SelfSubjectReview (``authentication.k8s.io/v1``, GA since Kubernetes
  1.28) sent to the cluster with the caller's own credential, through that cluster's
  adapter (its request budget and metrics, never the gateway's identity): 201 means the
  cluster knows the caller; 401 (unknown token) and 403 (anonymous refused) mean it does
  not; 404 (a cluster older than 1.28) falls back to ``GET /apis``, which only an
  authenticated user may read (``system:discovery``);
- impersonate mode: the same review, sent the way every call goes (the cluster's own
  gateway credential plus the caller's ``Impersonate-*`` headers): it succeeds when the
  gateway may impersonate that user there;
- a cluster that cannot be asked (unreachable, 5xx) is not listed for a while: showing it
  would need an answer it did not give.

Only what a caller is *shown* changes: a cluster the caller names explicitly (``x-kube-
cluster``, ``/clusters/NAME/graphql``, a fleet call's list) is always called, so its own
answer shows (``UNAUTHENTICATED``, ``UNAVAILABLE``...), never a ``NOT_FOUND`` that would
hide a cluster the caller asked for by name.

Answers are kept per (cluster, :func:`~gateway.core.budget.scope_of` the credential: a
hash, never the token), a yes for ``ttl`` seconds and a no for ``negative_ttl``;
concurrent first questions share one review (:class:`~gateway.core.answers.Answers`), and
each cluster's table is bounded.  A cluster removed or reconfigured loses its answers (the
new configuration may trust other callers).  A gateway serving one cluster, and
``--cluster-visibility all``, show every cluster and send no review.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from gateway.core import errors
from gateway.core.answers import Answers
from gateway.core.budget import scope_of
from gateway.core.cluster import DEFAULT, Cluster
from gateway.core.credentials import Credential

if TYPE_CHECKING:
    from gateway.core.fleet import Fleet

__all__ = ["ALL_CLUSTERS", "AUTHENTICATED", "MODES", "Visibility"]

log = logging.getLogger(__name__)

#: Show a caller the clusters that authenticate it (the default).
AUTHENTICATED: Final = "authenticated"
#: Show every caller every cluster (no reviews; the behaviour before visibility).
ALL_CLUSTERS: Final = "all"
MODES: Final = (AUTHENTICATED, ALL_CLUSTERS)

#: Seconds a "this cluster authenticates the caller" is reused.
TTL: Final = 60.0
#: Seconds a "it does not" (or "it could not be asked") is reused: short, so a token that
#: was just granted, or a cluster that came back, shows soon.
NEGATIVE_TTL: Final = 10.0
#: Seconds one review may take (a listing waits for the slowest cluster's).
REVIEW_TIMEOUT: Final = 5.0


class Visibility:
    """Which clusters of ``fleet`` a caller may see (see the module docstring).

    Args:
        fleet: the served clusters (followed: a removed or replaced cluster's answers go).
        mode: :data:`AUTHENTICATED` or :data:`ALL_CLUSTERS`.
        ttl: seconds a yes is kept.
        negative_ttl: seconds a no is kept.
        max_entries: answers kept per cluster at most (the oldest go first).
        timeout: seconds one review may take.
        clock: monotonic clock, in seconds.
    """

    def __init__(
        self,
        fleet: Fleet,
        mode: str = AUTHENTICATED,
        *,
        ttl: float = TTL,
        negative_ttl: float = NEGATIVE_TTL,
        max_entries: int = 10_000,
        timeout: float = REVIEW_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"cluster visibility must be one of {', '.join(MODES)}, not {mode!r}")
        self.fleet = fleet
        self.mode = mode
        self.ttl = ttl
        self.negative_ttl = negative_ttl
        self.max_entries = max_entries
        self.timeout = timeout
        self.clock = clock
        #: Per cluster name: the cluster the answers are about, and the answers.
        self._tables: dict[str, tuple[Cluster, Answers[str, bool]]] = {}
        #: Reviews sent to clusters whose tables are gone (so :attr:`reviews` only grows).
        self._retired = 0
        fleet.listen(self._heard)

    @property
    def reviews(self) -> int:
        """Questions actually asked of clusters (one per cluster and credential until it
        expires; a fallback's ``GET /apis`` is part of its question)."""
        return self._retired + sum(table.asked for _, table in self._tables.values())

    def __len__(self) -> int:
        """Answers kept now, over every cluster."""
        return sum(len(table) for _, table in self._tables.values())

    def _heard(self, name: str, cluster: Cluster | None) -> None:
        gone = self._tables.pop(name, None)
        if gone is not None:
            self._retired += gone[1].asked

    def _table(self, name: str, cluster: Cluster) -> Answers[str, bool]:
        kept = self._tables.get(name)
        if kept is None or kept[0] is not cluster:
            if kept is not None:
                self._retired += kept[1].asked
            kept = (cluster, Answers(max_entries=self.max_entries, clock=self.clock))
            self._tables[name] = kept
        return kept[1]

    def _everyone_sees_all(self) -> bool:
        return self.mode == ALL_CLUSTERS or len(self.fleet) <= 1

    async def sees(self, name: str, credential: Credential) -> bool:
        """Whether the caller may see cluster ``name`` (a name not served: no)."""
        if name not in self.fleet.names():
            return False
        if self._everyone_sees_all():
            return True
        return await self._sees(name, self.fleet.get(name), credential)

    async def authenticates(self, name: str, credential: Credential) -> bool:
        """Whether cluster ``name`` authenticates the caller, whatever the visibility mode
        and however many clusters are served (what reading a cluster's schema needs, as
        Kubernetes serves discovery to authenticated users only); answers are kept as
        :meth:`sees` keeps them.  A name not served: no."""
        if name not in self.fleet.names():
            return False
        return await self._sees(name, self.fleet.get(name), credential)

    async def _sees(self, name: str, cluster: Cluster, credential: Credential) -> bool:
        async def ask() -> tuple[bool, float]:
            return await self._review(name, cluster, credential)

        return await self._table(name, cluster).get(scope_of(credential), ask)

    async def visible(self, credential: Credential) -> list[tuple[str, Cluster]]:
        """The clusters the caller may see, in the fleet's order (each asked at once)."""
        served = list(self.fleet)
        if self._everyone_sees_all():
            return served
        seen = await asyncio.gather(*(self._sees(n, c, credential) for n, c in served))
        return [pair for pair, yes in zip(served, seen, strict=True) if yes]

    async def names(self, credential: Credential) -> list[str]:
        """The names of the clusters the caller may see, in the fleet's order."""
        return [name for name, _ in await self.visible(credential)]

    async def unknown(self, name: str, credential: Credential) -> errors.NotFound:
        """The refusal of a cluster name the gateway does not serve, naming the clusters
        the caller may see (and no other)."""
        shown = ", ".join(await self.names(credential)) or "none"
        return errors.NotFound(
            f'cluster "{name or DEFAULT}" is not served by this gateway; clusters you may '
            f"see: {shown}"
        )

    async def get(self, name: str, credential: Credential) -> Cluster:
        """The served cluster ``name`` (``""``: the default), whether the caller may see it
        or not: a cluster named explicitly is always called, so its own answer shows.

        Raises:
            NotFound: no served cluster has that name (:meth:`unknown`'s message).
        """
        try:
            return self.fleet.get(name)
        except errors.NotFound:
            raise await self.unknown(name, credential) from None

    async def _review(
        self, name: str, cluster: Cluster, credential: Credential
    ) -> tuple[bool, float]:
        """Does ``cluster`` authenticate the caller?  The answer and how long it holds."""
        adapter = cluster.adapter
        try:
            try:
                await adapter.review_self(credential=credential, timeout=self.timeout)
            except errors.NotFound:  # older than 1.28: no SelfSubjectReview
                await adapter.read_discovery(credential=credential, timeout=self.timeout)
        except (errors.Unauthorized, errors.Forbidden):
            return False, self.negative_ttl
        except errors.TooManyRequests:
            return False, 0.0  # a burst (the caller's, or the cluster's): not worth keeping
        except errors.GatewayError as exc:  # readiness logs an unreachable cluster already
            log.debug(
                "cluster %s not listed for a caller: it could not be asked who the caller is (%s)",
                name,
                type(exc).__name__,
            )
            return False, self.negative_ttl
        return True, self.ttl

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

A caller's token goes only where the caller sends it or where it is known to belong.  In
forward mode a review carries the caller's token, so it is sent only to the clusters that
*share the default cluster's identity provider* (:meth:`Visibility.shares_identity`: the
default cluster, the names of ``--shared-identity-clusters``, and the gateway's own demo
clusters, whose tokens are public): a cluster outside that set is never asked about a
caller, is not shown to a caller who sends a token, and is not part of a fleet call's
default set (``*``) for such a caller, even with ``--cluster-visibility all``.  Its
operator never sees the tokens of callers who did not name it.  Impersonate mode sends
no caller's token to any cluster, so every cluster may be asked there.

Reviews of a caller the gateway does not know yet share one budget
(:class:`~gateway.core.upstream.budget.Newcomers`): a flood of fresh random tokens is refused with
``RESOURCE_EXHAUSTED`` past it, never turned into a flood of upstream reviews, while a
caller a review has authenticated passes free.

One operation asks at most once (:meth:`Visibility.view`): a fleet document with many
``fleet`` fields, or a list with many names the gateway does not serve, computes the
caller's visible clusters once.

Answers are kept per (cluster, :func:`~gateway.core.upstream.budget.scope_of` the credential: a
hash, never the token), a yes for ``ttl`` seconds and a no for ``negative_ttl``;
concurrent first questions share one review (:class:`~gateway.core.support.cache.Answers`), and
each cluster's table is bounded.  A cluster removed or reconfigured loses its answers (the
new configuration may trust other callers).  A gateway serving one cluster, and
``--cluster-visibility all``, show every cluster and send no review.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, Protocol

from gateway.core import errors
from gateway.core.fleet.cluster import DEFAULT, Cluster
from gateway.core.support.cache import Answers
from gateway.core.upstream.budget import Newcomers, scope_of
from gateway.core.upstream.credentials import Credential


class Clusters(Protocol):
    """What visibility reads of the served clusters (:class:`~gateway.core.fleet.fleet.Fleet`
    is one; the composition root builds the visibility over it and hands both to the front
    ends): names, clusters by name, and their changes."""

    def names(self) -> list[str]: ...

    def get(self, name: str | None = None) -> Cluster: ...

    def listen(self, listener: Callable[[str, Cluster | None], None]) -> Callable[[], None]: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[tuple[str, Cluster]]: ...


__all__ = ["ALL_CLUSTERS", "AUTHENTICATED", "EVERY_CLUSTER", "MODES", "View", "Visibility"]

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
#: In ``shared``: every cluster shares the default cluster's identity provider.
EVERY_CLUSTER: Final = "*"
#: Unserved names a refusal quotes at most, and characters of each.
_QUOTED_NAMES: Final = 5
_QUOTED_CHARS: Final = 63


def _quoted(name: str) -> str:
    if len(name) <= _QUOTED_CHARS:
        return f'"{name}"'
    return f'"{name[:_QUOTED_CHARS]}..." ({len(name)} characters)'


#: What a refusal says of the clusters a caller may see when they cannot be asked now.
NOT_ASKED: Final = "not known now (too many new callers; retry in a second)"


def refusal_message(names: Sequence[str], shown: Iterable[str] | None) -> str:
    """The refusal of cluster names the gateway does not serve (``""``: the default),
    naming the clusters the caller may see (``shown``; ``None``: they could not be asked,
    the budget of new callers being spent); bounded in size whatever was asked: at most
    five names, each cut at 63 characters."""
    names = [n or DEFAULT for n in names]
    told = NOT_ASKED if shown is None else ", ".join(shown) or "none"
    if len(names) == 1:
        head = f"cluster {_quoted(names[0])} is"
    else:
        quoted = ", ".join(_quoted(n) for n in names[:_QUOTED_NAMES])
        more = len(names) - _QUOTED_NAMES
        head = f"clusters {quoted}{f' and {more} more' if more > 0 else ''} are"
    return f"{head} not served by this gateway; clusters you may see: {told}"


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
        shared: the names of the clusters that share the default cluster's identity
            provider besides it (``--shared-identity-clusters``; :data:`EVERY_CLUSTER`:
            all of them): forward mode sends a caller's token to no other cluster unasked.
        newcomers: the budget of reviews of callers not known yet (default: one of its
            own, 20 a second).
    """

    def __init__(
        self,
        fleet: Clusters,
        mode: str = AUTHENTICATED,
        *,
        shared: Iterable[str] = (),
        newcomers: Newcomers | None = None,
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
        self.shared = frozenset(shared)
        self.newcomers = newcomers if newcomers is not None else Newcomers(clock=clock)
        self.ttl = ttl
        self.negative_ttl = negative_ttl
        self.max_entries = max_entries
        self.timeout = timeout
        self.clock = clock
        #: Per cluster name: the cluster the answers are about, and the answers.
        self._tables: dict[str, tuple[Cluster, Answers[str, bool]]] = {}
        #: Reviews sent (a refused one of :attr:`newcomers` is not).
        self._sent = 0
        fleet.listen(self._heard)

    @property
    def reviews(self) -> int:
        """Questions actually asked of clusters (one per cluster and credential until it
        expires; a fallback's ``GET /apis`` is part of its question; a question the budget
        of new callers refused sent nothing and is not counted)."""
        return self._sent

    def __len__(self) -> int:
        """Answers kept now, over every cluster."""
        return sum(len(table) for _, table in self._tables.values())

    def _heard(self, name: str, cluster: Cluster | None) -> None:
        self._tables.pop(name, None)

    def _table(self, name: str, cluster: Cluster) -> Answers[str, bool]:
        kept = self._tables.get(name)
        if kept is None or kept[0] is not cluster:
            kept = (cluster, Answers(max_entries=self.max_entries, clock=self.clock))
            self._tables[name] = kept
        return kept[1]

    def _everyone_sees_all(self) -> bool:
        return self.mode == ALL_CLUSTERS or len(self.fleet) <= 1

    def shares_identity(self, name: str, cluster: Cluster) -> bool:
        """Whether cluster ``name`` shares the default cluster's identity provider, so a
        caller's token may be sent to it without the caller naming it: the default
        cluster, a cluster ``shared`` names (or every one, :data:`EVERY_CLUSTER`), and the
        gateway's own demo clusters (their tokens are public)."""
        return (
            name == DEFAULT or EVERY_CLUSTER in self.shared or name in self.shared or cluster.demo
        )

    def may_carry(self, name: str, cluster: Cluster, credential: Credential) -> bool:
        """Whether ``credential`` may go to cluster ``name`` unasked: it carries no token
        (anonymous, or impersonate mode's user), or the cluster shares the identity
        provider."""
        return credential.token is None or self.shares_identity(name, cluster)

    async def sees(self, name: str, credential: Credential) -> bool:
        """Whether the caller may see cluster ``name`` (a name not served: no)."""
        if name not in self.fleet.names():
            return False
        if self._everyone_sees_all():
            return True
        return await self._sees(name, self.fleet.get(name), credential)

    async def joins(self, name: str, credential: Credential) -> bool:
        """Whether cluster ``name`` belongs to the caller's default set (``*``): the
        caller may see it and its credential may go there unasked.  A cluster that cannot
        be asked now (the budget of new callers is spent) does not join."""
        if name not in self.fleet.names():
            return False
        if not self.may_carry(name, self.fleet.get(name), credential):
            return False
        try:
            return await self.sees(name, credential)
        except errors.ResourceExhausted:
            return False

    async def authenticates(self, name: str, credential: Credential) -> bool:
        """Whether cluster ``name`` authenticates the caller, whatever the visibility mode
        and however many clusters are served (what reading a cluster's schema needs, as
        Kubernetes serves discovery to authenticated users only); answers are kept as
        :meth:`sees` keeps them.  The caller addressed that cluster, so its credential
        may go there whether the cluster shares the identity provider or not.  A name not
        served: no.

        Raises:
            ResourceExhausted: the caller is not known yet and the budget of reviews of
                new callers is spent (nothing was sent).
        """
        if name not in self.fleet.names():
            return False
        return await self._sees(name, self.fleet.get(name), credential, named=True)

    async def _sees(
        self, name: str, cluster: Cluster, credential: Credential, *, named: bool = False
    ) -> bool:
        if not named and not self.may_carry(name, cluster, credential):
            return False  # never reviewed: the token would reach a cluster not named
        scope = scope_of(credential)

        async def ask() -> tuple[bool, float]:
            self.newcomers.admit(scope)
            yes, ttl = await self._review(name, cluster, credential)
            if yes:
                self.newcomers.remember(scope)
            return yes, ttl

        return await self._table(name, cluster).get(scope, ask)

    async def visible(self, credential: Credential) -> list[tuple[str, Cluster]]:
        """The clusters the caller may see, in the fleet's order (each asked at once).

        Raises:
            ResourceExhausted: the caller is not known yet and the budget of reviews of
                new callers is spent (nothing was sent).
        """
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
        the caller may see (and no other; none when they cannot be asked now)."""
        return await self.view(credential).refusal([name])

    def view(self, credential: Credential) -> View:
        """What one operation of the caller sees, each question asked at most once."""
        return View(self, credential)

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
        self._sent += 1
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


class View:
    """One operation's questions about the clusters its caller may see, each asked once.

    A fleet document may hold many ``fleet`` fields and a list many names; whatever it
    holds, the caller's visible clusters are computed at most once for it (concurrent
    askers share that one computation).
    """

    __slots__ = ("_visible", "credential", "visibility")

    def __init__(self, visibility: Visibility, credential: Credential) -> None:
        self.visibility = visibility
        self.credential = credential
        self._visible: asyncio.Future[list[tuple[str, Cluster]]] | None = None

    async def visible(self) -> list[tuple[str, Cluster]]:
        """The clusters the caller may see (:meth:`Visibility.visible`), asked once."""
        if self._visible is None:
            self._visible = asyncio.ensure_future(self.visibility.visible(self.credential))
        return await asyncio.shield(self._visible)

    async def names(self) -> list[str]:
        """The names of the clusters the caller may see."""
        return [name for name, _ in await self.visible()]

    async def joins(self, name: str) -> bool:
        """Whether cluster ``name``, joining the fleet, joins the caller's default set
        (:meth:`Visibility.joins`)."""
        return await self.visibility.joins(name, self.credential)

    async def default_set(self) -> list[str]:
        """The clusters ``*`` stands for: those the caller may see that its credential may
        reach unasked (:meth:`Visibility.may_carry`), in the fleet's order."""
        visibility, credential = self.visibility, self.credential
        return [n for n, c in await self.visible() if visibility.may_carry(n, c, credential)]

    async def shown(self) -> list[str] | None:
        """What a refusal names: the clusters the caller may see, or ``None`` when they
        cannot be asked now (the budget of new callers is spent: a refusal is still a
        ``NOT_FOUND``, never a ``RESOURCE_EXHAUSTED``)."""
        try:
            return await self.names()
        except errors.ResourceExhausted:
            return None

    async def refusal(self, names: Sequence[str]) -> errors.NotFound:
        """The one refusal of ``names`` (not served), naming the clusters the caller may
        see."""
        return errors.NotFound(refusal_message(names, await self.shown()))

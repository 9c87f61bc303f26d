"""The clusters a gateway serves, by name: what both front ends resolve a caller's cluster in.

A gateway in front of one API server serves one cluster, named ``default``; a gateway in
front of a fleet serves one :class:`~gateway.core.fleet.cluster.Cluster` per configured cluster,
each with its own clients, catalog, watch hub, budgets and readiness, added and removed
while it runs.  The composition root (:mod:`gateway.runtime`) builds and owns them and
registers them here; the front ends only look them up:

- GraphQL: ``/graphql`` is the default cluster's, ``/clusters/{name}/graphql`` another's;
- gRPC: the ``x-kube-cluster`` metadata names the cluster (missing: ``default``).

A name that is not served is refused with :class:`~gateway.core.errors.NotFound`; the front
ends word it with the :class:`~gateway.core.fleet.visibility.Visibility` the composition
root built over this fleet and handed them, which names the clusters *that caller* may see,
so this message names none.  The fleet knows nothing of who sees what: it is the registry
visibility and token reviews read.  Listeners hear every change (a
front end ends a removed cluster's subscriptions with
:class:`~gateway.core.errors.ClusterRemoved`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from gateway.core import errors
from gateway.core.fleet.cluster import DEFAULT, Cluster

__all__ = ["DEFAULT", "Fleet", "Listener"]

log = logging.getLogger("gateway")


#: Hears ``(name, cluster)`` when a cluster is added or replaced, ``(name, None)`` when it
#: is removed.
Listener = Callable[[str, Cluster | None], None]


class Fleet:
    """The served clusters, by name (insertion order; the default first when it exists)."""

    def __init__(self) -> None:
        self._clusters: dict[str, Cluster] = {}
        self._listeners: list[Listener] = []

    def __len__(self) -> int:
        return len(self._clusters)

    def __iter__(self) -> Iterator[tuple[str, Cluster]]:
        return iter(list(self._clusters.items()))

    def names(self) -> list[str]:
        return list(self._clusters)

    def get(self, name: str | None = None) -> Cluster:
        """The cluster a caller named (``None`` or ``""``: the default).

        Raises:
            NotFound: no served cluster has that name (naming no other: what a caller is
                told is :meth:`Visibility.unknown
                <gateway.core.fleet.visibility.Visibility.unknown>`).
        """
        wanted = name or DEFAULT
        cluster = self._clusters.get(wanted)
        if cluster is None:
            raise errors.NotFound(f'cluster "{wanted}" is not served by this gateway')
        return cluster

    def add(self, name: str, cluster: Cluster) -> None:
        """Serve ``cluster`` as ``name`` (replacing one of that name: its listeners hear it)."""
        self._clusters[name] = cluster
        for listener in list(self._listeners):
            listener(name, cluster)

    def remove(self, name: str) -> Cluster | None:
        """Stop serving ``name``; returns the cluster it was (its owner closes it)."""
        cluster = self._clusters.pop(name, None)
        if cluster is not None:
            for listener in list(self._listeners):
                listener(name, None)
        return cluster

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` on every change from now on; returns what stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

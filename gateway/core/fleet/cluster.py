"""One upstream cluster as the gateway serves it: what a front end reaches the cluster through.

The composition root (:mod:`gateway.runtime`) builds one :class:`Cluster` per API server,
registers each in the :class:`~gateway.core.fleet.fleet.Fleet` it hands to both front ends
(``/clusters/{name}/graphql``; gRPC's ``x-kube-cluster``).  It lives in the core, below
both front ends, so each can name its type without importing the other or anything above
it; and it holds nothing a front end owns, so a gateway in front of several clusters is one
of these per cluster.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import httpx

from gateway.core.catalog.catalog import CatalogHolder
from gateway.core.catalog.reload import CatalogReloader
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.views.cache import Views
from gateway.core.watch.hub import WatchHub

__all__ = ["DEFAULT", "Cluster", "Readiness", "ServerVersion"]

#: The name of the cluster a caller gets when it names none (the single-upstream mode's).
DEFAULT = "default"

log = logging.getLogger("gateway")


class Readiness:
    """Is the upstream answering?  Its ``/readyz``, asked at most every ``ttl`` seconds.

    Asked without a caller's credential (the gateway's own where it has one).  Clusters
    grant ``/readyz`` to everyone by default (``system:public-info-viewer``), but one that
    refuses anonymous requests answers 401 or 403 and is up all the same: any answer below
    500 means ready; a 5xx, a timeout or no connection means not.  The answer shows
    nothing about the upstream but yes or no.
    """

    def __init__(self, http: httpx.AsyncClient, *, ttl: float = 2.0, timeout: float = 2.0):
        self.http = http
        self.ttl = ttl
        self.timeout = timeout
        self._checked = -float("inf")
        self._ready = False
        self._lock = asyncio.Lock()

    async def ready(self) -> bool:
        async with self._lock:  # concurrent probes share one upstream question
            now = asyncio.get_running_loop().time()
            if now - self._checked >= self.ttl:
                self._ready = await self._ask()
                self._checked = asyncio.get_running_loop().time()
            return self._ready

    async def _ask(self) -> bool:
        try:
            response = await self.http.get("/readyz", timeout=self.timeout)
        except httpx.HTTPError as exc:
            log.warning("upstream not ready: %s", type(exc).__name__)
            return False
        if response.status_code >= 500:
            log.warning("upstream not ready: /readyz answered %d", response.status_code)
            return False
        return True


class ServerVersion:
    """The API server's ``gitVersion`` (its ``/version``), asked until it answers once.

    Asked on ``http``: the discovery client, with the gateway's own identity, where there
    is one; else the request client without a caller's credential (``/version`` is granted
    to everyone by default).  ``None`` while it has not answered.
    """

    def __init__(self, http: httpx.AsyncClient, *, timeout: float = 2.0) -> None:
        self.http = http
        self.timeout = timeout
        self._version: str | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> str | None:
        async with self._lock:  # concurrent readers share one upstream question
            if self._version is None:
                try:
                    response = await self.http.get("/version", timeout=self.timeout)
                    if response.status_code == 200:
                        version = response.json().get("gitVersion")
                        self._version = version if isinstance(version, str) else None
                except (httpx.HTTPError, ValueError):
                    return None
            return self._version


@dataclass(slots=True)
class Cluster:
    """One upstream API server, as both front ends use it.

    Whoever builds it owns it (its clients, tasks and watches close with the builder's
    exit stack); the front ends only read it.
    """

    #: Calls the upstream with each caller's own credential (requests and streams).
    adapter: KubeAdapter
    #: The shared upstream watches every GraphQL subscription and gRPC ``Watch`` joins.
    watches: WatchHub
    #: What is served now (the seed resources plus discovery's), swapped whole on reload.
    catalog: CatalogHolder = field(default_factory=CatalogHolder)
    #: Keeps :attr:`catalog` in step with the cluster's CRDs and APIServices (``None``:
    #: discovery is off, the seed resources only).
    reloader: CatalogReloader | None = None
    #: The gateway's own demo upstream, whose tokens are public (GraphiQL offers them).
    demo: bool = False
    #: The name callers address it by (``default`` unless the gateway serves a fleet).
    name: str = DEFAULT
    #: The API server's URL, for listings (never a credential).
    server: str = ""
    #: The view caches, fed by :attr:`watches` (``None``: views are not served).
    views: Views | None = None
    #: The upstream's own ``/readyz``, asked on the adapter's request pool.
    readiness: Readiness = field(init=False)
    #: The API server's version, asked with the gateway's identity where it has one.
    version: ServerVersion = field(init=False)

    def __post_init__(self) -> None:
        self.readiness = Readiness(self.adapter.http)
        own = self.reloader.adapter.http if self.reloader is not None else self.adapter.http
        self.version = ServerVersion(own)

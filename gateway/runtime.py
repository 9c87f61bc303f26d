"""The gateway's runtime, built step by step on one ``AsyncExitStack``.

The application's lifespan (:mod:`gateway.app`) is the list of these steps: observe the
process; make the :class:`~gateway.core.fleet.fleet.Fleet` (empty), the
:class:`~gateway.core.fleet.visibility.Visibility` over it and the identity strategy
(:func:`identity_strategy`: forward, or impersonate with TokenReviews that find the home
cluster in that fleet), so each is built from what exists already and nothing is bound
later; build one :class:`~gateway.core.fleet.cluster.Cluster` per upstream (its clients,
made with the identity strategy, adapter, watch hub, catalog and discovery): the default
one, then the named ones of the fleet (each on an exit stack of its own, built in the
background, :class:`FleetBuilder`); start the front ends on that fleet and visibility, and
end subscriptions in the right order.  Each builder registers its own teardown on the
stack it is given, so whatever was built closes in reverse, also when a later step fails;
nothing lives in module globals.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from ssl import SSLContext
from typing import Any

import grpc
import httpx
import watchfiles
from grpc_health.v1 import health

from gateway import demomode
from gateway.core.catalog.catalog import CatalogHolder
from gateway.core.catalog.discovery import Discovery, ResourcePatterns
from gateway.core.catalog.reload import CatalogReloader
from gateway.core.fleet.cluster import DEFAULT, Cluster
from gateway.core.fleet.fleet import Fleet
from gateway.core.fleet.visibility import Visibility
from gateway.core.lists.large import LargeLists
from gateway.core.lists.pool import ListWorkers, workers_for
from gateway.core.process import tracing
from gateway.core.process.drain import Drain
from gateway.core.process.metrics import Metrics
from gateway.core.upstream import config, kubeconfig
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.budget import Budget, Newcomers
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import ConfigError
from gateway.core.upstream.identity import (
    FORWARDING,
    IMPERSONATE,
    Carrying,
    Identity,
    Impersonating,
    TokenReviews,
)
from gateway.core.views.cache import Views
from gateway.core.views.live import LiveViews
from gateway.core.watch.access import AccessReviews
from gateway.core.watch.hub import SharedWatches, WatchHub
from gateway.graphql.endpoints.clusters import ClusterEndpoints
from gateway.graphql.endpoints.live import GROUP_IDLE_SECONDS, LiveSchema
from gateway.graphql.endpoints.server import GraphQLApp
from gateway.graphql.engine.persisted import Persisted
from gateway.grpc.server import GrpcOptions, set_health, start_grpc
from gateway.settings import (
    Settings,
    check_cluster_name,
    cluster_specs,
    shared_identity_names,
)
from gateway.tls import Certificates, TlsFiles

__all__ = [
    "ClusterSource",
    "FleetBuilder",
    "Runtime",
    "Upstream",
    "build_cluster",
    "cluster_visibility",
    "discovery_upstream",
    "end_subscriptions",
    "grpc_options",
    "identity_strategy",
    "observe",
    "resolve_upstream",
    "serve_fleet",
    "serve_graphql",
    "serve_grpc",
    "serve_tls",
]

log = logging.getLogger("gateway")

#: Connections of the discovery client: its reads and two long watches, never a caller's.
DISCOVERY_CONNECTIONS = 16


@dataclass(frozen=True, slots=True)
class Upstream:
    """Which API server a cluster is, and how the gateway itself speaks to it."""

    config: config.UpstreamConfig
    #: The bearer token of the gateway's own identity (discovery, shared watches) when
    #: ``config`` carries none of its own: the demo upstream's admin.
    gateway_token: str | None = None
    #: The gateway's own demo upstream, whose tokens are public.
    demo: bool = False


@dataclass(slots=True)
class Runtime:
    """What the lifespan built: ``app.state.runtime``, read by ``/readyz``, ``/metrics``
    and by tests; the front ends get :attr:`cluster` handed to them instead."""

    settings: Settings
    cluster: Cluster
    metrics: Metrics
    drain: Drain
    grpc_server: grpc.aio.Server
    grpc_port: int
    #: Every served cluster, :attr:`cluster` (the default) first.
    fleet: Fleet
    #: Which clusters of :attr:`fleet` each caller may see.
    visibility: Visibility
    #: How callers are identified on the clusters (``--identity``).
    identity: Identity
    #: Keeps the GraphQL schemas in step with the catalog (``None``: discovery is off).
    live_schema: LiveSchema | None = None


def resolve_upstream(settings: Settings) -> config.UpstreamConfig | None:
    """The upstream the settings name (``None``: nothing configured at all, so the demo).

    Raises:
        ConfigError: anything half-configured or unsafe, with what was found and what to do.
    """
    upstream_cfg = kubeconfig.resolve_upstream(
        server=settings.server,
        token_file=settings.token_file,
        ca_file=settings.ca_file,
        client_cert=settings.client_cert,
        client_key=settings.client_key,
        insecure=settings.insecure_skip_tls_verify,
        kubeconfig=settings.kubeconfig,
        context=settings.context,
        allow_insecure=settings.allow_insecure_upstream,
    )
    if (
        settings.gateway_identity
        and upstream_cfg is not None
        and upstream_cfg.has_client_certificate
    ):
        raise config.ConfigError(
            f"--gateway-identity with the client certificate of {upstream_cfg.source}: the "
            "apiserver authenticates a client certificate before any bearer token, so every "
            "caller would be served as the gateway; give the gateway a token instead"
        )
    return upstream_cfg


def discovery_upstream(
    settings: Settings, upstream: Upstream
) -> tuple[config.UpstreamConfig | None, str]:
    """The upstream record discovery and the CRD/APIService watches use, and whose identity.

    Discovery is the gateway's, never a caller's: ``--discovery-token-file``, else the
    gateway's own credential (``--token-file`` / ``KUBE_GATEWAY_TOKEN_FILE``, the
    kubeconfig's user, the service account in a pod), in demo mode the demo's admin token.
    ``None``: there is none (or ``--no-discovery``), so the seed resources only.
    """
    upstream_cfg = upstream.config
    if not settings.discovery:
        return None, "--no-discovery"
    if settings.discovery_token_file:
        path = Path(settings.discovery_token_file).absolute()
        if not path.is_file():
            raise config.ConfigError(f"--discovery-token-file {path}: no such file")
        own = dataclasses.replace(
            upstream_cfg,
            token=None,
            token_file=path,
            client_cert_file=None,
            client_key_file=None,
            client_cert_data=None,
            client_key_data=None,
            exec=None,
        )
        return own, f"token file {path}"
    if upstream.gateway_token is not None:
        return _as_gateway(upstream), "the demo's admin" if upstream.demo else "the gateway token"
    if upstream_cfg.has_gateway_credential:
        return upstream_cfg, f"the gateway's own credential from {upstream_cfg.source}"
    return None, "no gateway credential is configured (--discovery-token-file or --token-file)"


def _as_gateway(upstream: Upstream) -> config.UpstreamConfig:
    """The upstream record with the gateway's own identity."""
    if upstream.gateway_token is None:
        return upstream.config
    return dataclasses.replace(upstream.config, token=upstream.gateway_token)


def grpc_options(settings: Settings) -> GrpcOptions:
    """The gRPC server options of ``kube-gateway serve``'s ``--grpc-*`` flags."""
    return GrpcOptions(
        max_message_bytes=settings.grpc_max_message_bytes,
        max_request_bytes=settings.grpc_max_request_bytes,
        max_concurrent_rpcs=settings.grpc_max_concurrent_rpcs,
        gzip=settings.grpc_gzip,
        keepalive_seconds=settings.grpc_keepalive_seconds,
        keepalive_timeout_seconds=settings.grpc_keepalive_timeout_seconds,
        min_client_ping_seconds=settings.grpc_min_client_ping_seconds,
        anonymous_streams_per_peer=settings.grpc_anonymous_streams_per_peer,
        anonymous_streams=settings.grpc_anonymous_streams,
    )


def background(stack: AsyncExitStack, work: Coroutine[Any, Any, None], name: str) -> None:
    """Run ``work`` in a task of its own, cancelled (and awaited) when the stack closes."""
    task = asyncio.create_task(work, name=name)
    stack.push_async_callback(_cancelled, task)


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def observe(stack: AsyncExitStack) -> Metrics:
    """Tracing (when ``OTEL_*`` asks for it; closed last, so it flushes every span) and the
    process's metrics, with the event loop's lag sampled in the background."""
    if tracing.setup_from_env():
        stack.push_async_callback(asyncio.to_thread, tracing.shutdown)
    metrics = Metrics()
    background(stack, metrics.watch_event_loop(), "event-loop-lag")
    return metrics


def _client(
    stack: AsyncExitStack,
    settings: Settings,
    cfg: config.UpstreamConfig,
    *,
    identity: bool,
    pool: int,
    internal: str | None = None,
    callers: Identity = FORWARDING,
) -> httpx.AsyncClient:
    """An upstream client of ``pool`` connections, closed with the stack; its callers are
    identified as ``callers`` says (impersonate mode: the strategy makes its auth)."""
    built = build_http_client(
        cfg,
        gateway_identity=identity,
        http2=settings.upstream_http2,
        network=settings.upstream_network,
        max_connections=pool,
        internal=internal,
        impersonate=callers.client_auth,
    )
    stack.push_async_callback(built.aclose)
    return built


def serve_list_work(stack: AsyncExitStack, settings: Settings, metrics: Metrics) -> LargeLists:
    """The process's large-list scope, with its list workers (``--list-workers``), shared
    by every cluster; the workers stop with ``stack``."""
    workers = ListWorkers(workers_for(settings.list_workers), metrics.list_worker)
    stack.push_async_callback(workers.aclose)
    return LargeLists(workers)


async def build_cluster(
    stack: AsyncExitStack,
    settings: Settings,
    upstream: Upstream,
    *,
    metrics: Metrics,
    name: str = DEFAULT,
    large_lists: LargeLists | None = None,
    identity: Identity = FORWARDING,
    newcomers: Newcomers | None = None,
) -> Cluster:
    """Build the runtime of one upstream cluster; its teardown goes on ``stack``.

    Requests and streams (watches, log follows) use separate pools, so open streams can
    never starve requests; the stream budget fits its pool.  With ``--shared-watches`` a
    third client makes the shared watches with the gateway's own identity; with discovery
    on, a fourth, small one reads discovery and follows CRDs and APIServices in the
    background (the seed resources answer meanwhile; readiness waits for the first read).
    Nothing here calls the upstream: an unreachable cluster is built all the same (and is
    not ready until it answers).  ``identity`` (:func:`identity_strategy`) makes the request
    and stream clients and is handed to the adapter, where the front ends ask it who a
    caller is: in impersonate mode the clients carry the cluster's own gateway credential
    and impersonate each caller the home cluster authenticated
    (:mod:`gateway.core.upstream.identity`).

    ``large_lists``: the process's large-list scope, shared by every cluster (the cyclic
    collector they hold off is the process's); a new one by default.  ``newcomers``: the
    gateway's one budget of reviews of callers not known yet (``--max-new-caller-reviews``),
    which the access reviews of views and shared watches draw on as visibility's reviews
    and TokenReviews do; one of this cluster's own by default.
    """
    if newcomers is None:
        newcomers = Newcomers(rate=settings.max_new_caller_reviews)
    own = settings.gateway_identity
    cfg = _as_gateway(upstream) if identity.mode == IMPERSONATE else upstream.config
    http = _client(
        stack,
        settings,
        cfg,
        identity=own,
        pool=settings.upstream_max_connections,
        callers=identity,
    )
    stream_http = _client(
        stack,
        settings,
        cfg,
        identity=own,
        pool=settings.upstream_max_streams,
        callers=identity,
    )
    adapter = KubeAdapter(
        http,
        identity=identity,
        metrics=metrics,
        stream_http=stream_http,
        requests=Budget("requests", 1 << 30, settings.max_requests_per_identity),
        max_list_items=settings.max_list_items,
        large_lists=large_lists,
        streams=Budget(
            "upstream streams",
            settings.upstream_max_streams,
            settings.upstream_max_streams_per_identity,
        ),
    )
    watches = WatchHub(
        adapter,
        shared=_shared_watches(stack, settings, upstream, adapter, metrics, newcomers=newcomers),
        subscribers=Budget(
            "subscriptions",
            settings.max_subscriptions,
            settings.max_subscriptions_per_identity,
        ),
        max_queue=settings.watch_max_queue,
        linger=settings.watch_linger_seconds,
    )
    stack.push_async_callback(watches.aclose)
    stack.callback(metrics.watch_hub(lambda: watches.stats, name))
    views = Views(
        watches,
        idle=settings.view_idle_seconds,
        budget=settings.view_memory_bytes,
        reviews=AccessReviews(
            adapter, newcomers=newcomers, ttl=min(30.0, settings.access_recheck_seconds)
        ),
    )
    stack.push_async_callback(views.aclose)  # before the hub's: its subscriptions end first
    live = LiveViews.attach(
        views,
        interval=min(10.0, max(0.05, settings.live_view_interval_ms / 1000)),
        recheck=min(30.0, settings.access_recheck_seconds),
    )
    stack.push_async_callback(live.aclose)  # before the caches': live views end first
    catalog = CatalogHolder()
    stack.callback(metrics.served_resources(lambda: len(catalog.current.registry.records), name))
    reloader = _discovery(
        stack, settings, upstream, catalog, metrics=metrics, large_lists=adapter.large_lists
    )
    return Cluster(
        adapter,
        watches,
        catalog,
        reloader,
        demo=upstream.demo,
        name=name,
        server=upstream.config.server,
        views=views,
    )


def _shared_watches(
    stack: AsyncExitStack,
    settings: Settings,
    upstream: Upstream,
    adapter: KubeAdapter,
    metrics: Metrics,
    *,
    newcomers: Newcomers,
) -> SharedWatches | None:
    """With ``--shared-watches``: the gateway's own identity makes the shared upstream
    watches (and their lists); callers are admitted by reviews made with their own tokens."""
    if not settings.shared_watches:
        return None
    own_http = _client(
        stack, settings, _as_gateway(upstream), identity=True, pool=settings.upstream_max_streams
    )
    shared = SharedWatches(
        KubeAdapter(
            own_http,
            stream_http=own_http,
            streams=adapter.streams,
            metrics=metrics,
            large_lists=adapter.large_lists,
        ),
        AccessReviews(adapter, newcomers=newcomers, ttl=min(30.0, settings.access_recheck_seconds)),
        recheck=settings.access_recheck_seconds,
    )
    log.warning(
        "shared watches: upstream watches are made with the gateway's own "
        "credential and shared across identities; each subscriber is admitted "
        "by access reviews with its own token, rechecked every %.0f s",
        settings.access_recheck_seconds,
    )
    return shared


def _discovery(
    stack: AsyncExitStack,
    settings: Settings,
    upstream: Upstream,
    catalog: CatalogHolder,
    *,
    metrics: Metrics,
    large_lists: LargeLists,
) -> CatalogReloader | None:
    """Keep ``catalog`` in step with the cluster (``None``: discovery is off, and why is
    logged).  Started in the background: listing a thousand CRDs and reading discovery
    takes seconds, and the seed kinds answer meanwhile."""
    disc_cfg, whose = discovery_upstream(settings, upstream)
    if disc_cfg is None:
        log.warning(
            "discovery off (%s): serving the %d built-in resources only",
            whose,
            len(catalog.current.registry),
        )
        return None
    # Its own small client: discovery reads and two long watches (CRDs and APIServices),
    # with the gateway's identity, never a caller's.
    disc_http = _client(
        stack,
        settings,
        disc_cfg,
        identity=True,
        pool=DISCOVERY_CONNECTIONS,
        internal="discovery and the CRD/APIService watches",
    )
    patterns = ResourcePatterns.parse(settings.resources)
    reloader = CatalogReloader(
        Discovery(disc_http, patterns=patterns, metrics=metrics),
        catalog,
        KubeAdapter(disc_http, stream_http=disc_http, metrics=metrics, large_lists=large_lists),
        metrics=metrics,
    )

    async def discover() -> None:
        await reloader.start()
        log.info(
            "discovery with %s, serving %s: %d resources in %d group/versions, "
            "reloaded when CRDs or APIServices change",
            whose,
            patterns,
            len(catalog.current.registry.records),
            len(catalog.current.groups),
        )
        await reloader.run()

    background(stack, discover(), "catalog-reload")
    return reloader


def serve_graphql(
    stack: AsyncExitStack,
    graphql: GraphQLApp,
    *,
    group_idle_seconds: float = GROUP_IDLE_SECONDS,
) -> LiveSchema | None:
    """Keep the schemas of ``/graphql`` (made with the default cluster, the fleet and the
    visibility) in step with its cluster's catalog when discovery is on: the first build
    runs in the background (the seed schema serves meanwhile), later ones on every swap;
    returns what keeps them in step (``None``: discovery is off, the seed schema is
    served).  The trusted documents' manifest is followed meanwhile."""
    background(stack, graphql.persisted.follow(), "trusted-documents")
    if graphql.cluster.reloader is None:
        return None
    live = LiveSchema(graphql, graphql.cluster.catalog, idle_seconds=group_idle_seconds)
    live.start(rebuild=True)
    stack.push_async_callback(live.aclose)
    return live


def persisted_documents(settings: Settings) -> Persisted:
    """What ``--trusted-documents`` and ``--[no-]persisted-queries`` ask (ConfigError: a
    manifest that cannot be served)."""
    manifest = Path(settings.trusted_documents) if settings.trusted_documents else None
    return Persisted(manifest, apq=settings.persisted_queries)


def serve_tls(
    stack: AsyncExitStack, settings: Settings, http_tls: SSLContext | None
) -> grpc.ServerCredentials | None:
    """With ``--tls-cert-file``: the gRPC server's credentials, and the certificate loaded
    into the HTTP listener's context (``http_tls``, when served) and reloaded into both
    when its files change (``None``: plaintext)."""
    if not (settings.tls_cert_file and settings.tls_key_file):
        return None
    certificates = Certificates(
        TlsFiles(
            Path(settings.tls_cert_file),
            Path(settings.tls_key_file),
            Path(settings.grpc_client_ca_file) if settings.grpc_client_ca_file else None,
        )
    )
    if http_tls is not None:
        certificates.serve_context(http_tls)
    credentials = certificates.grpc_credentials()
    background(stack, certificates.watch(settings.tls_reload_seconds), "tls-reload")
    return credentials


async def serve_grpc(
    stack: AsyncExitStack,
    settings: Settings,
    fleet: Fleet,
    *,
    visibility: Visibility,
    drain: Drain,
    credentials: grpc.ServerCredentials | None,
    live: LiveSchema | None,
) -> tuple[grpc.aio.Server, int]:
    """Start the gRPC server on ``fleet``, shown as ``visibility`` says (stopped with the
    stack, with 5 s of grace).

    Its health follows readiness (the ``/graphql`` schema of the current catalog) when
    discovery is on (``live``); it serves from the start otherwise.
    """
    grpc_health = None
    if live is not None:
        grpc_health = health.aio.HealthServicer()
        background(
            stack, live.follow_ready(functools.partial(set_health, grpc_health)), "grpc-health"
        )
    server, port = await start_grpc(
        fleet,
        settings.host,
        settings.grpc_port,
        visibility=visibility,
        options=grpc_options(settings),
        credentials=credentials,
        drain=drain,
        health_servicer=grpc_health,
    )
    stack.push_async_callback(server.stop, 5.0)
    return server, port


def end_subscriptions(
    stack: AsyncExitStack,
    drain: Drain,
    graphql: GraphQLApp,
    live: LiveSchema | None,
    *,
    fleet: Fleet,
    clusters: ClusterEndpoints,
) -> None:
    """End every subscription before the servers stop, on a drain and at shutdown.

    On SIGTERM (:mod:`gateway.shutdown`): GraphQL subscriptions, then the watch hub's
    (gRPC ``Watch``), each ended with its resume point; the drain's task waits for a
    request.  At shutdown, registered last so it runs first: the GraphQL feeds (the other
    clusters' endpoints first, which then stop following the fleet, so its clusters closing
    ends nothing twice), then the shared watches (every gRPC ``Watch`` ends with them), so
    the gRPC server stops without waiting out its grace for streams that would never end.
    The same for every cluster of the fleet.
    """

    async def close_watches() -> None:
        for _, cluster in fleet:
            await cluster.watches.aclose()

    stack.push_async_callback(close_watches)
    stack.push_async_callback(graphql.subscriptions.aclose)
    stack.push_async_callback(clusters.aclose)

    async def on_drain() -> None:
        graphql.subscriptions.drain()
        if live is not None:
            live.drain()
        clusters.drain()
        for _, cluster in fleet:
            cluster.watches.drain()

    drain.on_drain(on_drain)
    background(stack, drain.serve(), "drain")


# -- the fleet: clusters other than the default ---------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterSource:
    """Where a named cluster comes from: a kubeconfig file (``--cluster``, a file of
    ``--clusters-dir``), or a demo upstream of its own (``--demo-clusters``)."""

    name: str
    kubeconfig: Path | None = None
    context: str | None = None
    #: The kubeconfig's bytes when read: a changed file is a changed source (rebuilt).
    content: bytes = b""
    demo: bool = False


#: Seconds before a cluster that failed to build is tried again (doubling up to the most).
RETRY_FIRST = 1.0
RETRY_MOST = 60.0


async def demo_upstream(stack: AsyncExitStack, *, cluster: str = DEFAULT) -> Upstream:
    """A demo upstream (:mod:`gateway.demomode`) served until the stack closes, the gateway's
    own identity on it the demo's admin; a cluster other than the default gets a namespace
    named after it, so a newcomer sees which cluster answered."""
    upstream_class = demomode.upstream_class(asked=True)
    demo = await stack.enter_async_context(upstream_class(animate=True))
    if cluster != DEFAULT:
        await demo.store.ensure_namespace(cluster)
    return Upstream(
        config.UpstreamConfig(server=demo.url, source="demo"),
        gateway_token=demo.admin_token,
        demo=True,
    )


def read_clusters_dir(path: Path, problems: list[str] | None = None) -> list[ClusterSource]:
    """One source per kubeconfig file in ``path``, named by the file.

    Dotfiles are left out, and so are directories: a mounted Secret holds its files under
    ``..data`` and ``..<timestamp>`` and links each key to them (the links are read).  A
    file whose name cannot name a cluster is left out, said in ``problems`` (logged when
    none is given).
    """
    sources = []
    for entry in sorted(path.iterdir()):
        if entry.name.startswith(".") or not entry.is_file():
            continue
        try:
            name = check_cluster_name(entry.name, f"--clusters-dir {path}")
            content = entry.read_bytes()
        except (ConfigError, OSError) as exc:
            problem = f"cluster file {entry} left out: {exc}"
            if problems is None:
                log.error("%s", problem)
            else:
                problems.append(problem)
            continue
        sources.append(ClusterSource(name, entry, content=content))
    return sources


@dataclass(slots=True)
class _Member:
    source: ClusterSource
    task: asyncio.Task[None]
    #: Set once the cluster is in the fleet (a later source replaces it only then).
    served: asyncio.Event


class FleetBuilder:
    """Builds the named clusters of ``fleet``, each on an exit stack of its own, in the
    background, and keeps them as configured.

    Each cluster is built in a task of its own: a slow, broken or unreachable cluster
    never delays another or the gateway's start.  A build that fails (a broken kubeconfig,
    a missing file) is logged and tried again with backoff, the cluster not served
    meanwhile; a cluster whose source changes is rebuilt and replaces the old one, which
    is closed (its clients, watches and reload task) once the new one serves; a removed
    one leaves the fleet and is closed.

    Args:
        settings: the gateway's settings; each named cluster is built with them, less
            what names the default cluster's own credential (``--token-file``,
            ``--discovery-token-file``, ``--gateway-identity``): its kubeconfig's user is
            the gateway's identity there.
        newcomers: the gateway's one budget of reviews of callers not known yet, which
            every named cluster's access reviews draw on (one of its own by default).
    """

    def __init__(
        self,
        settings: Settings,
        fleet: Fleet,
        metrics: Metrics,
        large_lists: LargeLists | None = None,
        *,
        identity: Identity = FORWARDING,
        newcomers: Newcomers | None = None,
    ) -> None:
        self.large_lists = large_lists
        self.settings = dataclasses.replace(
            settings, token_file=None, discovery_token_file=None, gateway_identity=False
        )
        self.fleet = fleet
        self.metrics = metrics
        #: How callers are identified on each named cluster (impersonate mode: the callers
        #: the home cluster authenticates are impersonated).
        self.identity = identity
        #: The one budget of reviews of callers not known yet, every cluster's.
        self.newcomers = (
            newcomers if newcomers is not None else Newcomers(rate=settings.max_new_caller_reviews)
        )
        self.members: dict[str, _Member] = {}
        self._groups: dict[str, dict[str, ClusterSource]] = {}
        #: What the last configuration or scan logged, by kind (see :meth:`_say`).
        self._said: dict[str, set[str]] = {}
        self._retiring: set[asyncio.Task[None]] = set()

    def _retire(self, task: asyncio.Task[None]) -> None:
        """Cancel ``task`` (its cluster leaves the fleet and closes), awaited at close."""
        task.cancel()
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    def configure(self, group: str, sources: list[ClusterSource]) -> None:
        """Serve ``sources`` as ``group``'s clusters from now on (``flags``: the fixed ones,
        which win over a ``--clusters-dir`` file of the same name; ``dir``: the files)."""
        self._groups[group] = {s.name: s for s in sources}
        files = self._groups.get("dir", {})
        wanted = dict(files)
        shadowed: dict[str, int] = {}
        for grp, fixed in self._groups.items():
            if grp == "dir":
                continue
            for name in sorted(fixed.keys() & files.keys()):
                shadowed[f"cluster {name}: the flag wins over its --clusters-dir file"] = (
                    logging.WARNING
                )
            wanted.update(fixed)
        self._say("shadowed", shadowed)
        for name in [n for n in self.members if n not in wanted]:
            log.info("cluster %s: removed", name)
            self._retire(self.members.pop(name).task)
        for name, source in wanted.items():
            member = self.members.get(name)
            if member is not None and member.source == source:
                continue
            previous = None
            if member is not None:
                log.info("cluster %s: its configuration changed, rebuilding it", name)
                if member.served.is_set():
                    previous = member.task  # serves until its replacement does
                else:
                    self._retire(member.task)
            served = asyncio.Event()
            task = asyncio.create_task(self._keep(source, served, previous), name=f"cluster-{name}")
            self.members[name] = _Member(source, task, served)

    async def _keep(
        self, source: ClusterSource, served: asyncio.Event, previous: asyncio.Task[None] | None
    ) -> None:
        """Build ``source``'s cluster (again after a failure), serve it until cancelled."""
        delay = RETRY_FIRST
        while True:
            try:
                async with AsyncExitStack() as stack:
                    upstream = await self._upstream(stack, source)
                    cluster = await build_cluster(
                        stack,
                        self.settings,
                        upstream,
                        metrics=self.metrics,
                        name=source.name,
                        large_lists=self.large_lists,
                        identity=self.identity,
                        newcomers=self.newcomers,
                    )
                    self.fleet.add(source.name, cluster)
                    served.set()
                    log.info("cluster %s: served (%s)", source.name, upstream.config.server)
                    if previous is not None:
                        await _cancelled(previous)
                        previous = None
                    try:
                        await asyncio.Future()  # served until cancelled
                    finally:
                        if source.name in self.fleet.names() and (
                            self.fleet.get(source.name) is cluster
                        ):
                            self.fleet.remove(source.name)
            except asyncio.CancelledError:
                if previous is not None:
                    await _cancelled(previous)
                raise
            except Exception as exc:
                log.error(
                    "cluster %s cannot be served: %s; trying again in %.0f s",
                    source.name,
                    exc if isinstance(exc, ConfigError) else repr(exc),
                    delay,
                )
                await asyncio.sleep(delay)  # backoff before the next try, not a wait for state
                delay = min(delay * 2, RETRY_MOST)

    async def _upstream(self, stack: AsyncExitStack, source: ClusterSource) -> Upstream:
        if source.demo:
            return await demo_upstream(stack, cluster=source.name)
        resolved = kubeconfig.resolve_upstream(
            kubeconfig=source.kubeconfig,
            context=source.context,
            allow_insecure=self.settings.allow_insecure_upstream,
        )
        if resolved is None:
            raise ConfigError(f"{source.kubeconfig}: no cluster in this kubeconfig")
        return Upstream(resolved)

    async def follow_dir(self, path: Path, *, rescan_seconds: float = 5.0) -> None:
        """Serve ``path``'s files as clusters, following the directory until cancelled.

        Every change re-reads the whole directory (a mounted Secret changes by swapping
        its ``..data`` link, not by writing files); it is also re-read every
        ``rescan_seconds``, so a change made before the watch began is not missed.
        """
        self._scan(path)
        async for _ in watchfiles.awatch(
            path,
            watch_filter=None,
            debounce=200,
            rust_timeout=int(rescan_seconds * 1000),
            yield_on_timeout=True,
        ):
            self._scan(path)

    def _scan(self, path: Path) -> None:
        """Read ``path`` again and serve what it holds; a problem is logged when it appears
        or changes, not at every rescan."""
        problems: list[str] = []
        try:
            sources = read_clusters_dir(path, problems)
        except OSError as exc:
            self._say("dir", {f"--clusters-dir {path} cannot be read: {exc}": logging.ERROR})
            return
        self._say("dir", dict.fromkeys(problems, logging.ERROR))
        self.configure("dir", sources)

    def _say(self, kind: str, lines: dict[str, int]) -> None:
        """Log each of ``lines`` (message: level) unless the last call of the same
        ``kind`` said it too: a problem that lasts is said once, not at every rescan (and
        a file name, the caller's text, cannot flood the log)."""
        said = self._said.get(kind, set())
        for message, level in lines.items():
            if message not in said:
                log.log(level, "%s", message)
        self._said[kind] = set(lines)

    async def aclose(self) -> None:
        """Stop serving every named cluster and close them."""
        tasks = [m.task for m in self.members.values()]
        self.members.clear()
        for task in tasks:
            self._retire(task)
        await asyncio.gather(*tasks, *self._retiring, return_exceptions=True)


def cluster_sources(settings: Settings) -> list[ClusterSource]:
    """The fixed named clusters: ``--cluster`` flags and ``--demo-clusters`` beyond the first.

    Raises:
        ConfigError: a malformed ``--cluster``.
    """
    sources = [
        ClusterSource(spec.name, Path(spec.kubeconfig), spec.context)
        for spec in cluster_specs(settings)
    ]
    sources += [ClusterSource(f"demo-{n}", demo=True) for n in range(2, settings.demo_clusters + 1)]
    return sources


def cluster_visibility(settings: Settings, fleet: Fleet, newcomers: Newcomers) -> Visibility:
    """Which clusters of ``fleet`` each caller may see (``--cluster-visibility``,
    ``--shared-identity-clusters``), its reviews of callers not known yet drawing on
    ``newcomers``; built over the fleet, handed to both front ends."""
    return Visibility(
        fleet,
        settings.cluster_visibility,
        shared=shared_identity_names(settings.shared_identity_clusters),
        newcomers=newcomers,
    )


def identity_strategy(settings: Settings, fleet: Fleet, newcomers: Newcomers) -> Identity:
    """How callers are identified (``--identity``): forward mode's strategy, or impersonate
    mode's over TokenReviews that find the home cluster in ``fleet`` (built before the
    clusters whose clients they serve, so nothing is bound later), their reviews of
    callers not known yet drawing on ``newcomers``.  The clusters' clients are made with
    it and their adapters hold it (:func:`build_cluster`); :func:`serve_fleet` stops it
    with the stack."""
    if settings.identity != IMPERSONATE:
        return FORWARDING
    log.warning(
        "IMPERSONATE MODE: callers are authenticated by TokenReviews on cluster %s; every "
        "cluster is called with its own gateway credential impersonating the caller",
        settings.home_cluster,
    )
    groups = (g.strip() for g in settings.impersonate_system_groups.split(","))
    audiences = (a.strip() for a in (settings.token_review_audiences or "").split(","))
    return Impersonating(
        TokenReviews(
            settings.home_cluster,
            fleet,
            newcomers=newcomers,
            recheck=settings.token_recheck_seconds,
            audiences=tuple(a for a in audiences if a),
            carrying=Carrying(
                system_groups=frozenset(g for g in groups if g),
                system_users=settings.impersonate_system_users,
            ),
        )
    )


def serve_fleet(
    stack: AsyncExitStack,
    settings: Settings,
    fleet: Fleet,
    default: Cluster,
    metrics: Metrics,
    *,
    identity: Identity = FORWARDING,
    newcomers: Newcomers | None = None,
) -> None:
    """Serve ``default`` in ``fleet``, then the named clusters built in the background
    with ``identity`` and ``newcomers`` (and ``--clusters-dir`` followed) until the stack
    closes."""
    fleet.add(DEFAULT, default)
    stack.push_async_callback(identity.aclose)  # impersonate mode: its token rechecks
    builder = FleetBuilder(
        settings,
        fleet,
        metrics,
        default.adapter.large_lists,
        identity=identity,
        newcomers=newcomers,
    )
    stack.push_async_callback(builder.aclose)
    builder.configure("flags", cluster_sources(settings))
    if settings.clusters_dir:
        path = Path(settings.clusters_dir)
        if not path.is_dir():
            raise ConfigError(f"--clusters-dir {path}: not a directory")
        background(stack, builder.follow_dir(path), "clusters-dir")

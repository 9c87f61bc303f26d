"""The Starlette application and its lifespan, which owns every long-lived thing.

The lifespan resolves the upstream (explicit flags, in-cluster, kubeconfig, else the demo
upstream), creates the one ``httpx.AsyncClient``, the :class:`KubeAdapter` and the gRPC
server, and tears them down in reverse order.  Nothing lives in module globals.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import gc
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
from grpc_health.v1 import health
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from gateway import demomode, tracing
from gateway.core import config, kubeconfig
from gateway.core.access import AccessReviews
from gateway.core.adapter import KubeAdapter
from gateway.core.budget import Budget
from gateway.core.catalog import CatalogHolder
from gateway.core.client import build_http_client
from gateway.core.discovery import Discovery, ResourcePatterns
from gateway.core.drain import Drain
from gateway.core.hub import SharedWatches, WatchHub
from gateway.core.metrics import Metrics
from gateway.core.reload import CatalogReloader
from gateway.graphql.live import LiveSchema, group_routes
from gateway.graphql.server import GraphQLApp, graphql_routes
from gateway.grpc.server import GrpcOptions, set_health, start_grpc
from gateway.requestid import RequestContext
from gateway.settings import Settings
from gateway.shutdown import DrainGate
from gateway.tls import Certificates, TlsFiles

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


@dataclass(slots=True)
class Runtime:
    """What the lifespan built; handlers reach it through ``request.app.state.runtime``."""

    settings: Settings
    adapter: KubeAdapter
    watches: WatchHub
    http: httpx.AsyncClient
    grpc_server: grpc.aio.Server
    grpc_port: int
    demo: bool
    metrics: Metrics
    readiness: Readiness
    drain: Drain
    #: What is served now (seed resources plus discovery's); also ``app.state.catalog``.
    catalog: CatalogHolder
    #: Keeps the GraphQL schema in step with the catalog (``None``: discovery is off).
    live_schema: LiveSchema | None = None


async def _healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


async def _metrics(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def _readyz(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    if runtime.drain.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    live = runtime.live_schema
    if live is not None and not live.ready():
        # A replica that cannot yet serve what the cluster has takes no traffic.
        return JSONResponse({"status": "GraphQL schema not built yet"}, status_code=503)
    if await runtime.readiness.ready():
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": "upstream not ready"}, status_code=503)


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
    )


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
    settings: Settings, upstream_cfg: config.UpstreamConfig, demo: bool
) -> tuple[config.UpstreamConfig | None, str]:
    """The upstream record discovery and the CRD/APIService watches use, and whose identity.

    Discovery is the gateway's, never a caller's: ``--discovery-token-file``, else the
    gateway's own credential (``--token-file`` / ``KUBE_GATEWAY_TOKEN_FILE``, the
    kubeconfig's user, the service account in a pod), in demo mode the demo's admin token.
    ``None``: there is none (or ``--no-discovery``), so the seed resources only.
    """
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
    if demo:
        return dataclasses.replace(upstream_cfg, token=demomode.admin_token()), "the demo's admin"
    if upstream_cfg.has_gateway_credential:
        return upstream_cfg, f"the gateway's own credential from {upstream_cfg.source}"
    return None, "no gateway credential is configured (--discovery-token-file or --token-file)"


#: Young-generation thresholds of the cyclic GC while serving (Python's are 700, 10, 10).
GC_THRESHOLDS = (20_000, 20, 20)


def tune_garbage_collector() -> None:
    """Keep full garbage collections short and rare while serving many subscribers.

    A full collection walks every tracked object and stops the event loop meanwhile: with
    the schemas and the contract in memory (hundreds of thousands of objects that live as
    long as the process) it took 80-150 ms every few seconds under fan-out load, which set
    the delivery p99.  ``gc.freeze()`` moves what exists after start-up to the permanent
    generation, so a full collection walks only what came later; higher thresholds make
    young collections rarer, at a small cost in memory.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def create_app(settings: Settings, *, tune_gc: bool = False) -> Starlette:
    """Build the HTTP application; the lifespan starts the upstream side and gRPC.

    Args:
        settings: the configuration.
        tune_gc: the process is ours alone (``kube-gateway serve``): once started, move
            everything startup built (modules, schemas, the contract) out of the cyclic
            garbage collector's reach and collect the young generations less often (see
            :func:`tune_garbage_collector`).
    """

    origins = frozenset(
        o.strip().rstrip("/") for o in (settings.allowed_origins or "").split(",") if o.strip()
    )
    drain = Drain(settings.drain_seconds)
    catalog = CatalogHolder()
    graphql = GraphQLApp(allowed_origins=origins, drain=drain)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        async with contextlib.AsyncExitStack() as stack:
            if tracing.setup_from_env():  # OTEL_* variables; last out: flushes every span
                stack.push_async_callback(asyncio.to_thread, tracing.shutdown)
            upstream_cfg = None
            if not settings.demo:
                upstream_cfg = resolve_upstream(settings)
            demo = upstream_cfg is None
            if upstream_cfg is None:
                demo_upstream = demomode.upstream_class(asked=settings.demo)
                reason = (
                    "--demo was given"
                    if settings.demo
                    else "no kubeconfig or in-cluster config found"
                )
                upstream = await stack.enter_async_context(demo_upstream(animate=True))
                upstream_cfg = config.UpstreamConfig(server=upstream.url, source="demo")
                log.warning(
                    "upstream: the DEMO upstream at %s (%s); sample data keeps changing. "
                    "Call with 'Authorization: Bearer %s' (admin) or another demo token.",
                    upstream.url,
                    reason,
                    upstream.admin_token,
                )
            else:
                log.info(
                    "upstream: %s",
                    config.describe(upstream_cfg, gateway_identity=settings.gateway_identity),
                )

            # Requests and streams (watches, log follows) use separate pools, so open
            # streams can never starve requests; the stream budget fits its pool.
            def client(
                cfg: config.UpstreamConfig, identity: bool, pool: int, internal: str | None = None
            ) -> httpx.AsyncClient:
                built = build_http_client(
                    cfg,
                    gateway_identity=identity,
                    http2=settings.upstream_http2,
                    max_connections=pool,
                    internal=internal,
                )
                stack.push_async_callback(built.aclose)
                return built

            http = client(
                upstream_cfg, settings.gateway_identity, settings.upstream_max_connections
            )
            stream_http = client(
                upstream_cfg, settings.gateway_identity, settings.upstream_max_streams
            )
            metrics = Metrics()
            adapter = KubeAdapter(
                http,
                metrics=metrics,
                stream_http=stream_http,
                requests=Budget("requests", 1 << 30, settings.max_requests_per_identity),
                max_list_items=settings.max_list_items,
                streams=Budget(
                    "upstream streams",
                    settings.upstream_max_streams,
                    settings.upstream_max_streams_per_identity,
                ),
            )
            shared = None
            if settings.shared_watches:
                # The gateway's own identity makes the shared upstream watches (and their
                # lists); callers are admitted by reviews made with their own tokens.
                own_cfg = (
                    dataclasses.replace(upstream_cfg, token=demomode.admin_token())
                    if demo
                    else upstream_cfg
                )
                own_http = client(own_cfg, True, settings.upstream_max_streams)
                shared = SharedWatches(
                    KubeAdapter(
                        own_http, stream_http=own_http, streams=adapter.streams, metrics=metrics
                    ),
                    AccessReviews(adapter, ttl=min(30.0, settings.access_recheck_seconds)),
                    recheck=settings.access_recheck_seconds,
                )
                log.warning(
                    "shared watches: upstream watches are made with the gateway's own "
                    "credential and shared across identities; each subscriber is admitted "
                    "by access reviews with its own token, rechecked every %.0f s",
                    settings.access_recheck_seconds,
                )
            watches = WatchHub(
                adapter,
                shared=shared,
                subscribers=Budget(
                    "subscriptions",
                    settings.max_subscriptions,
                    settings.max_subscriptions_per_identity,
                ),
                max_queue=graphql.limits.max_queue,
                linger=settings.watch_linger_seconds,
            )
            metrics.watch_hub(lambda: watches.stats)
            lag = asyncio.create_task(metrics.watch_event_loop(), name="event-loop-lag")
            stack.push_async_callback(_cancelled, lag)
            metrics.served_resources(lambda: len(catalog.current.registry.records))
            disc_cfg, whose = discovery_upstream(settings, upstream_cfg, demo)
            live_schema: LiveSchema | None = None
            if disc_cfg is None:
                log.warning(
                    "discovery off (%s): serving the %d built-in resources only",
                    whose,
                    len(catalog.current.registry),
                )
            else:
                # Its own small client: discovery reads and two long watches (CRDs and
                # APIServices), with the gateway's identity, never a caller's.
                disc_http = client(disc_cfg, True, 16, "discovery and the CRD/APIService watches")
                patterns = ResourcePatterns.parse(settings.resources)
                reloader = CatalogReloader(
                    Discovery(disc_http, patterns=patterns, metrics=metrics),
                    catalog,
                    KubeAdapter(disc_http, stream_http=disc_http, metrics=metrics),
                    metrics=metrics,
                )

                async def discover() -> None:
                    # In the background: listing a thousand CRDs and reading discovery takes
                    # seconds, and the seed kinds answer meanwhile (readiness waits).
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

                reloading = asyncio.create_task(discover(), name="catalog-reload")
                stack.push_async_callback(_cancelled, reloading)
                # GraphQL follows the catalog: the first build runs in the background (the
                # seed schema serves meanwhile), later ones on every swap.
                live_schema = LiveSchema(graphql, catalog)
                live_schema.start(rebuild=True)
                stack.push_async_callback(live_schema.aclose)
            grpc_credentials = None
            if settings.tls_cert_file and settings.tls_key_file:
                certificates = Certificates(
                    TlsFiles(
                        Path(settings.tls_cert_file),
                        Path(settings.tls_key_file),
                        Path(settings.grpc_client_ca_file)
                        if settings.grpc_client_ca_file
                        else None,
                    )
                )
                http_tls = getattr(app.state, "http_tls", None)
                if http_tls is not None:
                    certificates.serve_context(http_tls)
                grpc_credentials = certificates.grpc_credentials()
                watcher = asyncio.create_task(
                    certificates.watch(settings.tls_reload_seconds), name="tls-reload"
                )
                stack.callback(watcher.cancel)
                app.state.certificates = certificates
            # gRPC health follows readiness (the /graphql schema of the current catalog)
            # when discovery is on; it serves from the start otherwise.
            grpc_health = None
            if live_schema is not None:
                grpc_health = health.aio.HealthServicer()
                following = asyncio.create_task(
                    live_schema.follow_ready(functools.partial(set_health, grpc_health)),
                    name="grpc-health",
                )
                stack.push_async_callback(_cancelled, following)
            # The generic gRPC ResourceService reads the catalog once per call.
            grpc_server, grpc_port = await start_grpc(
                adapter,
                settings.host,
                settings.grpc_port,
                hub=watches,
                options=grpc_options(settings),
                credentials=grpc_credentials,
                drain=drain,
                catalog=catalog,
                health_servicer=grpc_health,
            )
            stack.push_async_callback(grpc_server.stop, 5.0)
            # Shutdown, in reverse: GraphQL feeds, then the shared watches (every gRPC
            # Watch ends with them), then the gRPC server, then the clients.
            stack.push_async_callback(watches.aclose)
            stack.push_async_callback(graphql.hub.aclose)

            # On SIGTERM (gateway/shutdown.py): GraphQL subscriptions, then the hub's (gRPC
            # Watch), each ended with its resume point; the task waits for a request.
            async def end_subscriptions() -> None:
                graphql.hub.drain()
                if live_schema is not None:
                    live_schema.drain()
                watches.drain()

            drain.bind()
            drain.on_drain(end_subscriptions)
            draining = asyncio.create_task(drain.serve(), name="drain")
            stack.push_async_callback(_cancelled, draining)
            app.state.runtime = Runtime(
                settings=settings,
                adapter=adapter,
                watches=watches,
                http=http,
                grpc_server=grpc_server,
                grpc_port=grpc_port,
                demo=demo,
                metrics=metrics,
                readiness=Readiness(http),
                drain=drain,
                catalog=catalog,
                live_schema=live_schema,
            )
            if tune_gc:
                tune_garbage_collector()
            yield {}
            log.info("shutting down")

    # Outermost: the request id and the access line cover everything below, refusals
    # included; then the drain gate refuses new work while draining and counts what is
    # in flight.
    middleware = [Middleware(RequestContext), Middleware(DrainGate, drain=drain)]
    if origins:
        # Bearer tokens travel in headers, never cookies: no credentials mode is needed.
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=sorted(origins),
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type", "Accept"],
                max_age=600,
            )
        )
    app = Starlette(
        routes=[
            Route("/healthz", _healthz),
            Route("/readyz", _readyz),
            Route("/metrics", _metrics),
            *graphql_routes(graphql),
            *group_routes(),
        ],
        middleware=middleware,
        lifespan=lifespan,
    )
    app.state.drain = drain  # the command's signal handling asks it to drain
    app.state.catalog = catalog  # swapped whole by the lifespan's catalog reload
    return app


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

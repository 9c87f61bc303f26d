"""The Starlette application and its lifespan, the composition root.

The lifespan builds the runtime (:mod:`gateway.runtime`): the upstream (explicit flags,
in-cluster, kubeconfig, else the demo upstream), the :class:`~gateway.core.fleet.fleet.Fleet`
(empty), the :class:`~gateway.core.fleet.visibility.Visibility` over it and the identity
strategy (forward, or impersonate with TokenReviews on that fleet), the default
:class:`~gateway.core.fleet.cluster.Cluster` made with that strategy, then the named
clusters (``--cluster``, ``--clusters-dir``, ``--demo-clusters``), both front ends started
on that same fleet and visibility, and the drain wired; the exit stack tears it all down in
reverse order.  Nothing lives in module globals.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any, ClassVar

from graphql import print_schema
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway import demomode
from gateway.core import COLLECTOR_HOLD, errors
from gateway.core.fleet.fleet import Fleet
from gateway.core.process.drain import Drain
from gateway.core.process.metrics import Metrics
from gateway.core.support.cache import Answers
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.budget import Newcomers, scope_of
from gateway.core.upstream.config import describe
from gateway.core.upstream.credentials import credential_of_authorization
from gateway.core.upstream.identity import FORWARD
from gateway.graphql.endpoints.clusters import ClusterEndpoints, cluster_routes
from gateway.graphql.endpoints.live import GroupEndpoint, group_routes
from gateway.graphql.endpoints.server import GraphQLApp, graphql_routes
from gateway.graphql.engine.admission import Admission
from gateway.graphql.engine.collector import COLLECTOR as SCHEMA_COLLECTOR
from gateway.graphql.engine.persisted import Persisted
from gateway.graphql.transport.origins import HostCheck, PreflightRefusal
from gateway.requestid import RequestContext
from gateway.runtime import (
    Runtime,
    Upstream,
    build_cluster,
    cluster_visibility,
    demo_upstream,
    end_subscriptions,
    identity_strategy,
    observe,
    persisted_documents,
    resolve_upstream,
    serve_fleet,
    serve_graphql,
    serve_grpc,
    serve_list_work,
    serve_tls,
)
from gateway.settings import Settings
from gateway.shutdown import DrainGate

log = logging.getLogger("gateway")


async def _healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


class MetricsAccess:
    """Who may read ``/metrics`` (``--metrics-access``).

    ``rbac`` (the default): a caller whose bearer token the default cluster allows ``get``
    on the non-resource URL ``/metrics``, as Kubernetes components serve their own metrics
    (a SelfSubjectAccessReview made with the caller's credential, so in impersonate mode
    for the impersonated user; Prometheus' usual ClusterRole has that rule).  No token:
    401 at once, nothing asked upstream.  An answer is kept for its caller (by a hash of
    its token) 60 s, a refusal 10 s.  A token the gateway does not know yet draws on the one
    budget of reviews of new callers (``newcomers``; in impersonate mode the home cluster's
    TokenReview does): past it, 429 at once, nothing asked.
    ``anyone``: every caller (the metrics name every cluster and served resource).
    """

    ALLOWED_TTL: ClassVar[float] = 60.0
    REFUSED_TTL: ClassVar[float] = 10.0

    def __init__(self, mode: str, newcomers: Newcomers) -> None:
        self.mode = mode
        self.newcomers = newcomers
        self._answers: Answers[str, int] = Answers(max_entries=1_000)

    async def refusal(self, request: Request, adapter: KubeAdapter) -> Response | None:
        """``None`` when the caller may read the metrics, else the answer that says why."""
        if self.mode == "anyone":
            return None
        try:
            credential = credential_of_authorization(request.headers.get("authorization"))
        except errors.GatewayError:
            credential = None
        if credential is None or not credential.subject:
            return self._refused(401)

        scope = scope_of(credential)

        async def ask() -> tuple[int, float]:
            if adapter.identity.mode == FORWARD:  # else the TokenReview's admission
                self.newcomers.admit(scope)
            try:
                allowed = await adapter.path_review("/metrics", "get", credential=credential)
            except errors.Unauthorized:
                return 401, self.REFUSED_TTL
            self.newcomers.remember(scope)  # answered: the cluster authenticated the caller
            return (200, self.ALLOWED_TTL) if allowed else (403, self.REFUSED_TTL)

        try:
            status = await self._answers.get(scope, ask)
        except errors.ResourceExhausted as exc:
            return PlainTextResponse(
                f"/metrics: {exc.message}\n", status_code=429, headers={"retry-after": "1"}
            )
        except errors.GatewayError as exc:
            return PlainTextResponse(
                f"/metrics: the cluster's authorizer could not be asked: {exc.message}\n",
                status_code=503,
                headers={"retry-after": "1"},
            )
        return None if status == 200 else self._refused(status)

    @staticmethod
    def _refused(status: int) -> Response:
        why = "no valid bearer token" if status == 401 else "this caller may not"
        text = (
            f"/metrics: {why}; it is served to callers the default cluster allows to get "
            'the non-resource URL /metrics (RBAC: nonResourceURLs: ["/metrics"], verbs: '
            '["get"]), see docs/operations.md\n'
        )
        headers = {"www-authenticate": "Bearer"} if status == 401 else None
        return PlainTextResponse(text, status_code=status, headers=headers)


async def _metrics(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    access: MetricsAccess = request.app.state.metrics_access
    refused = await access.refusal(request, runtime.cluster.adapter)
    if refused is not None:
        return refused
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)


async def _readyz(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    if runtime.drain.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    live = runtime.live_schema
    if live is not None and not live.ready():
        # A replica that cannot yet serve what the cluster has takes no traffic.
        return JSONResponse({"status": "GraphQL schema not built yet"}, status_code=503)
    if await runtime.cluster.readiness.ready():
        return JSONResponse({"status": "ok"})
    return JSONResponse({"status": "upstream not ready"}, status_code=503)


async def _home(request: Request) -> Response:
    """``/``: a browser lands on GraphiQL (the endpoint's own page), not on a 404."""
    return RedirectResponse("/graphql", status_code=307)


def allowed_hosts(settings: Settings) -> frozenset[str]:
    """The host names the gateway answers (``--allowed-hosts``; IP addresses and localhost
    always): any by default, listed ones only with ``--gateway-identity``, where a page that
    rebinds a name of its own to the gateway would otherwise be served as the gateway."""
    if settings.allowed_hosts is None:
        return frozenset() if settings.gateway_identity else frozenset({"*"})
    return frozenset(h.strip().lower() for h in settings.allowed_hosts.split(",") if h.strip())


def serving_line(settings: Settings, grpc_port: int, tls: bool) -> str:
    """Where to go once started: the GraphQL endpoint (GraphiQL in a browser) and gRPC, at
    an address a browser on this machine can open (not ``0.0.0.0``)."""
    host = settings.host if settings.host not in ("0.0.0.0", "::", "") else "localhost"
    scheme = "https" if tls else "http"
    return (
        f"serving GraphQL at {scheme}://{host}:{settings.http_port}/graphql (open it in a "
        f"browser for GraphiQL) and gRPC at {host}:{grpc_port}"
    )


async def _upstream(stack: AsyncExitStack, settings: Settings) -> Upstream:
    """The configured upstream, else (nothing configured, or ``--demo``) the demo's."""
    configured = None if settings.demo else resolve_upstream(settings)
    if configured is None:
        return await _demo_upstream(stack, settings)
    log.info(
        "upstream: %s",
        describe(
            configured,
            gateway_identity=settings.gateway_identity,
            impersonate=settings.identity == "impersonate",
        ),
    )
    return Upstream(configured)


async def _demo_upstream(stack: AsyncExitStack, settings: Settings) -> Upstream:
    """The demo upstream (a distribution of its own, see :mod:`gateway.demomode`), served
    until the stack closes; the gateway's own identity on it is the demo's admin."""
    reason = "--demo was given" if settings.demo else "no kubeconfig or in-cluster config found"
    demomode.upstream_class(asked=settings.demo)  # not installed: the error says why
    upstream = await demo_upstream(stack)
    log.warning(
        "upstream: the DEMO upstream at %s (%s); sample data keeps changing. "
        "Call with 'Authorization: Bearer %s' (admin) or another demo token.",
        upstream.config.server,
        reason,
        upstream.gateway_token,
    )
    return upstream


#: Young-generation thresholds of the cyclic GC while serving (Python's are 700, 10, 10).
GC_THRESHOLDS = (20_000, 20, 20)
#: The GIL's switch interval while serving, in seconds (Python's is 0.005).
SWITCH_INTERVAL = 0.001


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
    # Each schema built from now on is frozen too (gateway/graphql/engine/collector.py),
    # and so is what a large view cache fill leaves (gateway/core/process/collector.py).
    SCHEMA_COLLECTOR.freeze = True
    COLLECTOR_HOLD.freeze = True
    # A thread in pure Python (a schema build, an introspection) keeps the GIL for up to
    # the switch interval each time the event loop wants it back, and the loop wants it
    # back after every wait for I/O: 5 ms each (Python's default) added up to event-loop
    # lags over 50 ms during CRD churn (tests/bench/stalltrace).
    sys.setswitchinterval(SWITCH_INTERVAL)


class DirectPosts:
    """Pure ASGI middleware, the innermost: a ``POST`` to a path in :attr:`routes` (the
    GraphQL endpoints without path parameters, ``/graphql``) goes straight to its endpoint,
    past Starlette's exception middleware and router (their frames, the router's walk
    of the routes before it, the scope's copies: about 12 us of a small POST's CPU,
    docs/performance.md).  Nothing they would do for it is lost: the endpoint answers every
    method it is routed (its route has ``POST``), raises no ``HTTPException``, reads no path
    parameter, and what it raises still reaches Starlette's server-error middleware, which
    is outside this one.  Every other request is routed as before."""

    def __init__(self, app: ASGIApp, routes: dict[str, ASGIApp]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            direct = self.routes.get(scope["path"])
            if direct is not None:
                await direct(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _serve_routes(
    stack: AsyncExitStack,
    app: Starlette,
    routes: list[BaseRoute],
    direct: dict[str, ASGIApp] | None = None,
) -> None:
    """Serve ``routes`` on ``app`` until ``stack`` closes: the GraphQL endpoints, made by
    the lifespan with the cluster, fleet and visibility it built (asynchronously, after
    :func:`create_app` made the application), so each is whole from its first request and
    nothing is bound later.  A server sends no request before the lifespan started.
    Their ``POST`` routes without path parameters also go in ``direct`` (:class:`DirectPosts`)."""
    app.router.routes.extend(routes)
    posts = {
        route.path: route.app
        for route in routes
        if isinstance(route, Route) and "POST" in (route.methods or ()) and "{" not in route.path
    }
    if direct is not None:
        direct.update(posts)

    def unmount() -> None:
        for route in routes:
            app.router.routes.remove(route)
        if direct is not None:
            for path in posts:
                direct.pop(path, None)

    stack.callback(unmount)


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
    persisted = persisted_documents(settings)  # a wrong manifest stops here
    # The one admission of every GraphQL endpoint, present and future (each is made from
    # this one: gateway/graphql/engine/admission.py).
    admission = Admission(persisted, allowed_origins=origins, drain=drain)
    # The one budget of reviews of callers not known yet, for every way in: visibility's
    # reviews, TokenReviews, the access reviews of views and shared watches, /metrics.
    newcomers = Newcomers(rate=settings.max_new_caller_reviews)
    #: The GraphQL endpoints' POST routes, once mounted (:class:`DirectPosts`).
    direct: dict[str, ASGIApp] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        async with AsyncExitStack() as stack:
            metrics = observe(stack)
            upstream = await _upstream(stack, settings)
            # Each built from what exists already: the fleet (empty) first, then who sees
            # which of its clusters and how callers are identified on them (impersonate
            # mode's TokenReviews find the home cluster in it), then the clusters.
            fleet = Fleet()
            visibility = cluster_visibility(settings, fleet, newcomers)
            identity = identity_strategy(settings, fleet, newcomers)
            lists = serve_list_work(stack, settings, metrics)  # every cluster's, started on use
            cluster = await build_cluster(
                stack,
                settings,
                upstream,
                metrics=metrics,
                large_lists=lists,
                identity=identity,
                newcomers=newcomers,
            )
            # Both front ends serve the same fleet and visibility, handed to each alike.
            graphql = GraphQLApp(
                admission=admission, cluster=cluster, fleet=fleet, visibility=visibility
            )
            live = serve_graphql(
                stack, graphql, group_idle_seconds=settings.group_schema_idle_seconds
            )
            # The default cluster first; the named ones join in the background.
            serve_fleet(
                stack, settings, fleet, cluster, metrics, identity=identity, newcomers=newcomers
            )
            groups = GroupEndpoint(graphql, live)
            clusters = ClusterEndpoints(
                graphql, groups, live, group_idle_seconds=settings.group_schema_idle_seconds
            )
            _serve_routes(
                stack,
                app,
                [*graphql_routes(graphql), *group_routes(groups), *cluster_routes(clusters)],
                direct,
            )
            tls = serve_tls(stack, settings, getattr(app.state, "http_tls", None))
            grpc_server, grpc_port = await serve_grpc(
                stack,
                settings,
                fleet,
                visibility=visibility,
                drain=drain,
                credentials=tls,
                live=live,
            )
            end_subscriptions(stack, drain, graphql, live, fleet=fleet, clusters=clusters)
            if settings.http_port:  # 0: a test's free port, unknown here
                log.info(serving_line(settings, grpc_port, tls is not None))
            app.state.runtime = Runtime(
                settings,
                cluster,
                metrics,
                drain,
                grpc_server,
                grpc_port,
                fleet,
                visibility,
                identity,
                live,
            )
            if tune_gc:
                tune_garbage_collector()
            yield {}
            log.info("shutting down")

    # Outermost: the request id and the access line cover everything below, refusals
    # included; then the drain gate refuses new work while draining and counts what is
    # in flight.
    middleware = [
        Middleware(RequestContext),
        Middleware(DrainGate, drain=drain),
        # A preflight from a foreign origin is told which flag lets it in.
        Middleware(PreflightRefusal, allowed=origins),
    ]
    hosts = allowed_hosts(settings)
    if "*" not in hosts:  # DNS rebinding: a Host the gateway does not answer is refused
        middleware.insert(1, Middleware(HostCheck, allowed=hosts))
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
    # Innermost: a POST to a GraphQL endpoint, past the router (every check above done).
    middleware.append(Middleware(DirectPosts, routes=direct))
    app = Starlette(
        routes=[
            Route("/", _home, methods=["GET"]),
            Route("/healthz", _healthz),
            Route("/readyz", _readyz),
            Route("/metrics", _metrics),
            # The GraphQL endpoints join once the lifespan built what they serve.
        ],
        middleware=middleware,
        lifespan=lifespan,
    )
    app.state.drain = drain  # the command's signal handling asks it to drain
    app.state.metrics_access = MetricsAccess(settings.metrics_access, newcomers)
    return app


async def served_sdl(settings: Settings) -> str:
    """The SDL of the schema ``serve`` would answer ``/graphql`` with (``kube-gateway
    schema``), built by the lifespan's own steps, so it cannot drift from what clients get.

    The upstream is chosen as the lifespan chooses it (the demo upstream started when asked
    for), its cluster built with discovery, and the live schema left to take the
    discovered catalog in until it is ready (the schema half of what ``/readyz`` waits
    for); the SDL is printed from the schema the endpoint would serve.  No gRPC or HTTP
    server starts.
    """
    async with AsyncExitStack() as stack:
        upstream = await _upstream(stack, settings)
        cluster = await build_cluster(stack, settings, upstream, metrics=Metrics())
        fleet = Fleet()  # served alone
        fleet.add(cluster.name, cluster)
        visibility = cluster_visibility(settings, fleet, Newcomers())
        graphql = GraphQLApp(
            admission=Admission(Persisted()), cluster=cluster, fleet=fleet, visibility=visibility
        )
        live = serve_graphql(stack, graphql)
        if live is not None:  # else discovery is off: the seed schema is what is served
            await live.wait_ready()
        return print_schema(graphql.engine.graphql_schema) + "\n"

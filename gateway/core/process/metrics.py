"""Prometheus metrics of one gateway: operations served, upstream calls, the watch hub.

One :class:`Metrics` per running gateway, in a registry of its own (so two gateways in one
process, as in the tests, never mix their counts); ``/metrics`` serves it in the text format.

* ``kube_gateway_operations_total{transport, operation, resource, outcome}`` and
  ``kube_gateway_operation_duration_seconds{transport, operation, resource}``: every
  operation of the operations table a caller ran (gRPC streams when they end); ``outcome``
  is ``ok`` or the error kind of the core's error tree (``NotFound``, ``Forbidden``...).
* ``kube_gateway_upstream_request_duration_seconds{verb, resource, code}``: each upstream
  request until its response headers (``code`` is the HTTP status, or ``error`` when none
  came back).
* ``kube_gateway_catalog_reloads_total{outcome}``: discovery reads of the catalog reload
  (``swapped``: a new catalog is served, ``unchanged``, ``failed``), and
  ``kube_gateway_served_resources``: resources (group, version, plural) the current catalog
  serves, read when scraped.
* the watch hub's state and counters, read when scraped: open subscriptions, upstream
  watches, events delivered, subscribers dropped for lag, relists, admission refusals and
  access denials.
* a gateway serving several clusters: the families above are totals over them, and
  ``kube_gateway_cluster_{subscriptions,upstream_watches,served_resources}{cluster}`` give
  each cluster's gauges (a collector per figure, never one per cluster).

Labels are bounded and never carry a token, a user name, a namespace or an object name.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Final, Literal, Protocol, TypeAlias

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.core import errors
from gateway.core.process import tracing

__all__ = ["UPSTREAM_SECONDS", "Metrics", "OperationTimer", "Transport", "outcome_of"]

#: The upstream time of the request being served, in seconds: a one-item list the request's
#: access record sets (:func:`gateway.requestid.serving`); every upstream request made while
#: it is served (:meth:`Metrics.upstream`) adds its duration, and the access line says it
#: (``upstream_ms``): the gateway's own share of a call's latency is its ``duration_ms``
#: less this, per call, where the histogram only has a mean of all calls.
UPSTREAM_SECONDS: ContextVar[list[float] | None] = ContextVar(
    "kube_gateway_upstream_seconds", default=None
)

Transport: TypeAlias = Literal["graphql", "grpc"]

#: Seconds: from a cached get (~1 ms) to a long list or a slow upstream.
BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def outcome_of(exc: BaseException | None) -> str:
    """``ok``, the core error's kind, ``Cancelled`` (the caller went away) or ``Internal``
    (a bounded set)."""
    if exc is None:
        return "ok"
    if isinstance(exc, errors.GatewayError):
        return type(exc).__name__
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return "Cancelled"
    return "Internal"


class HubCounts(Protocol):
    """What the watch hub reports at each scrape (:class:`gateway.core.watch.hub.HubStats`)."""

    subscribers: int
    upstream_watches: int
    events_delivered: int
    dropped_slow: int
    relists: int
    catch_ups: int
    refused: int
    denied: int


#: How often the event loop's lag is sampled, and the histogram's buckets (a stall over
#: 50 ms is one a caller notices).
LAG_INTERVAL: Final = 0.05
LAG_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


#: The watch hub's counters (name, help, attribute), summed over clusters.
_HUB_COUNTERS: Final = (
    ("watch_events_delivered", "Events taken by subscribers.", "events_delivered"),
    ("subscribers_dropped", "Subscribers ended for falling behind.", "dropped_slow"),
    ("relists", "Relists after an upstream watch expired (410).", "relists"),
    (
        "watch_catch_ups",
        "Subscribers that resumed from before a shared watch's history and caught up on "
        "a watch of their own.",
        "catch_ups",
    ),
    ("subscriptions_refused", "Subscriptions refused by a budget.", "refused"),
    ("subscriptions_denied", "Subscribers denied by an access review.", "denied"),
)


#: The single upstream's cluster name (``gateway.core.fleet.cluster.DEFAULT``, which imports the
#: adapter, which imports this module).
DEFAULT: Final = "default"


class _ClustersCollector(Collector):
    """The per-cluster figures read at each scrape: the watch hubs' and the catalogs'.

    The unlabelled families are the gateway's totals over every served cluster (a gateway
    of one cluster reads as it always did); the ``kube_gateway_cluster_*`` gauges carry a
    ``cluster`` label.  A removed cluster's counters stay in the totals (counters never go
    down), its gauges leave.
    """

    def __init__(self) -> None:
        self.hubs: dict[str, Callable[[], HubCounts]] = {}
        self.served: dict[str, Callable[[], int]] = {}
        self.retired: dict[str, int] = {attr: 0 for _, _, attr in _HUB_COUNTERS}

    def retire_hub(self, cluster: str) -> None:
        stats = self.hubs.pop(cluster, None)
        if stats is not None:
            last = stats()
            for attr in self.retired:
                self.retired[attr] += getattr(last, attr)

    def collect(self) -> Iterable[Metric]:
        hubs = {name: stats() for name, stats in list(self.hubs.items())}
        gauges = (
            ("subscriptions", "Open watch subscriptions (GraphQL and gRPC).", "subscribers"),
            ("upstream_watches", "Open upstream watches of the watch hub.", "upstream_watches"),
        )
        for name, doc, attr in gauges:
            total = sum(getattr(s, attr) for s in hubs.values())
            yield GaugeMetricFamily(f"kube_gateway_{name}", doc, value=total)
            yield _by_cluster(name, doc, {c: getattr(s, attr) for c, s in hubs.items()})
        for name, doc, attr in _HUB_COUNTERS:
            total = self.retired[attr] + sum(getattr(s, attr) for s in hubs.values())
            yield CounterMetricFamily(f"kube_gateway_{name}", doc, value=total)
        if self.served:
            counts = {name: count() for name, count in list(self.served.items())}
            doc = "Resources (group, version, plural) the current catalog serves."
            yield GaugeMetricFamily(
                "kube_gateway_served_resources", doc, value=sum(counts.values())
            )
            yield _by_cluster("served_resources", doc, counts)


def _by_cluster(name: str, doc: str, values: dict[str, int]) -> Metric:
    family = GaugeMetricFamily(
        f"kube_gateway_cluster_{name}", f"{doc} By cluster.", labels=("cluster",)
    )
    for cluster, value in values.items():
        family.add_metric((cluster,), value)
    return family


class _OperationChildren:
    """One operation's duration histogram and its counters by outcome (labelled children
    of :class:`Metrics`' families, made when first used)."""

    __slots__ = ("_counts", "_operations", "key", "seconds")

    def __init__(self, metrics: Metrics, key: tuple[str, str, str]) -> None:
        #: (transport, operation, resource)
        self.key = key
        self._operations = metrics.operations
        self.seconds = metrics.operation_seconds.labels(*key)
        self._counts: dict[str, Counter] = {}

    def count(self, outcome: str) -> None:
        counter = self._counts.get(outcome)
        if counter is None:
            counter = self._counts[outcome] = self._operations.labels(*self.key, outcome)
        counter.inc()


class OperationTimer:
    """:meth:`Metrics.operation`'s context manager: a class, not a generator (it is entered
    once per call served, and a stream holds it for its whole life).

    A block that hands its answer on to be completed later (a GraphQL list body handed on
    undecoded, projected by its field's completion) calls :meth:`later` last: the block's
    end then does not end the operation, and whoever completes the answer calls
    :meth:`end` once, with what the completion raised (a refusal found there, over the
    list's cap, is the operation's outcome, not ``ok``)."""

    __slots__ = ("_children", "_later", "_span", "_started")

    def __init__(self, children: _OperationChildren) -> None:
        self._children = children
        self._span: tracing.OperationSpan | None = None
        self._started = 0.0
        self._later = False

    def __enter__(self) -> None:
        self._started = time.perf_counter()
        self._span = tracing.start_operation(*self._children.key)

    def __exit__(self, kind: object, failure: BaseException | None, _: object) -> None:
        if failure is None and self._later:
            return
        self.end(failure)

    def later(self) -> OperationTimer:
        """The block ends without ending the operation: the caller ends it (:meth:`end`)."""
        self._later = True
        return self

    def end(self, failure: BaseException | None = None) -> None:
        """The operation is over (``failure``: what ended it; ``None``: it succeeded)."""
        children = self._children
        children.seconds.observe(time.perf_counter() - self._started)
        outcome = outcome_of(failure)
        children.count(outcome)
        if self._span is not None:
            self._span.end(outcome)


class Metrics:
    """The metrics of one gateway (see the module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.operations = Counter(
            "kube_gateway_operations",
            "Operations served, by transport, operation, resource and outcome.",
            ("transport", "operation", "resource", "outcome"),
            registry=self.registry,
        )
        self.operation_seconds = Histogram(
            "kube_gateway_operation_duration_seconds",
            "Time to serve an operation (a stream: its whole life).",
            ("transport", "operation", "resource"),
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.upstream_seconds = Histogram(
            "kube_gateway_upstream_request_duration_seconds",
            "Upstream requests until their response headers.",
            ("verb", "resource", "code"),
            buckets=BUCKETS,
            registry=self.registry,
        )

        self.loop_lag = Histogram(
            "kube_gateway_event_loop_lag_seconds",
            "How late the event loop ran a timer due now: the longest any caller waited "
            "behind work that held the loop (sampled every 50 ms).",
            buckets=LAG_BUCKETS,
            registry=self.registry,
        )
        self.catalog_reloads = Counter(
            "kube_gateway_catalog_reloads",
            "Discovery reads of the catalog reload, by outcome (swapped, unchanged, failed).",
            ("outcome",),
            registry=self.registry,
        )
        self.list_worker_lists = Counter(
            "kube_gateway_list_worker_lists",
            "Large lists sent to a list worker, by outcome: done (the worker answered), "
            "returned (given back: the gateway completed it), died (the worker ended).",
            ("outcome",),
            registry=self.registry,
        )
        self._clusters = _ClustersCollector()
        self._clusters_registered = False
        #: Each upstream series once looked up (``labels`` checks and converts its values
        #: and takes a lock on every call).
        self._upstream_series: dict[tuple[str, str, int | None], Histogram] = {}
        #: (transport, operation, resource) -> that operation's metric children, looked up
        #: once (``labels()`` validates, converts and locks on every call: ~1.4 us each).
        self._operation_children: dict[tuple[str, str, str], _OperationChildren] = {}

    def operation(self, transport: Transport, name: str, resource: str) -> OperationTimer:
        """Count and time the block as one operation ``name`` (``List``, ``PatchStatus``...)
        on ``resource`` (a registry key) served over ``transport`` (and trace it, when
        tracing is on: :mod:`gateway.core.process.tracing`)."""
        key = (transport, name, resource)
        children = self._operation_children.get(key)
        if children is None:
            children = self._operation_children[key] = _OperationChildren(self, key)
        return OperationTimer(children)

    async def watch_event_loop(self, interval: float = LAG_INTERVAL) -> None:
        """Sample the event loop's lag until cancelled (the lifespan's task)."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + interval
            await asyncio.sleep(interval)
            self.loop_lag.observe(max(0.0, loop.time() - due))

    def upstream(self, verb: str, resource: str, code: int | None, seconds: float) -> None:
        """One upstream request (``code`` ``None``: no response came back)."""
        series = self._upstream_series.get((verb, resource, code))
        if series is None:  # (a bounded set: verbs, the registry's resources, status codes)
            label = str(code) if code is not None else "error"
            series = self.upstream_seconds.labels(verb, resource, label)
            self._upstream_series[verb, resource, code] = series
        series.observe(seconds)
        spent = UPSTREAM_SECONDS.get()
        if spent is not None:
            spent[0] += seconds

    def list_worker(self, outcome: str) -> None:
        """One large list sent to a list worker: ``done``, ``returned`` or ``died``."""
        self.list_worker_lists.labels(outcome).inc()

    def catalog_reload(self, outcome: str) -> None:
        """One discovery read of the catalog reload: ``swapped``, ``unchanged`` or ``failed``."""
        self.catalog_reloads.labels(outcome).inc()

    def served_resources(
        self, count: Callable[[], int], cluster: str = DEFAULT
    ) -> Callable[[], None]:
        """Serve how many resources ``cluster``'s current catalog serves, ``count()`` at each
        scrape; returns what stops it (the cluster was removed)."""
        self._register_clusters()
        self._clusters.served[cluster] = count
        return lambda: self._clusters.served.pop(cluster, None) and None

    def watch_hub(
        self, stats: Callable[[], HubCounts], cluster: str = DEFAULT
    ) -> Callable[[], None]:
        """Serve ``cluster``'s watch hub state and counters, read at each scrape; returns
        what stops it (its counters stay in the totals)."""
        self._register_clusters()
        self._clusters.hubs[cluster] = stats
        return functools.partial(self._clusters.retire_hub, cluster)

    def _register_clusters(self) -> None:
        if not self._clusters_registered:
            self.registry.register(self._clusters)
            self._clusters_registered = True

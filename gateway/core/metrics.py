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

Labels are bounded and never carry a token, a user name, a namespace or an object name.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Final, Literal, Protocol, TypeAlias

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.core import errors, tracing

__all__ = ["Metrics", "Transport", "outcome_of"]

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
    """What the watch hub reports at each scrape (:class:`gateway.core.hub.HubStats`)."""

    subscribers: int
    upstream_watches: int
    events_delivered: int
    dropped_slow: int
    relists: int
    refused: int
    denied: int


#: How often the event loop's lag is sampled, and the histogram's buckets (a stall over
#: 50 ms is one a caller notices).
LAG_INTERVAL: Final = 0.05
LAG_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _HubCollector(Collector):
    def __init__(self, stats: Callable[[], HubCounts]) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        s = self._stats()
        gauges = (
            ("subscriptions", "Open watch subscriptions (GraphQL and gRPC).", s.subscribers),
            ("upstream_watches", "Open upstream watches of the watch hub.", s.upstream_watches),
        )
        for name, doc, value in gauges:
            yield GaugeMetricFamily(f"kube_gateway_{name}", doc, value=value)
        counters = (
            ("watch_events_delivered", "Events taken by subscribers.", s.events_delivered),
            ("subscribers_dropped", "Subscribers ended for falling behind.", s.dropped_slow),
            ("relists", "Relists after an upstream watch expired (410).", s.relists),
            ("subscriptions_refused", "Subscriptions refused by a budget.", s.refused),
            ("subscriptions_denied", "Subscribers denied by an access review.", s.denied),
        )
        for name, doc, value in counters:
            yield CounterMetricFamily(f"kube_gateway_{name}", doc, value=value)


class _ServedCollector(Collector):
    def __init__(self, count: Callable[[], int]) -> None:
        self._count = count

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "kube_gateway_served_resources",
            "Resources (group, version, plural) the current catalog serves.",
            value=self._count(),
        )


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

    @contextlib.contextmanager
    def operation(self, transport: Transport, name: str, resource: str) -> Iterator[None]:
        """Count and time the block as one operation ``name`` (``List``, ``PatchStatus``...)
        on ``resource`` (a registry key) served over ``transport`` (and trace it, when
        tracing is on: :mod:`gateway.core.tracing`)."""
        started = time.perf_counter()
        span = tracing.start_operation(transport, name, resource)
        failure: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            failure = exc
            raise
        finally:
            self.operation_seconds.labels(transport, name, resource).observe(
                time.perf_counter() - started
            )
            outcome = outcome_of(failure)
            self.operations.labels(transport, name, resource, outcome).inc()
            if span is not None:
                span.end(outcome)

    async def watch_event_loop(self, interval: float = LAG_INTERVAL) -> None:
        """Sample the event loop's lag until cancelled (the lifespan's task)."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + interval
            await asyncio.sleep(interval)
            self.loop_lag.observe(max(0.0, loop.time() - due))

    def upstream(self, verb: str, resource: str, code: int | None, seconds: float) -> None:
        """One upstream request (``code`` ``None``: no response came back)."""
        label = str(code) if code is not None else "error"
        self.upstream_seconds.labels(verb, resource, label).observe(seconds)

    def catalog_reload(self, outcome: str) -> None:
        """One discovery read of the catalog reload: ``swapped``, ``unchanged`` or ``failed``."""
        self.catalog_reloads.labels(outcome).inc()

    def served_resources(self, count: Callable[[], int]) -> None:
        """Serve how many resources the current catalog serves, ``count()`` at each scrape."""
        self.registry.register(_ServedCollector(count))

    def watch_hub(self, stats: Callable[[], HubCounts]) -> None:
        """Serve the watch hub's state and counters, read at each scrape."""
        self.registry.register(_HubCollector(stats))

"""Optional OpenTelemetry tracing: a span per operation and per upstream request.

Tracing is on only when the ``otel`` extra is installed (``pip install
'kube-gateway[otel]'``) and the standard variables ask for it: ``OTEL_TRACES_EXPORTER``,
``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, and
neither ``OTEL_SDK_DISABLED=true`` nor ``OTEL_TRACES_EXPORTER=none`` says no.  Otherwise
nothing of OpenTelemetry is imported and each hook below costs one test of a module global.

When on (:func:`setup_from_env`, called by the application lifespan, which flushes and
shuts it down with :func:`shutdown`):

* the exporter is OTLP over HTTP/protobuf (``otlp``, configured by the exporter's own
  ``OTEL_EXPORTER_OTLP_*`` variables) and/or ``console``; spans leave through a batch
  processor (``OTEL_BSP_*``); the sampler is ``OTEL_TRACES_SAMPLER`` (default: parent-based,
  always on); the resource comes from ``OTEL_RESOURCE_ATTRIBUTES``, with
  ``service.name`` from ``OTEL_SERVICE_NAME``, else ``kube-gateway``.
* every operation of the operations table a caller runs, over GraphQL or gRPC, is one
  ``SERVER`` span named ``"<transport> <Operation> <resource>"`` (``graphql List pods``)
  with the attributes ``kube_gateway.transport``, ``kube_gateway.operation``,
  ``kube_gateway.resource`` (the registry key) and ``kube_gateway.outcome`` (as in the
  metrics: ``ok`` or the error's kind); its status is an error only for the gateway's or the
  upstream's faults (``Internal``, ``Unavailable``, ``ServiceUnavailable``, ``Timeout``).
  Its parent is the caller's W3C ``traceparent`` (HTTP header, WebSocket handshake header,
  gRPC metadata) when one came with the request.
* every upstream request is one ``CLIENT`` span, a child of the operation's span (a root
  span for the watch hub's own requests made outside any operation), named
  ``"<verb> <resource>"`` (``list pods``) with ``http.request.method``,
  ``kube_gateway.verb``, ``kube_gateway.resource`` and ``http.response.status_code``, and
  the request carries a ``traceparent`` naming it, so the API server's own traces (when it
  traces) join the caller's.  A stream's span (a watch, a log follow) ends with its
  response headers, like its latency metric.

No span carries a token, a user name, a namespace, an object name, a URL or GraphQL
variables.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping, MutableMapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator


__all__ = [
    "CALLER_TRACEPARENT",
    "OperationSpan",
    "UpstreamSpan",
    "configure",
    "enabled",
    "requested",
    "setup_from_env",
    "shutdown",
    "start_operation",
    "upstream",
]

log = logging.getLogger(__name__)

SERVICE_NAME: Final = "kube-gateway"
_ASKING: Final = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)
#: Outcomes that are the gateway's or the upstream's fault, not the caller's.
_FAULTS: Final = frozenset({"Internal", "Unavailable", "ServiceUnavailable", "Timeout"})


@dataclass(slots=True)
class _Tracing:
    provider: TracerProvider
    tracer: Tracer
    propagator: TraceContextTextMapPropagator


class _Switch:
    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state: _Tracing | None = None


#: The process's tracing (``state`` is ``None`` when off).
_ON: Final = _Switch()
#: The operation span being served (the parent of its upstream requests' spans).
_CURRENT: ContextVar[Span | None] = ContextVar("kube_gateway_span", default=None)
#: The W3C ``traceparent`` the caller sent with the request being served, the parent of its
#: operations' spans.  The front ends' request context (:mod:`gateway.requestid`) sets it
#: for each request it serves; it lives here so that the core reads it without importing
#: anything above the core.
CALLER_TRACEPARENT: ContextVar[str | None] = ContextVar("kube_gateway_traceparent", default=None)


def requested(environ: Mapping[str, str] = os.environ) -> bool:
    """Do the ``OTEL_*`` variables ask for traces?"""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in _ASKING)


def enabled() -> bool:
    """Is tracing on in this process?"""
    return _ON.state is not None


def setup_from_env(environ: Mapping[str, str] = os.environ) -> bool:
    """Turn tracing on when the environment asks for it and the ``otel`` extra is there.

    Returns whether this call turned it on (the caller then owns :func:`shutdown`); ``False``
    when not asked, not installed (logged) or already on.
    """
    if _ON.state is not None or not requested(environ):
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
    except ImportError:
        log.warning(
            "tracing: OTEL_* variables ask for traces but the otel extra is not installed "
            "(pip install 'kube-gateway[otel]'); not tracing"
        )
        return False
    protocol = environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    ).strip()
    if protocol not in ("", "http/protobuf"):
        log.warning("tracing: OTLP protocol %r is not supported; using http/protobuf", protocol)
    exporters: list[SpanExporter] = []
    for given in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(","):
        name = given.strip().lower()
        if name == "otlp":
            exporters.append(OTLPSpanExporter())
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name:
            log.warning("tracing: unknown OTEL_TRACES_EXPORTER %r ignored", name)
    if not exporters:
        return False
    configure(*exporters, environ=environ)
    log.info(
        "tracing: on (%s exporter)",
        ", ".join(type(e).__name__ for e in exporters),
    )
    return True


def configure(
    *exporters: SpanExporter, batch: bool = True, environ: Mapping[str, str] = os.environ
) -> None:
    """Turn tracing on with ``exporters`` (replacing any earlier setup, which is shut down).

    ``batch``: spans leave through a batch processor (else one by one, as they end: what a
    test with an in-memory exporter wants).
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    shutdown()
    resource = Resource.create()  # OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
    if not environ.get("OTEL_SERVICE_NAME") and str(
        resource.attributes.get("service.name", "")
    ).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        provider.add_span_processor(processor)
    _ON.state = _Tracing(
        provider, provider.get_tracer("kube-gateway"), TraceContextTextMapPropagator()
    )


def shutdown() -> None:
    """Flush the spans not yet exported and turn tracing off (nothing when it is off)."""
    state, _ON.state = _ON.state, None
    if state is not None:
        state.provider.shutdown()


def _reset(token: Token[Span | None]) -> None:
    # An async generator closed from another context (a finaliser) cannot reset it.
    with contextlib.suppress(ValueError):
        _CURRENT.reset(token)


class OperationSpan:
    """The ``SERVER`` span of one operation; current until :meth:`end`."""

    __slots__ = ("_span", "_token")

    def __init__(self, state: _Tracing, transport: str, name: str, resource: str) -> None:
        from opentelemetry.trace import SpanKind

        parent: Any = None
        traceparent = CALLER_TRACEPARENT.get()
        if traceparent:
            parent = state.propagator.extract({"traceparent": traceparent})
        self._span = state.tracer.start_span(
            f"{transport} {name} {resource}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "kube_gateway.transport": transport,
                "kube_gateway.operation": name,
                "kube_gateway.resource": resource,
            },
        )
        self._token = _CURRENT.set(self._span)

    def end(self, outcome: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        _reset(self._token)
        self._span.set_attribute("kube_gateway.outcome", outcome)
        if outcome in _FAULTS:
            self._span.set_status(Status(StatusCode.ERROR, outcome))
        self._span.end()


def start_operation(transport: str, name: str, resource: str) -> OperationSpan | None:
    """Start the span of one operation ``name`` on ``resource`` (a registry key), ``None``
    when tracing is off; end it with :meth:`OperationSpan.end` in the context that
    started it."""
    state = _ON.state
    return OperationSpan(state, transport, name, resource) if state is not None else None


class UpstreamSpan:
    """``with upstream(...) as span``: the ``CLIENT`` span of one upstream request."""

    __slots__ = ("_code", "_method", "_resource", "_span", "_state", "_verb")

    def __init__(self, state: _Tracing | None, method: str, verb: str, resource: str) -> None:
        self._state = state
        self._span: Span | None = None
        self._method, self._verb, self._resource = method, verb, resource
        self._code: int | None = None

    def __enter__(self) -> UpstreamSpan:
        state = self._state
        if state is not None:
            from opentelemetry.trace import SpanKind, set_span_in_context

            parent = _CURRENT.get()
            self._span = state.tracer.start_span(
                f"{self._verb} {self._resource}",
                context=set_span_in_context(parent) if parent is not None else None,
                kind=SpanKind.CLIENT,
                attributes={
                    "http.request.method": self._method,
                    "kube_gateway.verb": self._verb,
                    "kube_gateway.resource": self._resource,
                },
            )
        return self

    def inject(self, headers: MutableMapping[str, str]) -> None:
        """Put this span's ``traceparent`` into a request's ``headers``."""
        if self._state is not None and self._span is not None:
            from opentelemetry.trace import set_span_in_context

            self._state.propagator.inject(headers, context=set_span_in_context(self._span))

    def answered(self, code: int) -> None:
        """The upstream answered with status ``code``."""
        if self._span is not None:
            self._code = code

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        span = self._span
        if span is None:
            return
        from opentelemetry.trace import Status, StatusCode

        code = self._code
        if code is not None:
            span.set_attribute("http.response.status_code", code)
        if exc is not None:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        elif code is None or code >= 400:
            span.set_status(Status(StatusCode.ERROR, str(code)))
        span.end()


_OFF: Final = UpstreamSpan(None, "", "", "")


def upstream(method: str, verb: str, resource: str) -> UpstreamSpan:
    """The span of one upstream request (a shared inert one when tracing is off)."""
    state = _ON.state
    return UpstreamSpan(state, method, verb, resource) if state is not None else _OFF

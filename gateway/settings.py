"""Settings: read once into a frozen record (flags, then ``KUBE_GATEWAY_*`` env vars)."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from gateway.core import DEFAULT as DEFAULT_CLUSTER
from gateway.core import ConfigError

ENV_PREFIX = "KUBE_GATEWAY_"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything ``kube-gateway serve`` is configured with.

    Every field has a flag (``--http-port``) and an env var (``KUBE_GATEWAY_HTTP_PORT``);
    a flag wins over the env var, which wins over the default.
    """

    host: str = "0.0.0.0"
    http_port: int = 8080
    grpc_port: int = 50051
    demo: bool = False
    server: str | None = None
    token_file: str | None = None
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    insecure_skip_tls_verify: bool = False
    allow_insecure_upstream: bool = False
    kubeconfig: str | None = None
    context: str | None = None
    cluster: tuple[str, ...] = ()
    clusters_dir: str | None = None
    demo_clusters: int = 1
    gateway_identity: bool = False
    identity: str = "forward"
    home_cluster: str = DEFAULT_CLUSTER
    token_recheck_seconds: float = 30.0
    token_review_audiences: str | None = None
    impersonate_system_groups: str = "system:authenticated"
    impersonate_system_users: bool = False
    cluster_visibility: str = "authenticated"
    shared_identity_clusters: str | None = None
    max_new_caller_reviews: int = 20
    upstream_http2: bool = False
    upstream_network: str = "lean"
    upstream_max_connections: int = 512
    upstream_max_streams: int = 256
    upstream_max_streams_per_identity: int = 32
    max_requests_per_identity: int = 64
    max_list_items: int = 10_000
    list_workers: str = "auto"
    max_subscriptions: int = 10_000
    max_subscriptions_per_identity: int = 1_000
    watch_linger_seconds: float = 10.0
    watch_max_queue: int = 1024
    shared_watches: bool = False
    access_recheck_seconds: float = 30.0
    view_idle_seconds: float = 300.0
    view_memory_bytes: int = 1024 * 1024 * 1024
    live_view_interval_ms: int = 250
    discovery: bool = True
    resources: str | None = None
    discovery_token_file: str | None = None
    group_schema_idle_seconds: float = 300.0
    grpc_max_message_bytes: int = 64 * 1024 * 1024
    grpc_max_request_bytes: int = 4 * 1024 * 1024
    grpc_max_concurrent_rpcs: int = 4096
    grpc_gzip: bool = True
    grpc_keepalive_seconds: float = 30.0
    grpc_keepalive_timeout_seconds: float = 10.0
    grpc_min_client_ping_seconds: float = 10.0
    grpc_anonymous_streams_per_peer: int = 16
    grpc_anonymous_streams: int = 256
    allowed_origins: str | None = None
    allowed_hosts: str | None = None
    trusted_documents: str | None = None
    persisted_queries: bool = True
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    grpc_client_ca_file: str | None = None
    tls_reload_seconds: float = 10.0
    drain_seconds: float = 25.0
    http_header_timeout_seconds: float = 10.0
    http_idle_timeout_seconds: float = 5.0
    http_max_connections: str = "auto"
    ws_compression: bool = True
    metrics_access: str = "rbac"
    log_level: str = "info"
    log_format: str = "auto"

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"Settings({shown})"


_HELP: dict[str, str] = {
    "host": "address both servers listen on",
    "http_port": "HTTP port: GraphQL at /graphql, /healthz, /readyz, /metrics",
    "grpc_port": "gRPC port (typed services, reflection, health)",
    "demo": "serve the demo upstream (live sample data; the kube-gateway-demo package) "
    "instead of a cluster; chosen automatically when no kubeconfig or in-cluster config "
    "is found",
    "server": "upstream API server URL (overrides in-cluster config and kubeconfig)",
    "token_file": "file with the gateway's own bearer token (used only with --gateway-identity)",
    "ca_file": "CA bundle that signs the upstream's serving certificate",
    "client_cert": "the gateway's client certificate (used only with --gateway-identity)",
    "client_key": "key of --client-cert",
    "insecure_skip_tls_verify": "do not verify the upstream's certificate (never in production)",
    "allow_insecure_upstream": "accept a kubeconfig's insecure-skip-tls-verify and plain http:// "
    "servers other than loopback (refused by default: callers' tokens would travel "
    "unprotected)",
    "kubeconfig": "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)",
    "context": "kubeconfig context (default: the current context)",
    "cluster": "serve another cluster as NAME at /clusters/NAME/graphql (and gRPC metadata "
    "x-kube-cluster: NAME), reached through the kubeconfig file KUBECONFIG (its CONTEXT, "
    "else its current one); repeatable, the env var takes a comma-separated list; the "
    "upstream above stays the cluster 'default'",
    "clusters_dir": "serve one cluster per kubeconfig file in DIR (file name = cluster "
    "name, e.g. a mounted Secret; dotfiles ignored), followed live: a file added, changed "
    "or removed adds, rebuilds or removes its cluster without a restart",
    "demo_clusters": "with the demo upstream: serve N demo clusters, 'default' and "
    "demo-2..demo-N, each with a namespace named after it",
    "gateway_identity": "call the upstream with the gateway's own credential when a caller "
    "sends none (loudly logged; RBAC then sees the gateway, not the caller)",
    "identity": "how callers reach each cluster: 'forward' sends the caller's bearer token "
    "to it; 'impersonate' authenticates the token once (a TokenReview on --home-cluster) "
    "and calls each cluster with that cluster's own kubeconfig user plus Impersonate-User/"
    "-Group/-Uid/-Extra headers, the caller's token sent to no cluster (see docs/identity.md)",
    "home_cluster": "with --identity impersonate: the cluster whose TokenReview says who a "
    "caller's token is (the gateway's identity there needs create on tokenreviews)",
    "token_recheck_seconds": "with --identity impersonate: how often the token of a caller's "
    "running subscriptions and followed logs is reviewed again (and the longest a review is "
    "kept); they end UNAUTHENTICATED once it is refused, and at its JWT exp",
    "token_review_audiences": "with --identity impersonate: comma-separated audiences the "
    "home cluster's TokenReview asks for (spec.audiences; a token counts only when it is for "
    "one of them); unset: none asked, the apiserver's own",
    "impersonate_system_groups": "with --identity impersonate: comma-separated system: groups "
    "carried to clusters other than the home cluster (* for all); the others are dropped",
    "impersonate_system_users": "with --identity impersonate: carry users named system:... "
    "(service accounts, nodes, components) to clusters other than the home cluster; by "
    "default only the home cluster serves them",
    "cluster_visibility": "which clusters a caller is shown (ListClusters, the clusters "
    "query, NOT_FOUND messages, a fleet call's default set): 'authenticated' shows those "
    "whose SelfSubjectReview authenticates the caller (kept 60 s, a no 10 s; none sent with "
    "one cluster), 'all' shows every cluster to everyone (see docs/fleet.md)",
    "shared_identity_clusters": "comma-separated names of the clusters that share the "
    "default cluster's identity provider (or * for every cluster): in forward mode a "
    "caller's token goes unasked (visibility reviews, a fleet call's default set) only to "
    "these, the default cluster and the demo clusters; any other cluster gets it only when "
    "the caller names it (see docs/identity.md)",
    "max_new_caller_reviews": "reviews per second, for everyone together, of callers the "
    "gateway does not know yet (the SelfSubjectReviews that decide which clusters a caller "
    "sees, the access reviews that admit a caller to a view, a shared watch or /metrics, "
    "impersonate mode's TokenReviews): past it, and past a burst of five seconds' worth, "
    "such a caller is refused with RESOURCE_EXHAUSTED; a caller a review authenticated in "
    "the last hour passes free",
    "upstream_http2": "speak HTTP/2 to the upstream (one multiplexed connection); off by "
    "default because the apiserver closes a shared HTTP/2 connection after any caller's "
    "rejected token, and requests queue silently past its 100 streams per connection",
    "upstream_network": "how the upstream client speaks HTTP: 'lean' (the default: the "
    "gateway's own HTTP/1.1 transport on the event loop's transports and TLS, answers parsed "
    "by httptools; with --upstream-http2 the 'asyncio' path), 'asyncio' (httpx's httpcore "
    "pool on the event loop's transports) or 'anyio' (httpcore's default anyio streams, "
    "several times the CPU per request); the last two are kept as fallbacks",
    "upstream_max_connections": "size of the upstream connection pool for requests (gets, "
    "lists, writes); streams have a pool of their own",
    "upstream_max_streams": "upstream watches and log follows open at once, for everyone "
    "(each holds a connection of the stream pool over HTTP/1.1); past it a new stream is "
    "refused at once with RESOURCE_EXHAUSTED",
    "upstream_max_streams_per_identity": "upstream watches and log follows one identity "
    "may hold at once (subscribers of the same watch share one)",
    "max_list_items": "objects one list without `limit` may return; more are refused with "
    "a clear error pointing to limit/continue (never buffered whole)",
    "list_workers": "processes that decode and project large list answers (1 MiB or more) "
    "for GraphQL, so lists of several clusters, or several callers, run on several cores "
    "and never hold the gateway's own: a number, 0 for none, or auto (the CPUs the process "
    "may use, its cgroup's CPU quota counted, at most 4); started on the first large list",
    "max_requests_per_identity": "upstream requests one identity may have in flight at once "
    "(more are refused at once with RESOURCE_EXHAUSTED)",
    "max_subscriptions": "subscriptions (GraphQL and gRPC Watch) open at once, for everyone",
    "max_subscriptions_per_identity": "subscriptions one identity may hold open at once",
    "watch_linger_seconds": "how long a shared upstream watch stays open after its last "
    "subscriber left (a returning subscriber rejoins it without a new list)",
    "watch_max_queue": "live watch events one subscriber (a GraphQL subscription or a gRPC "
    "Watch) may fall behind its shared upstream watch before it is ended with an error "
    "naming the version to resume from",
    "shared_watches": "share each upstream watch across identities: it is made with the "
    "gateway's own credential (which needs list and watch on the served resources) and each "
    "subscriber is admitted by access reviews made with its own token",
    "access_recheck_seconds": "with --shared-watches: how often every subscriber's access is "
    "reviewed again (a subscriber whose right is gone is ended with FORBIDDEN); in every "
    "mode, how long (at most 30 s) a view reuses the access review of its caller",
    "view_idle_seconds": "how long a view cache (the objects of one list for one identity, "
    "kept by a shared upstream watch) stays after the last view used it",
    "view_memory_bytes": "bytes of objects (as JSON) all view caches may hold together; a "
    "view past it is refused with RESOURCE_EXHAUSTED",
    "live_view_interval_ms": "the least time between two updates of a live view (changes "
    "within it are coalesced into one evaluation); a subscription may ask for its own "
    "(`interval`, 50 to 10000 ms)",
    "discovery": "read the cluster's discovery and OpenAPI v3 with the gateway's own "
    "credential (--discovery-token-file, else --token-file, the kubeconfig's user or the "
    "service account) and serve what it lists beside the five built-in resources, reloaded "
    "when CRDs or APIServices change (--no-discovery: the built-in resources only)",
    "resources": "which discovered resources to serve: comma-separated "
    "[-][GROUP/][VERSION/]RESOURCE globs, '-' denies and a deny wins, 'core' is the core "
    "group (e.g. 'apps/*,*.example.com/*,-secrets,-*/v1beta1/*'); default: every served "
    "resource (each call still carries the caller's token, so RBAC decides, secrets too)",
    "discovery_token_file": "file with the bearer token discovery and the CRD/APIService "
    "watches use (default: the gateway's own credential, if one is configured)",
    "group_schema_idle_seconds": "an API group's GraphQL schema (/apis/GROUP/graphql, "
    "built on first use) that no request, connection or subscription has used for this "
    "long is given back (built again on its next use); at most 16 unused ones are kept "
    "whatever this says",
    "grpc_max_request_bytes": "largest gRPC request message in bytes (larger ones are "
    "refused with RESOURCE_EXHAUSTED)",
    "grpc_max_concurrent_rpcs": "gRPC calls served at once, Watch streams included (more "
    "are refused at once with RESOURCE_EXHAUSTED)",
    "grpc_max_message_bytes": "largest gRPC response message in bytes (a list "
    "of 5,000 pods is about 20 MB; callers page with limit beyond this)",
    "grpc_gzip": "gzip gRPC responses for clients that accept it (--no-grpc-gzip: never)",
    "grpc_keepalive_seconds": "ping an idle gRPC connection this often (keeps long watches "
    "alive through idle proxies, finds dead peers)",
    "grpc_keepalive_timeout_seconds": "drop a gRPC connection whose ping is not answered "
    "within this time",
    "grpc_min_client_ping_seconds": "the most often a gRPC client may ping without data "
    "(more often: the connection is closed with too_many_pings)",
    "grpc_anonymous_streams_per_peer": "gRPC streams without authorization metadata (and "
    "every health Watch and reflection stream) one peer address may hold open (more: "
    "RESOURCE_EXHAUSTED at once)",
    "grpc_anonymous_streams": "gRPC streams without authorization metadata (and every "
    "health Watch and reflection stream) all peers may hold open together; at most half "
    "of --grpc-max-concurrent-rpcs whatever this says (more: RESOURCE_EXHAUSTED at once)",
    "allowed_origins": "comma-separated origins (https://app.example.com, or *) whose "
    "browser pages may call the gateway: CORS and WebSocket upgrades; the gateway's own "
    "pages (GraphiQL) always may, other sites may not by default",
    "allowed_hosts": "comma-separated host names (api.example.com, *.example.com, or *) "
    "the gateway answers in the Host header, besides IP addresses and localhost; default: "
    "any, except with --gateway-identity, where a name must be listed (a DNS-rebinding "
    "page must not be served as the gateway's identity)",
    "trusted_documents": "serve only the GraphQL documents of this manifest, by id or by "
    "text (graphql-codegen's persisted-documents.json, Relay's persisted_queries.json or "
    "Apollo's persisted query manifest); other documents are refused before they are "
    "parsed; reloaded when the file changes or on SIGHUP",
    "persisted_queries": "Automatic Persisted Queries (Apollo's protocol: a document sent "
    "once with its SHA-256, then by hash alone, GET included) when no --trusted-documents "
    "is given (--no-persisted-queries: off)",
    "tls_cert_file": "certificate (PEM, chain first) both listeners serve TLS with; "
    "reloaded when the file changes",
    "tls_key_file": "private key of --tls-cert-file",
    "grpc_client_ca_file": "CA whose client certificates gRPC callers must present "
    "(mutual TLS; needs --tls-cert-file)",
    "tls_reload_seconds": "how often the TLS files are checked for a renewed certificate",
    "drain_seconds": "on SIGTERM/SIGINT: how long calls in flight may take to finish "
    "while the gateway drains (readiness false, new work refused, every subscription "
    "ended with its resume point), then it exits; keep it below the pod's "
    "terminationGracePeriodSeconds",
    "http_header_timeout_seconds": "time an HTTP client has from the first byte of a "
    "request to the end of its headers; past it the connection is answered 408 and closed "
    "(slow-loris clients)",
    "http_idle_timeout_seconds": "an HTTP connection with no request in progress (newly "
    "accepted, or between two requests) that sends nothing for this long is closed; "
    "streams (SSE, multipart) and WebSockets are not idle",
    "http_max_connections": "HTTP and WebSocket connections open at once; one more is "
    "answered 503 with Retry-After and closed at once (open ones are served as before): a "
    "number, or auto (half the process's open-file limit, RLIMIT_NOFILE, at most 16384)",
    "ws_compression": "accept WebSocket per-message compression (permessage-deflate) when a "
    "client offers it, as browsers do; it costs the gateway CPU per frame and connection "
    "(--no-ws-compression: never)",
    "metrics_access": "who may read /metrics: 'rbac' serves it to callers whose bearer "
    "token the default cluster allows get on the non-resource URL /metrics (Prometheus' "
    "usual RBAC), 'anyone' to every caller (its metrics name every cluster and served "
    "resource)",
    "log_level": "debug, info, warning or error",
    "log_format": "auto (text on a terminal, else JSON lines), json or text",
}

#: Fields that must be greater than zero.
_POSITIVE = frozenset(
    {
        "upstream_max_connections",
        "upstream_max_streams",
        "upstream_max_streams_per_identity",
        "max_requests_per_identity",
        "max_list_items",
        "max_subscriptions",
        "max_subscriptions_per_identity",
        "watch_linger_seconds",
        "watch_max_queue",
        "access_recheck_seconds",
        "view_idle_seconds",
        "view_memory_bytes",
        "live_view_interval_ms",
        "token_recheck_seconds",
        "tls_reload_seconds",
        "drain_seconds",
        "http_header_timeout_seconds",
        "http_idle_timeout_seconds",
        "group_schema_idle_seconds",
        "demo_clusters",
        "max_new_caller_reviews",
        "grpc_max_message_bytes",
        "grpc_max_request_bytes",
        "grpc_max_concurrent_rpcs",
        "grpc_keepalive_seconds",
        "grpc_keepalive_timeout_seconds",
        "grpc_min_client_ping_seconds",
        "grpc_anonymous_streams_per_peer",
        "grpc_anonymous_streams",
    }
)
_NUMBERS: dict[str, type[int] | type[float]] = {"int": int, "float": float}
#: Repeatable flags: given once per value, or as one comma-separated env var.
_LIST = "tuple[str, ...]"
_LIST_METAVAR = {"cluster": "NAME=KUBECONFIG[#CONTEXT]"}

#: A cluster name: a DNS label (it is a URL path segment and a gRPC metadata value).
_CLUSTER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """One ``--cluster NAME=KUBECONFIG[#CONTEXT]``."""

    name: str
    kubeconfig: str
    context: str | None = None


def check_cluster_name(name: str, where: str) -> str:
    """``name`` when it can name a cluster, else a ConfigError saying why (``where`` says
    where it was read: a flag, a file)."""
    if name == DEFAULT_CLUSTER:
        raise ConfigError(
            f"{where}: the name {DEFAULT_CLUSTER!r} is the single upstream's (--server, "
            "--kubeconfig, in-cluster or the demo); choose another name"
        )
    if not _CLUSTER_NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: {name!r} is not a valid cluster name: lower-case letters, digits and "
            "'-', starting and ending with a letter or digit, at most 63 characters"
        )
    return name


def parse_cluster(text: str) -> ClusterSpec:
    """``NAME=KUBECONFIG[#CONTEXT]`` as a :class:`ClusterSpec`.

    Raises:
        ConfigError: not of that form, or an invalid name.
    """
    name, sep, rest = text.strip().partition("=")
    path, _, context = rest.partition("#")
    if not sep or not path:
        raise ConfigError(f"--cluster {text!r}: expected NAME=KUBECONFIG[#CONTEXT]")
    return ClusterSpec(check_cluster_name(name, f"--cluster {text!r}"), path, context or None)


def cluster_specs(settings: Settings) -> list[ClusterSpec]:
    """The ``--cluster`` flags, parsed (names unique).

    Raises:
        ConfigError: one is malformed, or two share a name.
    """
    specs: list[ClusterSpec] = []
    for text in settings.cluster:
        spec = parse_cluster(text)
        if any(s.name == spec.name for s in specs):
            raise ConfigError(f"--cluster {spec.name!r} is given twice")
        specs.append(spec)
    return specs


def shared_identity_names(text: str | None) -> tuple[str, ...]:
    """The names of ``--shared-identity-clusters`` (``*``: every cluster)."""
    return tuple(n.strip() for n in (text or "").split(",") if n.strip())


def _env_bool(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def parser_for(prog: str = "kube-gateway serve") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Serve GraphQL and gRPC in front of the Kubernetes API. Each flag can "
        f"also be set with an env var {ENV_PREFIX}<FLAG> (e.g. {ENV_PREFIX}HTTP_PORT).",
    )
    for f in fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        env = ENV_PREFIX + f.name.upper()
        help_text = f"{_HELP[f.name]} [env {env}; default {f.default!r}]"
        if f.type == "bool" and f.default is True:
            # on by default: --grpc-gzip / --no-grpc-gzip
            p.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        elif f.type == "bool":
            p.add_argument(flag, action="store_true", default=None, help=help_text)
        elif f.type == _LIST:
            p.add_argument(
                flag, action="append", default=None, metavar=_LIST_METAVAR[f.name], help=help_text
            )
        elif f.type in _NUMBERS:
            p.add_argument(
                flag,
                type=_NUMBERS[str(f.type)],
                default=None,
                metavar="SECONDS" if f.type == "float" else "N",
                help=help_text,
            )
        else:
            p.add_argument(flag, default=None, metavar=f.name.upper(), help=help_text)
    return p


def load(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> Settings:
    """Parse flags, then env vars, then defaults into :class:`Settings`."""
    args = parser_for().parse_args(list(argv))
    values: dict[str, Any] = {}
    for f in fields(Settings):
        flag_value = getattr(args, f.name)
        if flag_value is not None:
            values[f.name] = tuple(flag_value) if f.type == _LIST else flag_value
            continue
        raw = environ.get(ENV_PREFIX + f.name.upper())
        if raw is None or raw == "":
            continue
        if f.type == "bool":
            values[f.name] = _env_bool(raw)
        elif f.type == _LIST:
            values[f.name] = tuple(v.strip() for v in raw.split(",") if v.strip())
        elif f.type in _NUMBERS:
            try:
                values[f.name] = _NUMBERS[str(f.type)](raw)
            except ValueError:
                what = "an integer" if f.type == "int" else "a number"
                raise SystemExit(
                    f"{ENV_PREFIX}{f.name.upper()} must be {what}, got {raw!r}"
                ) from None
        else:
            values[f.name] = raw
    for name in _POSITIVE:
        value = values.get(name)
        if value is not None and not (math.isfinite(value) and value > 0):
            flag = "--" + name.replace("_", "-")
            raise SystemExit(
                f"{flag} ({ENV_PREFIX}{name.upper()}) must be greater than 0, got {value!r}"
            )
    log_format = values.get("log_format", "auto")
    if log_format not in ("auto", "json", "text"):
        raise SystemExit(
            f"--log-format ({ENV_PREFIX}LOG_FORMAT) must be auto, json or text, got {log_format!r}"
        )
    if values.get("resources"):
        from gateway.core import ResourcePatterns

        try:
            ResourcePatterns.parse(values["resources"])
        except ValueError as exc:
            raise SystemExit(f"{exc} ({ENV_PREFIX}RESOURCES)") from None
    workers = values.get("list_workers", "auto")
    if workers != "auto" and not (workers.isdigit() and int(workers) <= 64):
        raise SystemExit(
            f"--list-workers ({ENV_PREFIX}LIST_WORKERS) must be auto or a number from 0 to 64, "
            f"got {workers!r}"
        )
    cap = values.get("http_max_connections", "auto")
    if cap != "auto" and not (cap.isdigit() and int(cap) > 0):
        raise SystemExit(
            f"--http-max-connections ({ENV_PREFIX}HTTP_MAX_CONNECTIONS) must be auto or a "
            f"number greater than 0, got {cap!r}"
        )
    network = values.get("upstream_network", "lean")
    if network not in ("lean", "asyncio", "anyio"):
        raise SystemExit(
            f"--upstream-network ({ENV_PREFIX}UPSTREAM_NETWORK) must be lean, asyncio or anyio, "
            f"got {network!r}"
        )
    metrics_access = values.get("metrics_access", "rbac")
    if metrics_access not in ("rbac", "anyone"):
        raise SystemExit(
            f"--metrics-access ({ENV_PREFIX}METRICS_ACCESS) must be rbac or anyone, "
            f"got {metrics_access!r}"
        )
    identity = values.get("identity", "forward")
    if identity not in ("forward", "impersonate"):
        raise SystemExit(
            f"--identity ({ENV_PREFIX}IDENTITY) must be forward or impersonate, got {identity!r}"
        )
    if identity == "impersonate" and values.get("gateway_identity"):
        raise SystemExit(
            "--gateway-identity serves a caller without a token as the gateway; "
            "--identity impersonate never serves anyone as the gateway: choose one"
        )
    visibility = values.get("cluster_visibility", "authenticated")
    if visibility not in ("authenticated", "all"):
        raise SystemExit(
            f"--cluster-visibility ({ENV_PREFIX}CLUSTER_VISIBILITY) must be authenticated or "
            f"all, got {visibility!r}"
        )
    for name in shared_identity_names(values.get("shared_identity_clusters")):
        if name not in ("*", DEFAULT_CLUSTER) and not _CLUSTER_NAME.fullmatch(name):
            raise SystemExit(
                f"--shared-identity-clusters ({ENV_PREFIX}SHARED_IDENTITY_CLUSTERS): {name!r} "
                "is not a cluster name (or *)"
            )
    settings = Settings(**values)
    try:
        cluster_specs(settings)
    except ConfigError as exc:
        raise SystemExit(f"{exc} ({ENV_PREFIX}CLUSTER)") from None
    return settings

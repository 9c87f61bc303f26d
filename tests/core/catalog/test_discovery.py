"""Discovery into catalogs: the demo upstream's legacy discovery, and a scripted cluster
(a real HTTP server on loopback answering canned discovery, OpenAPI and failures, counting
every request) for aggregated discovery, OpenAPI hashes, failures and limits.

What needs a real apiserver (CRDs appearing and disappearing, its OpenAPI v3) is in
``tests/e2e/test_discovery_e2e.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import httpx
import orjson
import pytest
import uvicorn

from gateway.core.catalog import openapi_documents as documents
from gateway.core.catalog.catalog import SEED_CATALOG, Catalog, GroupVersion
from gateway.core.catalog.discovery import (
    AGGREGATED_ACCEPT,
    Discovery,
    DiscoveryFailed,
    DiscoveryLimits,
    ResourcePatterns,
    catalog_changed,
    parse_resource_list,
)
from gateway.core.errors import UnknownResource
from gateway.core.model.registry import LEASE, POD, REGISTRY
from gateway.settings import Settings, load
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import _Server, serve_app

# ---------------------------------------------------------------------------- patterns


@pytest.mark.parametrize(
    ("text", "allowed", "denied"),
    [
        ("", [("apps", "v1", "deployments"), ("", "v1", "secrets")], []),
        (
            "apps/*,*.example.com/*,-secrets,-*/v1beta1/*",
            [("apps", "v1", "deployments"), ("a.example.com", "v1", "widgets")],
            [
                ("", "v1", "configmaps"),  # not allowed by any entry
                ("apps", "v1beta1", "deployments"),  # denied by version
                ("a.example.com", "v1", "secrets"),  # denied by name, any group
                ("example.com", "v1", "widgets"),  # '*.example.com' needs a subdomain
            ],
        ),
        (
            "-secrets",
            [("", "v1", "configmaps"), ("apps", "v1", "deployments")],
            [("", "v1", "secrets")],
        ),
        (
            "core/v1/*, -core/*/nodes",
            [("", "v1", "configmaps")],
            [("", "v1", "nodes"), ("apps", "v1", "deployments")],
        ),
    ],
)
def test_resource_patterns_allow_deny_and_deny_wins(
    text: str, allowed: list[tuple[str, str, str]], denied: list[tuple[str, str, str]]
) -> None:
    patterns = ResourcePatterns.parse(text)
    for gvr in allowed:
        assert patterns.allows(*gvr), gvr
    for gvr in denied:
        assert not patterns.allows(*gvr), gvr


@pytest.mark.parametrize("text", ["a/b/c/d", "apps//x", "-", "/pods"])
def test_resource_patterns_refuse_malformed_entries(text: str) -> None:
    with pytest.raises(ValueError, match="RESOURCE"):
        ResourcePatterns.parse(text)


def test_legacy_resource_list_singular_subresources_and_connect_only() -> None:
    body = {
        "resources": [
            {"name": "pods", "singularName": "", "namespaced": True, "kind": "Pod",
             "verbs": ["get", "list", "watch", "create"], "shortNames": ["po"]},
            {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod",
             "verbs": ["get"]},
            {"name": "pods/exec", "singularName": "", "namespaced": True,
             "kind": "PodExecOptions", "verbs": ["create", "get"]},
            {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod",
             "verbs": ["get", "patch", "update"]},
            {"name": "bindings", "singularName": "", "namespaced": True, "kind": "Binding",
             "verbs": ["create"]},
            {"name": "tokenreviews", "singularName": "", "namespaced": False,
             "kind": "TokenReview", "verbs": ["proxy"]},
        ]
    }  # fmt: skip
    pods, bindings = parse_resource_list("", "v1", body)
    assert (pods.singular, pods.short_names, pods.namespaced) == ("pod", ("po",), True)
    assert pods.verbs == {"get", "list", "watch", "create"}
    assert set(pods.subresources) == {"log", "status"}
    assert pods.subresources["log"].content == "text"
    assert pods.subresources["status"].content == "json"
    assert pods.subresources["status"].verbs == {"get", "patch", "update"}
    assert (bindings.singular, bindings.verbs) == ("binding", {"create"})


# ------------------------------------------------------------------ the demo upstream


async def test_demo_upstream_discovery_keeps_the_seed_records() -> None:
    async with (
        DemoUpstream() as demo,
        httpx.AsyncClient(
            base_url=demo.url, headers={"Authorization": "Bearer admin-token"}
        ) as http,
    ):
        discovery = Discovery(http)
        catalog = await discovery.read(SEED_CATALOG)
    assert catalog.generation == 1
    assert ("", "v1", "pods") in discovery.seen
    # the curated records, not discovery's
    assert catalog.resource("", "v1", "pods") is POD
    assert catalog.resource("coordination.k8s.io", "v1", "leases") is LEASE
    assert any(r is POD for r in catalog.groups[("", "v1")].resources)
    # and the demo's other kinds beside them, as discovered
    assert catalog.resource("apps", "v1", "deployments").namespaced
    for resource in REGISTRY.values():
        assert catalog.is_seed(catalog.resource(*_gvr(resource)))


async def test_no_discovery_credential_means_the_seed_catalog(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with DemoUpstream() as demo:
        settings = Settings(
            host="127.0.0.1", http_port=0, grpc_port=0, server=demo.url, log_level="warning"
        )
        with caplog.at_level("WARNING", logger="gateway"):
            async with serve_app(settings) as (_url, app):
                assert app.state.runtime.cluster.catalog.current is SEED_CATALOG
    assert any("discovery off" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------- a scripted cluster


def _aggregated(
    group: str, versions: list[tuple[str, list[dict[str, Any]], str]]
) -> dict[str, Any]:
    return {
        "metadata": {"name": group},
        "versions": [
            {"version": v, "resources": resources, "freshness": freshness}
            for v, resources, freshness in versions
        ],
    }


def _res(
    plural: str,
    kind: str,
    *,
    scope: str = "Namespaced",
    verbs: tuple[str, ...] = ("get", "list", "watch", "create", "update", "patch", "delete"),
    subresources: tuple[tuple[str, tuple[str, ...]], ...] = (),
    short: tuple[str, ...] = (),
) -> dict[str, Any]:
    return {
        "resource": plural,
        "responseKind": {"group": "", "version": "", "kind": kind},
        "scope": scope,
        "singularResource": kind.lower(),
        "verbs": list(verbs),
        "shortNames": list(short),
        "subresources": [{"subresource": n, "verbs": list(v)} for n, v in subresources],
    }


@dataclass
class Cluster:
    """Answers GET with ``bodies[path]`` (or ``failures[path]``), counting requests by path."""

    bodies: dict[str, Any] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    requests: Counter[str] = field(default_factory=Counter)
    accepts: dict[str, str] = field(default_factory=dict)
    #: Paths answered 301 to another location (a stale OpenAPI hash, as the apiserver does).
    redirects: dict[str, str] = field(default_factory=dict)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"] + (
            f"?{scope['query_string'].decode()}" if scope["query_string"] else ""
        )
        self.requests[path] += 1
        self.accepts[path] = dict(scope["headers"]).get(b"accept", b"").decode()
        code = self.failures.get(path)
        if path in self.redirects:
            await send({"type": "http.response.start", "status": 301,
                        "headers": [(b"location", self.redirects[path].encode())]})  # fmt: skip
            await send({"type": "http.response.body", "body": b""})
            return
        if code is not None:
            body = orjson.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "message": "the server is currently unable to handle the request",
                                 "reason": "ServiceUnavailable", "code": code})  # fmt: skip
        elif path in self.bodies:
            raw = self.bodies[path]  # bytes: sent as they are (a body that is not JSON)
            code, body = 200, raw if isinstance(raw, bytes) else orjson.dumps(raw)
        else:
            code = 404
            body = orjson.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": "NotFound", "code": 404})  # fmt: skip
        await send({"type": "http.response.start", "status": code,
                    "headers": [(b"content-type", b"application/json")]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    def set_hash(self, key: str, digest: str, doc: dict[str, Any]) -> None:
        url = f"/openapi/v3/{key}?hash={digest}"
        index = self.bodies.setdefault("/openapi/v3", {"paths": {}})
        index["paths"][key] = {"serverRelativeURL": url}
        self.bodies[url] = doc


@contextlib.asynccontextmanager
async def serving(cluster: Cluster) -> AsyncIterator[httpx.AsyncClient]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = _Server(uvicorn.Config(cluster, log_config=None, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await server.ready.wait()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            yield http
    finally:
        server.should_exit = True
        await task
        sock.close()


def _gvr(r: Any) -> tuple[str, str, str]:
    return (r.group, r.version, r.plural)


def scripted() -> Cluster:
    cluster = Cluster()
    cluster.bodies["/api"] = {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "items": [
            _aggregated(
                "",
                [
                    (
                        "v1",
                        [
                            _res("pods", "Pod", subresources=(("exec", ("create", "get")),)),
                            _res("configmaps", "ConfigMap", short=("cm",)),
                            _res("secrets", "Secret"),
                            _res(
                                "nodes",
                                "Node",
                                scope="Cluster",
                                subresources=(
                                    ("status", ("get", "patch", "update")),
                                    ("proxy", ("get", "create")),
                                ),
                            ),
                        ],
                        "Current",
                    )
                ],
            )
        ],
    }
    cluster.bodies["/apis"] = {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "items": [
            _aggregated(
                "apps",
                [
                    (
                        "v1",
                        [
                            _res(
                                "deployments",
                                "Deployment",
                                short=("deploy",),
                                subresources=(("scale", ("get", "patch", "update")),),
                            )
                        ],
                        "Current",
                    )
                ],
            ),
            _aggregated(
                "stable.example.com",
                [
                    ("v2", [_res("widgets", "Widget", scope="Cluster")], "Current"),
                    ("v1", [_res("widgets", "Widget", scope="Cluster")], "Current"),
                ],
            ),
            _aggregated(
                "metrics.example.com", [("v1beta1", [_res("podmetrics", "PodMetrics")], "Current")]
            ),
            _aggregated("coordination.k8s.io", [("v1", [_res("leases", "Lease")], "Current")]),
        ],
    }
    for key in ("api/v1", "apis/apps/v1", "apis/stable.example.com/v2",
                "apis/stable.example.com/v1", "apis/metrics.example.com/v1beta1",
                "apis/coordination.k8s.io/v1"):  # fmt: skip
        cluster.set_hash(key, "H1", {"openapi": "3.0.0", "info": {"title": key}})
    return cluster


def _documents_read(cluster: Cluster) -> dict[str, int]:
    return {p: n for p, n in cluster.requests.items() if "?hash=" in p and n}


async def test_aggregated_discovery_scope_verbs_subresources_versions_and_seeds() -> None:
    cluster = scripted()
    async with serving(cluster) as http:
        discovery = Discovery(http)
        catalog = await discovery.read(SEED_CATALOG)
        assert sorted(cluster.requests) == ["/api", "/apis", "/openapi/v3"]  # no document
        loaded = await documents.load(catalog, [("apps", "v1"), ("coordination.k8s.io", "v1")])
    assert discovery.aggregated is True
    assert cluster.accepts["/apis"] == AGGREGATED_ACCEPT
    deployments = catalog.resource("apps", "v1", "deployments")
    assert (deployments.kind, deployments.namespaced, deployments.short_names) == (
        "Deployment", True, ("deploy",),
    )  # fmt: skip
    assert set(deployments.subresources) == {"scale"}
    assert "deletecollection" not in deployments.verbs
    nodes = catalog.resource("", "v1", "nodes")
    assert not nodes.namespaced
    assert set(nodes.subresources) == {"status"}  # proxy is connect-only
    # the seed record wins over discovery's pods (which list no log subresource)
    assert catalog.resource("", "v1", "pods") is POD
    assert catalog.resource("coordination.k8s.io", "v1", "leases") is LEASE
    # one resource per served version; the key and the kind name the preferred one
    v2 = catalog.resource("stable.example.com", "v2", "widgets")
    v1 = catalog.resource("stable.example.com", "v1", "widgets")
    assert v1 is not v2
    assert catalog.registry["widgets.stable.example.com"] is v2
    assert catalog.registry.lookup("Widget") is v2
    apps = catalog.groups[("apps", "v1")]
    # named by the index, not carried: the catalog's source reads it when asked
    assert (apps.openapi_hash, apps.openapi_url) == ("H1", "/openapi/v3/apis/apps/v1?hash=H1")
    assert apps.openapi is None
    assert catalog.documents is discovery.documents
    assert loaded == {("apps", "v1"): {"openapi": "3.0.0", "info": {"title": "apis/apps/v1"}}}
    # seed-only group/versions: served, no document named (the seeds have curated schemas)
    assert catalog.groups[("coordination.k8s.io", "v1")].openapi_hash == ""
    assert _documents_read(cluster) == {"/openapi/v3/apis/apps/v1?hash=H1": 1}


async def test_patterns_filter_discovered_resources_but_never_the_seeds() -> None:
    cluster = scripted()
    async with serving(cluster) as http:
        discovery = Discovery(
            http, patterns=ResourcePatterns.parse("apps/*,*.example.com/*,-*/v1beta1/*,-secrets")
        )
        catalog = await discovery.read(SEED_CATALOG)
    served = {_gvr(r) for r in catalog.registry.records}
    assert ("apps", "v1", "deployments") in served
    assert ("stable.example.com", "v1", "widgets") in served
    assert ("metrics.example.com", "v1beta1", "podmetrics") not in served
    assert ("", "v1", "configmaps") not in served
    assert ("", "v1", "secrets") not in served
    assert {_gvr(r) for r in REGISTRY.values()} <= served
    with pytest.raises(UnknownResource):
        catalog.resource("metrics.example.com", "v1beta1", "podmetrics")
    # documents named only for group/versions with an allowed discovered resource
    assert ("metrics.example.com", "v1beta1") not in catalog.groups
    assert catalog.groups[("", "v1")].openapi_hash == ""  # only the seed pods there now
    assert catalog.groups[("apps", "v1")].openapi_hash == "H1"
    assert _documents_read(cluster) == {}
    assert ("", "v1", "secrets") in discovery.seen  # seen, just not served


async def test_reads_name_documents_and_each_hash_is_read_once_when_loaded() -> None:
    cluster = scripted()
    everything = [("", "v1"), ("apps", "v1"), ("stable.example.com", "v2"),
                  ("stable.example.com", "v1"), ("metrics.example.com", "v1beta1")]  # fmt: skip
    async with serving(cluster) as http:
        discovery = Discovery(http)
        first = await discovery.read(SEED_CATALOG)
        assert _documents_read(cluster) == {}
        docs = await documents.load(first, everything)
        assert set(docs) == set(everything)
        assert len(_documents_read(cluster)) == 5
        assert set(_documents_read(cluster).values()) == {1}
        cluster.requests.clear()
        second = await discovery.read(first)
        assert sorted(cluster.requests) == ["/api", "/apis", "/openapi/v3"]
        assert not catalog_changed(first, second)
        again = await documents.load(second, everything)
        assert _documents_read(cluster) == {}  # unchanged hashes: the cached documents
        assert again[("apps", "v1")] is docs[("apps", "v1")]
        cluster.requests.clear()
        cluster.set_hash("apis/apps/v1", "H2", {"openapi": "3.0.0", "info": {"title": "new"}})
        third = await discovery.read(second)
        assert sorted(cluster.requests) == ["/api", "/apis", "/openapi/v3"]
        assert catalog_changed(second, third)
        assert third.generation == 3
        assert third.groups[("apps", "v1")].openapi_hash == "H2"
        new = await documents.load(third, everything)
    assert _documents_read(cluster) == {"/openapi/v3/apis/apps/v1?hash=H2": 1}
    assert new[("apps", "v1")] == {"openapi": "3.0.0", "info": {"title": "new"}}
    assert new[("", "v1")] is docs[("", "v1")]
    # the old hash's document is dropped, not kept beside the new one
    assert len(discovery.documents) == 5


async def test_one_broken_group_version_keeps_its_previous_entry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = scripted()
    async with serving(cluster) as http:
        discovery = Discovery(http)
        first = await discovery.read(SEED_CATALOG)
        # an aggregated APIService gone bad: Stale in aggregated discovery, its document 503
        metrics = cluster.bodies["/apis"]["items"][2]
        metrics["versions"][0]["freshness"] = "Stale"
        metrics["versions"][0]["resources"] = []
        cluster.set_hash("apis/metrics.example.com/v1beta1", "H9", {})
        cluster.failures["/openapi/v3/apis/metrics.example.com/v1beta1?hash=H9"] = 503
        second = await discovery.read(first)
        loaded = await documents.load(second, [("metrics.example.com", "v1beta1"), ("apps", "v1")])
    kept = second.groups[("metrics.example.com", "v1beta1")]
    assert kept.resources == first.groups[("metrics.example.com", "v1beta1")].resources
    assert kept.openapi_hash == "H9"
    assert second.resource("apps", "v1", "deployments") == first.resource(
        "apps", "v1", "deployments"
    )
    # the document that fails is left out (logged, without its hash); the others are read
    assert set(loaded) == {("apps", "v1")}
    assert "cannot read /openapi/v3/apis/metrics.example.com/v1beta1 (" in caplog.text


@pytest.mark.parametrize("status", [503, 404])
async def test_an_index_that_cannot_be_read_keeps_the_previous_names(status: int) -> None:
    cluster = scripted()
    async with serving(cluster) as http:
        discovery = Discovery(http)
        first = await discovery.read(SEED_CATALOG)
        cluster.failures["/openapi/v3"] = status
        second = await discovery.read(first)
        assert discovery.openapi_served is (status != 404)
        assert not catalog_changed(first, second)
        assert second.groups[("apps", "v1")].openapi_url == "/openapi/v3/apis/apps/v1?hash=H1"
        fresh = await Discovery(http).read(SEED_CATALOG)  # nothing before: nothing named
    assert fresh.groups[("apps", "v1")].openapi_hash == ""
    assert await documents.load(fresh, fresh.groups) == {}


async def test_legacy_discovery_fallback_and_a_failing_group_version() -> None:
    cluster = Cluster()
    cluster.bodies["/api"] = {"kind": "APIVersions", "versions": ["v1"]}
    cluster.bodies["/apis"] = {
        "kind": "APIGroupList",
        "groups": [
            {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}]},
            {"name": "broken.example.com",
             "versions": [{"groupVersion": "broken.example.com/v1", "version": "v1"}]},
        ],
    }  # fmt: skip
    cluster.bodies["/api/v1"] = {"kind": "APIResourceList", "resources": [
        {"name": "configmaps", "singularName": "", "namespaced": True, "kind": "ConfigMap",
         "verbs": ["get", "list"]}]}  # fmt: skip
    cluster.bodies["/apis/apps/v1"] = {"kind": "APIResourceList", "resources": [
        {"name": "deployments", "singularName": "deployment", "namespaced": True,
         "kind": "Deployment", "verbs": ["get", "list", "watch"]},
        {"name": "deployments/scale", "singularName": "", "namespaced": True, "kind": "Scale",
         "verbs": ["get", "patch", "update"]}]}  # fmt: skip
    cluster.bodies["/apis/broken.example.com/v1"] = {"kind": "APIResourceList", "resources": [
        {"name": "things", "singularName": "", "namespaced": False, "kind": "Thing",
         "verbs": ["get", "list"]}]}  # fmt: skip
    async with serving(cluster) as http:
        discovery = Discovery(http)
        first = await discovery.read(SEED_CATALOG)
        assert discovery.aggregated is False
        assert first.resource("", "v1", "configmaps").singular == "configmap"
        assert set(first.resource("apps", "v1", "deployments").subresources) == {"scale"}
        cluster.failures["/apis/broken.example.com/v1"] = 503
        second = await discovery.read(first)
        assert second.resource("broken.example.com", "v1", "things") == first.resource(
            "broken.example.com", "v1", "things"
        )
        # never read successfully: not served until it answers
        third = await discovery.read(SEED_CATALOG)
    assert ("broken.example.com", "v1") not in third.groups
    assert ("apps", "v1") in third.groups


async def test_limits_bound_every_read() -> None:
    cluster = scripted()
    async with serving(cluster) as http:
        with pytest.raises(DiscoveryFailed, match="larger than 100 bytes"):
            await Discovery(http, limits=DiscoveryLimits(max_discovery_bytes=100)).read(
                SEED_CATALOG
            )
        small_docs = await Discovery(http, limits=DiscoveryLimits(max_openapi_bytes=10)).read(
            SEED_CATALOG
        )
        assert small_docs.groups[("apps", "v1")].openapi_hash == "H1"
        assert await documents.load(small_docs, [("apps", "v1")]) == {}
        assert small_docs.resource("apps", "v1", "deployments").kind == "Deployment"
        few = await Discovery(http, limits=DiscoveryLimits(max_group_versions=2)).read(SEED_CATALOG)
    assert list(few.groups) == [("", "v1"), ("apps", "v1")]
    # seeds stay served even when their group/version was left out
    assert few.resource("coordination.k8s.io", "v1", "leases") is LEASE


def test_catalog_changed_compares_resources_and_hashes() -> None:
    assert not catalog_changed(SEED_CATALOG, Catalog(REGISTRY, generation=5))

    def named(digest: str, url: str, doc: dict[str, Any] | None = None) -> Catalog:
        gv = GroupVersion("", "v1", (POD,), doc, digest, url)
        return Catalog(REGISTRY, MappingProxyType({("", "v1"): gv}))

    one = named("H1", "/openapi/v3/api/v1?hash=H1")
    assert not catalog_changed(one, named("H1", "/openapi/v3/api/v1?hash=H1"))
    assert catalog_changed(one, named("H2", "/openapi/v3/api/v1?hash=H2"))
    assert catalog_changed(named("", ""), named("", "/openapi/v3/api/v1"))
    # a document read or not is not a change of what is served
    assert not catalog_changed(one, named("H1", "/openapi/v3/api/v1?hash=H1", {"openapi": "3"}))


def test_settings_refuse_malformed_resources_and_turn_discovery_off() -> None:
    with pytest.raises(SystemExit, match="RESOURCE"):
        load(["--resources", "apps/v1/deployments/scale"], {})
    with pytest.raises(SystemExit, match="KUBE_GATEWAY_RESOURCES"):
        load([], {"KUBE_GATEWAY_RESOURCES": "a//b"})
    assert load(["--resources", "apps/*,-secrets"], {}).resources == "apps/*,-secrets"
    assert load([], {}).discovery is True
    assert load(["--no-discovery"], {}).discovery is False
    assert load([], {"KUBE_GATEWAY_DISCOVERY": "false"}).discovery is False

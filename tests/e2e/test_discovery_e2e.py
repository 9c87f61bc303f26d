"""Discovery and the live catalog reload against the real kube-apiserver: what discovery
finds (scope, verbs, subresources, OpenAPI v3 documents named by hash and read on demand),
``--resources`` filtering, and a
CRD created and deleted while a :class:`CatalogReloader` runs, heard by a catalog listener.

Requests are counted by a transport that wraps httpx's real one (every request still goes
over TLS to the apiserver), so "not fetched again" is a count, not a guess.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from gateway.core.catalog import openapi_documents as documents
from gateway.core.catalog.catalog import SEED_CATALOG, Catalog, CatalogHolder
from gateway.core.catalog.discovery import Discovery, ResourcePatterns
from gateway.core.catalog.reload import CatalogReloader
from gateway.core.model.registry import ALL_VERBS, POD
from gateway.core.upstream.adapter import KubeAdapter
from gateway.settings import Settings
from tests.e2e.apiserver import KubeAPIServer
from tests.support.graphql import serve_app

#: A safety net only: every wait below ends on an event, long before this.
STEP = 60.0
_runs = itertools.count()


class CountingTransport(httpx.AsyncBaseTransport):
    """httpx's own transport, counting each request's path (and query)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.paths: Counter[str] = Counter()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        query = request.url.query.decode()
        self.paths[request.url.path + (f"?{query}" if query else "")] += 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def documents(self) -> dict[str, int]:
        """OpenAPI documents read, by path (without the hash)."""
        out: Counter[str] = Counter()
        for path, n in self.paths.items():
            if path.startswith("/openapi/v3/"):
                out[path.split("?", 1)[0]] += n
        return dict(out)


@contextlib.asynccontextmanager
async def admin_client(
    kube: KubeAPIServer,
) -> AsyncIterator[tuple[httpx.AsyncClient, CountingTransport]]:
    transport = CountingTransport(httpx.AsyncHTTPTransport(verify=kube.ssl_context()))
    async with httpx.AsyncClient(
        base_url=kube.url, transport=transport, headers=kube.headers("admin")
    ) as http:
        yield http, transport


async def test_discovery_finds_builtin_resources_scope_verbs_subresources_and_documents(
    kube_apiserver: KubeAPIServer,
) -> None:
    async with admin_client(kube_apiserver) as (http, counted):
        discovery = Discovery(http)
        catalog = await discovery.read(SEED_CATALOG)
        assert counted.documents() == {}  # named by the index, read only when loaded
        loaded = await documents.load(catalog, [("apps", "v1")])
    assert discovery.aggregated is True
    assert counted.paths["/api"] == counted.paths["/apis"] == 1
    deployments = catalog.resource("apps", "v1", "deployments")
    assert (deployments.kind, deployments.singular, deployments.namespaced) == (
        "Deployment",
        "deployment",
        True,
    )
    assert deployments.verbs == ALL_VERBS
    assert set(deployments.subresources) == {"scale", "status"}
    assert deployments.subresources["scale"].verbs == {"get", "patch", "update"}
    assert "deploy" in deployments.short_names
    for plural in ("services", "configmaps", "secrets", "namespaces", "nodes"):
        catalog.resource("", "v1", plural)
    assert not catalog.resource("", "v1", "nodes").namespaced
    assert catalog.resource("", "v1", "pods") is POD  # the curated seed record
    services = catalog.resource("", "v1", "services")
    assert "proxy" not in services.subresources  # connect-only
    sa = catalog.resource("", "v1", "serviceaccounts")
    assert sa.subresources["token"].verbs == {"create"}
    assert catalog.registry.by_resource("", "v1", "bindings") is not None  # create only
    apps = catalog.groups[("apps", "v1")]
    assert apps.openapi_hash
    assert apps.openapi_url.startswith("/openapi/v3/apis/apps/v1?hash=")
    assert apps.openapi is None
    assert "io.k8s.api.apps.v1.Deployment" in loaded[("apps", "v1")]["components"]["schemas"]
    # built-in API set: every served kind in one catalog
    assert len(catalog.registry.records) >= 50


async def test_resources_patterns_filter_what_is_served(kube_apiserver: KubeAPIServer) -> None:
    patterns = ResourcePatterns.parse("apps/*,core/v1/*,-secrets,-core/*/nodes")
    async with admin_client(kube_apiserver) as (http, counted):
        catalog = await Discovery(http, patterns=patterns).read(SEED_CATALOG)
        assert counted.documents() == {}
        await documents.load(catalog, catalog.groups)
    served = {(r.group, r.version, r.plural) for r in catalog.registry.records}
    assert ("apps", "v1", "deployments") in served
    assert ("", "v1", "configmaps") in served
    assert ("", "v1", "secrets") not in served
    assert ("", "v1", "nodes") not in served
    assert not any(g == "batch" for g, _, _ in served)
    assert ("coordination.k8s.io", "v1", "leases") in served  # a seed, always served
    assert set(counted.documents()) == {"/openapi/v3/api/v1", "/openapi/v3/apis/apps/v1"}


def crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gizmos.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo",
                      "shortNames": ["gz"]},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    }}},
                }
            ],
        },
    }  # fmt: skip


async def next_catalog(swaps: asyncio.Queue[Catalog], until: Callable[[Catalog], bool]) -> Catalog:
    """The first swapped-in catalog that satisfies ``until`` (heard by the listener)."""
    async with asyncio.timeout(STEP):
        while True:
            catalog = await swaps.get()
            if until(catalog):
                return catalog


async def test_a_crd_appears_in_a_swapped_catalog_and_disappears_when_deleted(
    kube_apiserver: KubeAPIServer,
) -> None:
    group = f"disc{next(_runs)}.e2e.example.com"
    holder = CatalogHolder()
    swaps: asyncio.Queue[Catalog] = asyncio.Queue()
    holder.listen(lambda _old, new: swaps.put_nowait(new))
    async with admin_client(kube_apiserver) as (http, counted):
        reloader = CatalogReloader(Discovery(http), holder, KubeAdapter(http))
        await reloader.start()
        first = holder.current
        assert first.generation == 1
        assert ("apps", "v1") in first.groups
        assert counted.documents() == {}  # no document read to discover
        await documents.load(first, first.groups)  # as the first schema build does
        documents_at_start = counted.documents()
        assert documents_at_start["/openapi/v3/apis/apps/v1"] == 1
        running = asyncio.create_task(reloader.run())
        try:
            created = await http.post(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd(group)
            )
            assert created.status_code == 201, created.text

            def has_gizmos(c: Catalog) -> bool:
                gv = c.groups.get((group, "v1"))
                return c.registry.by_resource(group, "v1", "gizmos") is not None and (
                    gv is not None and bool(gv.openapi_hash)
                )

            with_crd = await next_catalog(swaps, has_gizmos)
            gizmos = with_crd.resource(group, "v1", "gizmos")
            assert (gizmos.kind, gizmos.namespaced, gizmos.short_names) == ("Gizmo", True, ("gz",))
            assert set(gizmos.subresources) == {"status"}
            loaded = await documents.load(with_crd, with_crd.groups)
            schemas = loaded[(group, "v1")]["components"]["schemas"]
            assert any(name.endswith(".v1.Gizmo") for name in schemas)
            # the documents of unchanged group/versions were not read again
            read = counted.documents()
            for path, n in documents_at_start.items():
                assert read[path] == n, path
            assert read[f"/openapi/v3/apis/{group}/v1"] == 1

            deleted = await http.delete(
                f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gizmos.{group}"
            )
            assert deleted.status_code == 200, deleted.text
            without = await next_catalog(
                swaps, lambda c: c.registry.by_resource(group, "v1", "gizmos") is None
            )
            assert (group, "v1") not in without.groups
            assert without.generation > with_crd.generation
            assert without.groups[("apps", "v1")] == first.groups[("apps", "v1")]
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    assert reloader.swaps >= 3  # start, CRD served, CRD gone


async def test_the_lifespan_serves_a_discovered_catalog_with_the_kubeconfig_identity(
    kube_apiserver: KubeAPIServer,
) -> None:
    settings = Settings(
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        kubeconfig=kube_apiserver.kubeconfigs["admin"],
        resources="apps/*,-*/*/replicasets",
        log_level="warning",
    )
    async with serve_app(settings) as (url, app):
        await app.state.runtime.live_schema.wait_ready()  # discovery reads in the background
        catalog = app.state.runtime.cluster.catalog.current
        assert catalog.resource("apps", "v1", "deployments").kind == "Deployment"
        assert catalog.registry.by_resource("apps", "v1", "replicasets") is None
        assert catalog.registry.by_resource("", "v1", "configmaps") is None
        async with httpx.AsyncClient() as client:
            scraper = kube_apiserver.headers("admin")  # /metrics: for callers RBAC allows
            metrics = (await client.get(f"{url}/metrics", headers=scraper)).text
    served = len(catalog.registry.records)
    assert f"kube_gateway_served_resources {served}.0" in metrics
    assert 'kube_gateway_catalog_reloads_total{outcome="swapped"} 1.0' in metrics

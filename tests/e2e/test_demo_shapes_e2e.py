"""The demo's ``/openapi/v3`` and aggregated discovery have the real kube-apiserver's shape.

A client written against the real apiserver (the gateway's discovery, client-go) must work
against the demo: the same top-level fields, index entries, definition ids, v3 reference
spelling, discovery entries and ``Accept`` negotiation, compared side by side here.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from kube_gateway_demo import DemoUpstream
from tests.e2e.apiserver import KubeAPIServer

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_HASHED = re.compile(r"^/openapi/v3/(?P<key>[^?]+)\?hash=[0-9A-F]{128}$")


@pytest.fixture
async def both(
    kube_apiserver: KubeAPIServer,
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    async with (
        DemoUpstream() as demo,
        httpx.AsyncClient(
            base_url=kube_apiserver.url,
            verify=kube_apiserver.ssl_context(),
            headers=kube_apiserver.headers("admin"),
            timeout=30,
        ) as real,
        httpx.AsyncClient(
            base_url=demo.url, headers={"Authorization": "Bearer admin-token"}, timeout=30
        ) as fake,
    ):
        yield real, fake


async def _index(client: httpx.AsyncClient) -> dict[str, str]:
    r = await client.get("/openapi/v3")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"paths"}
    out: dict[str, str] = {}
    for key, entry in body["paths"].items():
        assert set(entry) == {"serverRelativeURL"}
        match = _HASHED.match(entry["serverRelativeURL"])
        assert match is not None and match["key"] == key, entry
        out[key] = entry["serverRelativeURL"]
    return out


def _shape(node: Any) -> Any:
    """The keys of a schema node, recursively through its properties' keys."""
    if isinstance(node, dict):
        return sorted(node)
    return type(node).__name__


def _undocumented(node: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k != "description"}


async def test_openapi_v3_index_and_documents_have_the_apiservers_shape(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    real, fake = both
    real_index, fake_index = await _index(real), await _index(fake)
    common = {"api/v1", "apis/apps/v1", "apis/coordination.k8s.io/v1"}
    common.add("apis/apiextensions.k8s.io/v1")
    assert common <= set(real_index) & set(fake_index)

    for key, kinds in (
        ("apis/apps/v1", ("io.k8s.api.apps.v1.Deployment", "io.k8s.api.apps.v1.ReplicaSet")),
        ("api/v1", ("io.k8s.api.core.v1.Service", "io.k8s.api.core.v1.ConfigMap")),
    ):
        got = [await c.get(i[key]) for c, i in ((real, real_index), (fake, fake_index))]
        for r in got:
            assert r.status_code == 200
            assert r.headers["content-type"] == "application/json"
            assert r.headers["cache-control"] == "public, immutable"
            assert r.headers["etag"] == f'"{r.url.params["hash"]}"'
        real_doc, fake_doc = (r.json() for r in got)
        assert set(real_doc) == set(fake_doc) == {"openapi", "info", "paths", "components"}
        assert (fake_doc["openapi"], fake_doc["info"]) == (real_doc["openapi"], real_doc["info"])
        assert (
            fake_doc["components"]["securitySchemes"] == real_doc["components"]["securitySchemes"]
        )
        real_schemas = real_doc["components"]["schemas"]
        fake_schemas = fake_doc["components"]["schemas"]
        for kind in kinds:
            for def_id in (kind, kind + "List"):
                r_def, f_def = real_schemas[def_id], fake_schemas[def_id]
                assert sorted(f_def["properties"]) == sorted(r_def["properties"])
                assert (
                    f_def["x-kubernetes-group-version-kind"]
                    == r_def["x-kubernetes-group-version-kind"]
                )
                for name in ("metadata", "spec", "items"):
                    if name in r_def["properties"]:
                        assert _shape(f_def["properties"][name]) == _shape(
                            r_def["properties"][name]
                        ), (def_id, name)
                        assert _undocumented(f_def["properties"][name]) == _undocumented(
                            r_def["properties"][name]
                        ), (def_id, name)
        for path, real_ops in real_doc["paths"].items():
            if path in fake_doc["paths"]:
                op = fake_doc["paths"][path]["get"]
                assert op["x-kubernetes-action"] == real_ops["get"]["x-kubernetes-action"]
                gvk = real_ops["get"]["x-kubernetes-group-version-kind"]
                assert op["x-kubernetes-group-version-kind"] == gvk

    # a custom resource's document: the real Image CRD against the demo's Widget CRD
    real_crd = (await real.get(real_index["apis/image.openshift.io/v1"])).json()
    fake_crd = (await fake.get(fake_index["apis/demo.kube-gateway.dev/v1"])).json()
    assert fake_crd["info"] == real_crd["info"]
    assert set(fake_crd) == set(real_crd)
    real_kind = real_crd["components"]["schemas"]["io.openshift.image.v1.Image"]
    fake_kind = fake_crd["components"]["schemas"]["dev.kube-gateway.demo.v1.Widget"]
    for name in ("apiVersion", "kind", "metadata"):
        assert fake_kind["properties"][name] == real_kind["properties"][name]
    real_list = real_crd["components"]["schemas"]["io.openshift.image.v1.ImageList"]
    fake_list = fake_crd["components"]["schemas"]["dev.kube-gateway.demo.v1.WidgetList"]
    assert sorted(fake_list) == sorted(real_list)
    for name in ("apiVersion", "kind", "metadata"):
        assert fake_list["properties"][name] == real_list["properties"][name]
    assert _shape(fake_list["properties"]["items"]) == _shape(real_list["properties"]["items"])
    meta = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    assert meta in fake_crd["components"]["schemas"]


async def test_aggregated_discovery_has_the_apiservers_shape(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    real, fake = both
    entries: list[dict[tuple[str, str], dict[str, Any]]] = []
    for client in (real, fake):
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for path in ("/api", "/apis"):
            r = await client.get(path, headers={"Accept": AGGREGATED})
            assert r.status_code == 200
            assert r.headers["content-type"] == AGGREGATED
            assert r.headers["vary"] == "Accept"
            assert r.headers["cache-control"] == "public"
            body = r.json()
            assert set(body) == {"kind", "apiVersion", "metadata", "items"}
            assert (body["kind"], body["apiVersion"], body["metadata"]) == (
                "APIGroupDiscoveryList",
                "apidiscovery.k8s.io/v2",
                {},
            )
            for group in body["items"]:
                assert set(group) == {"metadata", "versions"}
                for version in group["versions"]:
                    assert set(version) == {"version", "resources", "freshness"}
                    for res in version["resources"]:
                        found[(group["metadata"].get("name", ""), res["resource"])] = res
        entries.append(found)
    real_entries, fake_entries = entries
    for key in (
        ("", "pods"),
        ("", "configmaps"),
        ("", "services"),
        ("", "nodes"),
        ("", "namespaces"),
        ("", "events"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("coordination.k8s.io", "leases"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("image.openshift.io", "images"),
    ):
        r_entry, f_entry = real_entries[key], fake_entries[key]
        for field in ("responseKind", "scope", "singularResource", "verbs", "shortNames"):
            assert f_entry.get(field) == r_entry.get(field), (key, field)
        assert f_entry.get("categories") == r_entry.get("categories"), key
        real_subs = {s["subresource"]: s for s in r_entry.get("subresources", [])}
        for sub in f_entry.get("subresources", []):
            assert sub == real_subs[sub["subresource"]], (key, sub)


async def test_discovery_accept_negotiation_matches_the_apiserver(
    both: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    old = AGGREGATED.replace("v=v2", "v=v2beta1")
    for accept in (
        None,
        "application/json",
        f"{AGGREGATED},application/json",
        f"application/json,{AGGREGATED}",
        f"{old},application/json",
        old,
    ):
        answers = []
        for client in both:
            headers = {"Accept": accept} if accept is not None else {}
            r = await client.get("/apis", headers=headers)
            body = r.json()
            answers.append((r.status_code, body["kind"], body.get("message")))
        assert answers[0] == answers[1], accept

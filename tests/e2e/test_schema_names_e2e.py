"""Names are a function of the catalog, and ready means serving it, on the real apiserver.

Two gateways on one cluster: one started before three CRDs with one kind name are installed
(two in ``*.k8s.io`` groups, which a CRD may claim with the API-approval annotation, one in
a custom group), one after.  Both print byte-identical SDL for ``/graphql`` and every
group's ``/apis/<group>/graphql``, whatever the order the CRDs arrived in; a CRD group is
never part of ``/graphql``, even under ``*.k8s.io``.  The second gateway's
``/readyz`` never says ready before its ``/graphql`` serves what the cluster has.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from graphql import build_client_schema, get_introspection_query, print_schema

from gateway.settings import Settings
from tests.e2e.apiserver import KubeAPIServer
from tests.e2e.test_live_schema_e2e import sprocket_crd
from tests.support.graphql import serve_app

pytestmark = pytest.mark.e2e

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
OWN = ("a.names.e2e.k8s.io", "b.names.e2e.k8s.io")  # Kubernetes' own suffix, but CRDs
CUSTOM = "names.kube-gateway.dev"  # a custom group: /apis/names.kube-gateway.dev/graphql


def _settings(kube: KubeAPIServer) -> Settings:
    return kube.gateway_settings(discovery_token_file=kube.token_files["admin"])


async def _sdl(http: httpx.AsyncClient, path: str) -> str:
    body = (await http.post(path, json={"query": get_introspection_query()})).json()
    assert "errors" not in body, body
    return print_schema(build_client_schema(body["data"]))


def _has(*plurals: str) -> Any:
    def check(catalog: Any) -> bool:
        served = {r.plural + "." + r.group for r in catalog.registry.values()}
        return all(p in served for p in plurals)

    return check


@contextlib.asynccontextmanager
async def _installed(admin: httpx.AsyncClient, crd: dict[str, Any]) -> AsyncIterator[None]:
    created = await admin.post(CRDS, json=crd)
    assert created.status_code == 201, created.text
    try:
        yield
    finally:
        await admin.delete(f"{CRDS}/{crd['metadata']['name']}")


async def test_two_gateways_started_apart_serve_identical_schemas(
    kube_apiserver: KubeAPIServer,
) -> None:
    kube = kube_apiserver
    wanted = (*(f"sprockets.{g}" for g in OWN), f"sprockets.{CUSTOM}")
    async with contextlib.AsyncExitStack() as stack:
        admin = await stack.enter_async_context(
            httpx.AsyncClient(
                base_url=kube.url,
                verify=kube.ssl_context(),
                headers=kube.headers("admin"),
                timeout=60,
            )
        )
        early_url, early = await stack.enter_async_context(serve_app(_settings(kube)))
        live = early.state.runtime.live_schema
        await live.wait_ready()
        # b before a: the order the early gateway hears them in is the "wrong" one.
        for group in (OWN[1], OWN[0], CUSTOM):
            await stack.enter_async_context(_installed(admin, sprocket_crd(group)))
            await live.wait_catalog(_has(f"sprockets.{group}"))

        late_url, late = await stack.enter_async_context(serve_app(_settings(kube)))
        gql = await stack.enter_async_context(
            httpx.AsyncClient(base_url=late_url, headers=kube.headers("admin"), timeout=60)
        )
        # Ready means serving what the cluster has: at the first 200, /graphql answers a
        # discovered built-in kind and a CRD group's endpoint its kind.
        for _ in range(2000):
            if (await gql.get("/readyz")).status_code == 200:
                break
            await asyncio.sleep(0.01)  # a probe's cadence, not a synchronisation
        else:
            raise AssertionError("the late gateway never became ready")
        root = await gql.post("/graphql", json={"query": "{ deployments { items { raw } } }"})
        assert "errors" not in root.json(), root.json()
        path = f"/apis/{OWN[0]}/graphql"
        body = (await gql.post(path, json={"query": "{ sprockets { items { raw } } }"})).json()
        assert "errors" not in body, body
        await late.state.runtime.live_schema.wait_catalog(_has(*wanted))

        ungql = await stack.enter_async_context(
            httpx.AsyncClient(base_url=early_url, headers=kube.headers("admin"), timeout=60)
        )
        paths = ["/graphql", *(f"/apis/{g}/graphql" for g in (*OWN, CUSTOM))]
        for path in paths:
            early_sdl, late_sdl = await _sdl(ungql, path), await _sdl(gql, path)
            assert early_sdl == late_sdl, path
        root = await _sdl(gql, "/graphql")
        # A CRD group is not Kubernetes' own API, even under *.k8s.io: each has its schema,
        # with the bare names; /graphql is the apiserver's own API only.
        assert "Sprocket" not in root
        for group in (*OWN, CUSTOM):
            sdl = await _sdl(gql, f"/apis/{group}/graphql")
            assert "  sprockets(" in sdl and "  watchSprockets(" in sdl, group
            assert "V1Sprocket" not in sdl, group

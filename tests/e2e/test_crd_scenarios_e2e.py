"""The CRD scenario (tests/scenarios/crds.py) through the gateway in front of the real
kube-apiserver, discovering with the admin's token: the same steps as on the demo."""

from __future__ import annotations

import httpx

from tests.e2e.apiserver import KubeAPIServer
from tests.scenarios.crds import CrdBackend, crd_lifecycle
from tests.support.graphql import serve_app


async def test_a_crd_arrives_changes_and_leaves(kube_apiserver: KubeAPIServer) -> None:
    kube = kube_apiserver
    settings = kube.gateway_settings(discovery_token_file=kube.token_files["admin"])
    async with (
        serve_app(settings) as (url, app),
        httpx.AsyncClient(
            base_url=kube.url, verify=kube.ssl_context(), headers=kube.headers("admin"), timeout=60
        ) as upstream,
    ):
        backend = CrdBackend("apiserver", url, app, kube.tokens["admin"], upstream)
        await crd_lifecycle(backend)
    print("apiserver:", {k: round(v, 3) for k, v in backend.timings.items()}, backend.ended_with)

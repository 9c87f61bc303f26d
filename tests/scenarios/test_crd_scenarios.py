"""The CRD scenario (tests/scenarios/crds.py) through the gateway in front of the demo
upstream: the gateway discovers with the demo's admin token, as it does in front of a real
cluster with its own discovery identity."""

from __future__ import annotations

from pathlib import Path

import httpx

from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.scenarios.crds import CrdBackend, crd_lifecycle
from tests.support.graphql import serve_app

ADMIN = "admin-token"


async def test_a_crd_arrives_changes_and_leaves(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(ADMIN)
    async with DemoUpstream(seed=False) as demo:
        await demo.store.ensure_namespace("team-a")
        settings = Settings(
            host="127.0.0.1",
            http_port=0,
            grpc_port=0,
            server=demo.url,
            discovery_token_file=str(token_file),
            log_level="warning",
        )
        async with (
            serve_app(settings) as (url, app),
            httpx.AsyncClient(
                base_url=demo.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30
            ) as upstream,
        ):
            backend = CrdBackend("demo", url, app, ADMIN, upstream)
            await crd_lifecycle(backend)
    print("demo:", {k: round(v, 3) for k, v in backend.timings.items()}, backend.ended_with)

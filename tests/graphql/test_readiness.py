"""Readiness waits for the schema: `/readyz` and the gRPC health service say not ready until
`/graphql` serves the schema of the current catalog, so a replica in a rolling update takes
no traffic it would answer with `Cannot query field 'deployments'`.

The demo holds its OpenAPI document reads (a fault of its own), which keeps the first
`/graphql` build waiting on them for as long as the test likes; no timing is involved.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import ADMIN, serve_app

DEPLOYMENTS = '{ deployments(namespace: "demo") { items { metadata { name } } } }'


async def _health(port: int, service: str = "") -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service)
        )
    return int(answer.status)


async def _serving(port: int) -> bool:
    """Watch the server's health until it says SERVING (a client's way to wait for it)."""
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
        asyncio.timeout(30),
    ):
        async for answer in health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service="")
        ):
            if answer.status == health_pb2.HealthCheckResponse.SERVING:
                return True
    return False


async def test_not_ready_until_the_discovered_schema_is_served(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(ADMIN)
    async with DemoUpstream() as demo:
        demo.faults.hold(verb="openapi")
        settings = Settings(
            host="127.0.0.1",
            http_port=0,
            grpc_port=0,
            server=demo.url,
            discovery_token_file=str(token),
            log_level="warning",
        )
        async with (
            serve_app(settings) as (url, app),
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            runtime = app.state.runtime
            await demo.faults.wait_held()  # the first /graphql build reads its documents
            not_ready = await http.get("/readyz")
            assert not_ready.status_code == 503
            assert not_ready.json() == {"status": "GraphQL schema not built yet"}
            for service in ("", "kubegateway.v1.PodService"):
                assert await _health(runtime.grpc_port, service) == (
                    health_pb2.HealthCheckResponse.NOT_SERVING
                )
            # The seed kinds answer meanwhile; the discovered ones are not there yet.
            auth = {"Authorization": f"Bearer {ADMIN}"}
            pods = await http.post(
                "/graphql",
                json={"query": '{ pods(namespace: "demo", limit: 1) { items { raw } } }'},
                headers=auth,
            )
            assert "errors" not in pods.json()
            early = await http.post("/graphql", json={"query": DEPLOYMENTS}, headers=auth)
            assert "Cannot query field 'deployments'" in early.json()["errors"][0]["message"]

            demo.faults.release()
            await runtime.live_schema.wait_ready()
            ready = await http.get("/readyz")
            assert (ready.status_code, ready.json()) == (200, {"status": "ok"})
            assert await _serving(runtime.grpc_port)
            served = await http.post("/graphql", json={"query": DEPLOYMENTS}, headers=auth)
            assert served.json()["data"]["deployments"]["items"]


async def test_without_discovery_the_gateway_is_ready_at_once() -> None:
    async with DemoUpstream() as demo:
        settings = Settings(
            host="127.0.0.1",
            http_port=0,
            grpc_port=0,
            server=demo.url,
            discovery=False,
            log_level="warning",
        )
        async with (
            serve_app(settings) as (url, app),
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            assert app.state.runtime.live_schema is None
            assert (await http.get("/readyz")).status_code == 200
            port = app.state.runtime.grpc_port
            assert await _health(port) == health_pb2.HealthCheckResponse.SERVING

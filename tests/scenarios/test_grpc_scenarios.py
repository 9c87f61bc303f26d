"""The gRPC client scenarios (tests/scenarios/grpc_api.py) against the demo upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.core.upstream.config import UpstreamConfig
from kube_gateway_demo import DemoUpstream, TokenGrant
from tests.scenarios.grpc_api import *  # noqa: F403  (the shared scenarios are collected here)
from tests.scenarios.grpc_backend import GrpcBackend, serve_backend

#: identity -> token; tokens are not the user names, so a leaked token would be noticed
TOKENS = {
    "admin": "admin-secret-7f3a",
    "alice": "alice-secret-91c2",
    "nobody": "nobody-secret-0d5e",
}
GRANTS = {
    TOKENS["admin"]: TokenGrant("admin", "*", cluster_scoped=True),
    TOKENS["alice"]: TokenGrant("alice", frozenset({"team-a"})),
    TOKENS["nobody"]: TokenGrant("nobody", frozenset()),
}


@pytest.fixture
async def grpc_backend() -> AsyncIterator[GrpcBackend]:
    async with DemoUpstream(tokens=GRANTS, seed=False) as demo:
        for namespace in ("team-a", "team-b"):
            await demo.store.ensure_namespace(namespace)
        async with serve_backend(
            "demo",
            UpstreamConfig(server=demo.url, source="demo"),
            TOKENS,
            alice_reads_images=False,
            demo=demo,
        ) as backend:
            yield backend

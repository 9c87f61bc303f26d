"""The core scenarios (tests/scenarios/core.py) against the demo upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from kube_gateway_demo import DemoUpstream, TokenGrant
from tests.scenarios.backend import Backend
from tests.scenarios.core import *  # noqa: F403  (the shared scenarios are collected here)

TOKENS = {
    "admin": TokenGrant("admin", "*", cluster_scoped=True),
    "alice": TokenGrant("alice", frozenset({"team-a"})),
    "nobody": TokenGrant("nobody", frozenset()),
}


@pytest.fixture
async def backend() -> AsyncIterator[Backend]:
    async with DemoUpstream(tokens=TOKENS, seed=False) as demo:
        for namespace in ("team-a", "team-b"):
            await demo.store.ensure_namespace(namespace)
        cfg = UpstreamConfig(server=demo.url, source="demo")
        async with build_http_client(cfg) as http:
            yield Backend(
                name="demo",
                adapter=KubeAdapter(http),
                admin=Credential("admin"),
                alice=Credential("alice"),
                nobody=Credential("nobody"),
            )

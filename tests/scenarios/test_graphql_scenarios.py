"""The GraphQL client scenarios (tests/scenarios/graphql_api.py) against the demo upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream, TokenGrant
from tests.scenarios.graphql_api import *  # noqa: F403  (the shared scenarios are collected here)
from tests.scenarios.graphql_backend import GraphQLBackend
from tests.support.graphql import serve_app

TOKENS = {
    "admin": TokenGrant("admin", "*", cluster_scoped=True),
    "alice": TokenGrant("alice", frozenset({"team-a"})),
    "nobody": TokenGrant("nobody", frozenset()),
}


@pytest.fixture
async def gw() -> AsyncIterator[GraphQLBackend]:
    async with DemoUpstream(tokens=TOKENS, seed=False) as demo:
        for namespace in ("team-a", "team-b"):
            await demo.store.ensure_namespace(namespace)
        settings = Settings(
            host="127.0.0.1", http_port=0, grpc_port=0, server=demo.url, log_level="warning"
        )
        async with (
            serve_app(settings) as (url, app),
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            yield GraphQLBackend(
                name="demo",
                url=url,
                app=app,
                tokens={name: name for name in TOKENS},
                http=http,
                alice_reads_images=False,
                demo=demo,
            )

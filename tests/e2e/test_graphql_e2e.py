"""The GraphQL client scenarios (tests/scenarios/graphql_api.py) against the real
kube-apiserver: the gateway app served by uvicorn on a loopback port, configured with
``--server`` and ``--ca-file`` of the session's apiserver, called by real clients with each
identity's token."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.e2e.apiserver import KubeAPIServer
from tests.scenarios.graphql_api import *  # noqa: F403  (the shared scenarios are collected here)
from tests.scenarios.graphql_backend import GraphQLBackend
from tests.support.graphql import serve_app


@pytest.fixture
async def gw(kube_apiserver: KubeAPIServer) -> AsyncIterator[GraphQLBackend]:
    async with (
        serve_app(kube_apiserver.gateway_settings()) as (url, app),
        httpx.AsyncClient(base_url=url, timeout=30) as http,
    ):
        yield GraphQLBackend(
            name="apiserver",
            url=url,
            app=app,
            tokens=dict(kube_apiserver.tokens),
            http=http,
            alice_reads_images=True,
        )

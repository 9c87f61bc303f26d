"""The core scenarios (tests/scenarios/core.py) against the real kube-apiserver."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from tests.e2e.apiserver import KubeAPIServer
from tests.scenarios.backend import Backend
from tests.scenarios.core import *  # noqa: F403  (the shared scenarios are collected here)


@pytest.fixture
async def backend(kube_apiserver: KubeAPIServer) -> AsyncIterator[Backend]:
    cfg = UpstreamConfig(
        server=kube_apiserver.url, source="e2e", ca_file=Path(kube_apiserver.ca_file)
    )
    async with build_http_client(cfg) as http:
        yield Backend(
            name="apiserver",
            adapter=KubeAdapter(http),
            admin=Credential(kube_apiserver.tokens["admin"]),
            alice=Credential(kube_apiserver.tokens["alice"]),
            nobody=Credential(kube_apiserver.tokens["nobody"]),
        )

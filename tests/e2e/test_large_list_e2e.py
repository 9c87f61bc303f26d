"""A large list from the real kube-apiserver: it gzips the answer (APIResponseCompression,
on by default, for an answer over 128 KiB to a client that accepts gzip), the gateway hands
the body to a list worker as it came, and the answer is the same bytes as a gateway without
workers gives (which inflates and decodes it itself)."""

from __future__ import annotations

import contextlib
import gzip
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from gateway.core.lists.body import Undecoded
from gateway.core.lists.gzipped import gzip_size
from gateway.core.lists.large import LARGE_BODY_BYTES
from gateway.core.lists.pool import FEED_FROM_GZIPPED
from gateway.core.model.registry import POD
from gateway.core.upstream.credentials import Credential
from tests.e2e.apiserver import KubeAPIServer
from tests.support.graphql import serve_app

NS = "big-lists"
#: Pods, each with about 200 KB of annotations (the apiserver allows 256 KiB): a list
#: answer well over the 1 MiB a list worker takes.
PODS = 7
#: Not the list's resourceVersion: the cluster's, which anything anywhere moves between two
#: lists.
QUERY = (
    '{ pods(namespace: "big-lists") { '
    "items { metadata { name uid annotations } spec { containers { name image } } } } }"
)


def _pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"big-{i}",
            "annotations": {f"note-{k}": f"{i}-{k}-" + "x" * 20_000 for k in range(10)},
        },
        "spec": {"containers": [{"name": "app", "image": f"example.com/app:{i}"}]},
    }


@contextlib.asynccontextmanager
async def _pods_in(
    kube_apiserver: KubeAPIServer, namespace: str, make: Callable[[int], dict[str, Any]]
) -> AsyncIterator[httpx.AsyncClient]:
    """A namespace and its :data:`PODS` pods (``make(i)``), an admin client to the
    apiserver meanwhile (unscheduled pods are deleted at once, so they go at the end; the
    namespace stays: no namespace controller runs here to finish deleting it)."""
    async with httpx.AsyncClient(
        base_url=kube_apiserver.url,
        verify=kube_apiserver.ssl_context(),
        headers=kube_apiserver.headers("admin"),
        timeout=60,
    ) as kube:
        made = await kube.post(
            "/api/v1/namespaces",
            json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
        assert made.status_code in (201, 409), made.text
        for i in range(PODS):
            created = await kube.post(f"/api/v1/namespaces/{namespace}/pods", json=make(i))
            assert created.status_code == 201, created.text[:300]
        try:
            yield kube
        finally:
            for i in range(PODS):
                await kube.delete(
                    f"/api/v1/namespaces/{namespace}/pods/big-{i}?gracePeriodSeconds=0"
                )


@pytest.fixture
async def big_pods(kube_apiserver: KubeAPIServer) -> AsyncIterator[httpx.AsyncClient]:
    """The namespace :data:`NS` and its pods."""
    async with _pods_in(kube_apiserver, NS, _pod) as kube:
        yield kube


async def _query(url: str, token: str) -> bytes:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        response = await client.post(
            "/graphql", json={"query": QUERY}, headers={"Authorization": f"Bearer {token}"}
        )
    assert response.status_code == 200, response.text[:300]
    return response.content


async def test_a_large_list_the_apiserver_gzips_is_answered_by_a_worker_exactly(
    kube_apiserver: KubeAPIServer, big_pods: httpx.AsyncClient
) -> None:
    # The apiserver gzips it (the premise), and inflated it is large enough for a worker.
    raw = await big_pods.get(f"/api/v1/namespaces/{NS}/pods", headers={"Accept-Encoding": "gzip"})
    assert raw.headers.get("content-encoding") == "gzip"
    assert len(raw.content) >= LARGE_BODY_BYTES
    token = kube_apiserver.tokens["admin"]
    async with (
        serve_app(kube_apiserver.gateway_settings(list_workers="2")) as (url, app),
        serve_app(kube_apiserver.gateway_settings(list_workers="0")) as (plain_url, _),
    ):
        adapter = app.state.runtime.cluster.adapter
        lists = adapter.large_lists
        held = await lists.handed_on(
            lambda gzipped: adapter.list_body(
                POD, namespace=NS, credential=Credential(token), gzipped=gzipped
            ),
            deferrable=True,
        )
        assert type(held) is Undecoded and held.gzipped  # read as it came
        assert gzip_size(held.data) >= LARGE_BODY_BYTES > len(held.data)
        assert len(gzip.decompress(held.data)) == gzip_size(held.data)
        workers = lists.workers
        assert workers is not None
        got = await _query(url, token)
        assert workers.projected == 1  # a worker inflated, decoded and projected it
        want = await _query(plain_url, token)
    assert got == want
    assert got.count(b'"big-') == PODS


FED_NS = "fed-lists"


@pytest.fixture
async def fed_pods(kube_apiserver: KubeAPIServer) -> AsyncIterator[httpx.AsyncClient]:
    """Pods whose annotations gzip shrinks little (random hex): the list gzipped is past
    what is fed to a list worker as it arrives (``FEED_FROM_GZIPPED``)."""

    def fed_pod(i: int) -> dict[str, Any]:
        pod = _pod(i)
        pod["metadata"]["annotations"] = {f"note-{k}": os.urandom(10_000).hex() for k in range(10)}
        return pod

    async with _pods_in(kube_apiserver, FED_NS, fed_pod) as kube:
        yield kube


async def asked_with_and_without_workers(
    kube_apiserver: KubeAPIServer, ask: dict[str, Any]
) -> tuple[httpx.Response, httpx.Response, dict[str, int]]:
    """``ask`` posted as admin to a gateway with two list workers, then to one without:
    both answers, and the first gateway's workers' counts after its answer."""
    token = kube_apiserver.tokens["admin"]
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        serve_app(kube_apiserver.gateway_settings(list_workers="2")) as (url, app),
        serve_app(kube_apiserver.gateway_settings(list_workers="0")) as (plain_url, _),
    ):
        workers = app.state.runtime.cluster.adapter.large_lists.workers
        assert workers is not None
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            got = await client.post("/graphql", json=ask, headers=headers)
        counted = {k: getattr(workers, k) for k in ("fed", "projected", "feeding", "returned")}
        async with httpx.AsyncClient(base_url=plain_url, timeout=60) as client:
            want = await client.post("/graphql", json=ask, headers=headers)
    return got, want, counted


async def test_a_long_list_the_apiserver_streams_is_fed_to_a_worker_exactly(
    kube_apiserver: KubeAPIServer, fed_pods: httpx.AsyncClient
) -> None:
    """The apiserver writes the list gzipped as it encodes it; the gateway feeds it to a
    list worker as it arrives: the same bytes as a gateway without workers."""
    raw = await fed_pods.get(
        f"/api/v1/namespaces/{FED_NS}/pods", headers={"Accept-Encoding": "gzip"}
    )
    assert raw.headers.get("content-encoding") == "gzip"
    assert int(raw.headers.get("content-length") or FEED_FROM_GZIPPED) >= FEED_FROM_GZIPPED
    query = QUERY.replace('"big-lists"', f'"{FED_NS}"')
    got, want, workers = await asked_with_and_without_workers(kube_apiserver, {"query": query})
    assert (workers["fed"], workers["projected"], workers["feeding"]) == (1, 1, 0)
    assert got.status_code == want.status_code == 200
    assert got.content == want.content
    assert got.content.count(b'"big-') == PODS

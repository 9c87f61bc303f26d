"""Large lists through the projection fast path: exact data (a list long enough to be
completed in slices), and the cyclic GC held only until the decoded upstream body is freed
(a slice per event-loop step)."""

from __future__ import annotations

import asyncio
import gc

import httpx

from gateway.core.lists.large import LARGE_LIST
from gateway.core.model.registry import POD
from gateway.graphql.engine.projection import SLICE
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import ADMIN, Gateway

QUERY = """query($ns: String!) {
  pods(namespace: $ns) {
    metadata { resourceVersion }
    items {
      metadata { name namespace uid resourceVersion creationTimestamp labels }
      spec { nodeName serviceAccountName containers { name image } }
      status { phase podIP }
    }
  }
}"""


async def test_a_large_list_is_projected_exactly(gateway: Gateway, demo: DemoUpstream) -> None:
    count = LARGE_LIST + 100
    assert count > SLICE  # completed (and freed) in slices
    await demo.store.bulk_create(
        POD,
        (
            {
                "metadata": {"name": f"big-{i}", "labels": {"i": str(i)}},
                "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "img"}]},
                "status": {"phase": "Running", "podIP": f"10.1.{i // 250}.{i % 250}"},
            }
            for i in range(count)
        ),
        namespace="big",
    )
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30, headers=headers) as client:
        response = await client.post("/graphql", json={"query": QUERY, "variables": {"ns": "big"}})
        body = response.json()
        assert await _collector_back_within(turns=4 * count // SLICE)
    async with httpx.AsyncClient(base_url=demo.url, headers=headers) as upstream:
        direct = (await upstream.get("/api/v1/namespaces/big/pods")).json()
    items = body["data"]["pods"]["items"]
    assert len(items) == count
    for got, want in zip(items, direct["items"], strict=True):
        meta = want["metadata"]
        assert got["metadata"] == {
            k: meta.get(k)
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "labels")
        }
        assert got["spec"] == {
            "nodeName": "node-a",
            "serviceAccountName": want["spec"].get("serviceAccountName"),
            "containers": [{"name": "c", "image": "img"}],
        }
        assert got["status"] == {"phase": "Running", "podIP": want["status"]["podIP"]}
    assert gc.isenabled()


async def _collector_back_within(turns: int) -> bool:
    """Whether the collector is on, or comes back on within ``turns`` event-loop steps."""
    for _ in range(turns):
        if gc.isenabled():
            return True
        await asyncio.sleep(0)
    return gc.isenabled()

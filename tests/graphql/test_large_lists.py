"""Large lists through the projection fast path: exact data, and the cyclic GC held only
for the event-loop step that drops the decoded upstream body."""

from __future__ import annotations

import asyncio
import gc

import httpx

from gateway.core.gcpause import LARGE_LIST
from gateway.core.registry import POD
from gateway.demo import DemoUpstream
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
        assert gc.isenabled()
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
    await asyncio.sleep(0)
    assert gc.isenabled()

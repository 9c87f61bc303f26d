"""The in-process store API, seeding and the animation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from kube_gateway_demo import DemoApiError, DemoStore, DemoUpstream
from kube_gateway_demo.animate import LABEL, Animator
from kube_gateway_demo.sample import make_pods, seed

from .conftest import ADMIN, WatchReader


async def test_seed_covers_every_resource() -> None:
    store = DemoStore()
    await seed(store)
    pods = await store.list("pods")
    assert {p["metadata"]["namespace"] for p in pods} == {"default", "demo", "kube-system"}
    multi = [p for p in pods if len(p["spec"]["containers"]) > 1]
    assert multi and all(p["spec"].get("nodeName") for p in multi)
    events = await store.list("events")
    uids = {p["metadata"]["uid"] for p in pods}
    assert events and all(e["involvedObject"]["uid"] in uids for e in events)
    endpoints = await store.list("endpoints", namespace="demo")
    targets = [
        a["targetRef"]["name"]
        for e in endpoints
        for s in e.get("subsets", [])
        for a in s.get("addresses", [])
    ]
    assert targets and all(t.startswith("web-") for t in targets)
    assert await store.list("leases", namespace="kube-system")
    images = await store.list("images")
    assert len(images) == 2 and all(i["dockerImageLayers"] for i in images)


async def test_store_api_round_trip(pod: Callable[..., dict[str, Any]]) -> None:
    store = DemoStore()
    await store.ensure_namespace("demo")
    created = await store.create("pods", pod("s1"))
    assert created["kind"] == "Pod"
    with pytest.raises(DemoApiError) as exc:
        await store.create("pods", pod("s1"))
    assert exc.value.code == 409
    updated = await store.update(
        "pods", {**created, "metadata": {**created["metadata"], "labels": {"x": "y"}}}
    )
    assert updated["metadata"]["labels"] == {"x": "y"}
    applied = await store.apply(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "s1", "namespace": "demo", "annotations": {"a": "b"}},
        },
        field_manager="tester",
    )
    assert applied["metadata"]["annotations"] == {"a": "b"}
    assert (await store.get("pods", "s1", namespace="demo"))["metadata"]["annotations"]
    deleted = await store.delete("pods", "s1", namespace="demo")
    assert deleted["metadata"]["name"] == "s1"
    with pytest.raises(DemoApiError):
        await store.get("pods", "s1", namespace="demo")
    assert await store.bulk_create("pods", make_pods(3, "bulk")) == 3
    assert [p["metadata"]["name"] for p in await store.list("pods", namespace="bulk")] == [
        "bulk-00000",
        "bulk-00001",
        "bulk-00002",
    ]


async def test_animator_drives_the_lifecycle() -> None:
    store = DemoStore()
    await seed(store)
    animator = Animator(store)
    await animator.step()
    tickers = await store.list("pods", namespace="demo", label_selector=f"{LABEL}=true")
    assert len(tickers) == 3
    assert {p["status"]["phase"] for p in tickers} == {"Pending"}
    renew_before = {
        lease["metadata"]["name"]: lease["spec"]["renewTime"]
        for lease in await store.list("leases", namespace="kube-system")
    }
    rv_before = {
        lease["metadata"]["name"]: lease["metadata"]["resourceVersion"]
        for lease in await store.list("leases", namespace="kube-system")
    }
    await animator.step()
    tickers = await store.list("pods", namespace="demo", label_selector=f"{LABEL}=true")
    assert {p["status"]["phase"] for p in tickers} == {"Running"}
    endpoints = await store.get("endpoints", "ticker", namespace="demo")
    assert len(endpoints["subsets"][0]["addresses"]) == 3
    reasons = {e["reason"] for e in await store.list("events", namespace="demo")}
    assert {"Scheduled", "Pulled", "Started"} <= reasons
    leases = await store.list("leases", namespace="kube-system")
    assert all(
        lease["metadata"]["resourceVersion"] != rv_before[lease["metadata"]["name"]]
        for lease in leases
    )
    assert renew_before  # renewTime values are refreshed each step
    names = {p["metadata"]["name"] for p in tickers}
    for _ in range(8):
        await animator.step()
    now = {
        p["metadata"]["name"]
        for p in await store.list("pods", namespace="demo", label_selector=f"{LABEL}=true")
    }
    assert len(now) == 3 and now != names  # completed pods were replaced


async def test_animate_mode_runs_in_the_lifespan() -> None:
    async with (
        DemoUpstream(animate=True, animate_interval=0.01) as demo,
        httpx.AsyncClient(base_url=demo.url, headers=ADMIN, timeout=10, verify=False) as c,
    ):
        params = {"watch": "1", "labelSelector": f"{LABEL}=true"}
        async with c.stream("GET", "/api/v1/namespaces/demo/pods", params=params) as resp:
            w = WatchReader(resp)
            async with asyncio.timeout(5):
                while True:
                    event = await w.next()
                    if event["object"]["status"].get("phase") == "Succeeded":
                        break
        assert demo.app._animator is not None
    assert demo.app._animator is None

"""Fault injection: cut watches, 410s, compaction, delays, failures, dropped connections."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from kube_gateway_demo import DemoUpstream

from .conftest import WatchReader

PODS = "/api/v1/namespaces/demo/pods"


async def test_close_watches_after_n_events(
    client: httpx.AsyncClient, demo: DemoUpstream, open_watch: Any
) -> None:
    demo.faults.close_watches_after(2)
    async with open_watch(PODS) as w:
        events = await w.rest()
    assert [e["type"] for e in events] == ["ADDED", "ADDED"]


async def test_close_watches_cutting_the_last_line(
    client: httpx.AsyncClient, demo: DemoUpstream
) -> None:
    demo.faults.close_watches_after(2, cut_last_line=True)
    async with client.stream("GET", PODS, params={"watch": "1"}) as resp:
        raw = b"".join([chunk async for chunk in resp.aiter_bytes()])
    complete, _, partial = raw.rpartition(b"\n")
    assert orjson.loads(complete)["type"] == "ADDED"
    assert partial and not partial.endswith(b"}")
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(partial)


async def test_close_watches_abruptly(client: httpx.AsyncClient, demo: DemoUpstream) -> None:
    demo.faults.close_watches_after(1, abrupt=True)
    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream("GET", PODS, params={"watch": "1"}) as resp:
            async for _ in resp.aiter_bytes():
                pass
    assert (await client.get(PODS)).status_code == 200  # the server carries on


async def test_expire_watches_as_event_or_http(
    client: httpx.AsyncClient, demo: DemoUpstream, open_watch: Any
) -> None:
    demo.faults.expire_watches(1)
    async with open_watch(PODS, resourceVersion="5") as w:
        assert w.response.status_code == 200
        events = await w.rest()
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["code"], status["reason"]) == (410, "Expired")
    assert status["message"].startswith("too old resource version: 5 (")

    demo.faults.expire_watches(1, mode="http")
    r = await client.get(PODS, params={"watch": "1", "resourceVersion": "5"})
    assert r.status_code == 410
    assert r.json()["reason"] == "Expired"

    async with open_watch(PODS, timeoutSeconds=1) as w:  # disarmed again
        assert (await w.next())["type"] == "ADDED"


async def test_compaction(
    client: httpx.AsyncClient, demo: DemoUpstream, pod: Callable[..., dict[str, Any]]
) -> None:
    rv = (await client.get(PODS)).json()["metadata"]["resourceVersion"]
    await client.post(PODS, json=pod("c1"))
    compacted = demo.faults.compact()
    assert compacted == int(demo.store.resource_version)
    r = await client.get(PODS, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
    assert r.status_code == 410
    r = await client.get(
        PODS, params={"resourceVersion": str(compacted), "resourceVersionMatch": "Exact"}
    )
    assert r.status_code == 200


async def test_delay(client: httpx.AsyncClient, demo: DemoUpstream) -> None:
    demo.faults.set_delay(0.2, verb="list")
    assert (await client.get(PODS)).status_code == 200
    assert demo.faults.delayed_requests == 1
    assert (await client.get(f"{PODS}/pending-7f9d8")).status_code == 200
    assert demo.faults.delayed_requests == 1  # only lists are delayed
    demo.faults.reset()
    assert (await client.get(PODS)).status_code == 200
    assert demo.faults.delayed_requests == 0


@pytest.mark.parametrize(
    ("status", "reason", "message"),
    [
        (429, "TooManyRequests", "Too many requests, please try again later."),
        (
            500,
            "InternalError",
            "Internal error occurred: an error on the server has prevented "
            "the request from succeeding",
        ),
        (503, "ServiceUnavailable", "the server is currently unable to handle the request"),
        (
            504,
            "Timeout",
            "Timeout: request did not complete within requested timeout - context "
            "deadline exceeded",
        ),
    ],
)
async def test_fail_requests(
    client: httpx.AsyncClient, demo: DemoUpstream, status: int, reason: str, message: str
) -> None:
    demo.faults.fail_requests(2, status=status, verb="list", retry_after=3)
    for _ in range(2):
        r = await client.get(PODS)
        assert r.status_code == status
        body = r.json()
        assert (body["reason"], body["message"], body["code"]) == (reason, message, status)
        assert body["details"]["retryAfterSeconds"] == 3
        assert r.headers["retry-after"] == "3"
    assert (await client.get(f"{PODS}/pending-7f9d8")).status_code == 200  # other verb
    assert (await client.get(PODS)).status_code == 200  # used up


async def test_fail_requests_by_resource(client: httpx.AsyncClient, demo: DemoUpstream) -> None:
    demo.faults.fail_requests(1, status=500, resource="pods/log", message="kubelet is down")
    r = await client.get("/api/v1/namespaces/default/pods/nginx-7c5ddbdf54-x2x9p/log")
    assert r.status_code == 500 and r.json()["message"] == "kubelet is down"
    assert (await client.get(PODS)).status_code == 200


async def test_drop_connections(client: httpx.AsyncClient, demo: DemoUpstream) -> None:
    demo.faults.drop_connections(1, verb="get")
    with pytest.raises(httpx.RemoteProtocolError):
        await client.get(f"{PODS}/pending-7f9d8")
    assert (await client.get(f"{PODS}/pending-7f9d8")).status_code == 200
    demo.faults.drop_connections(1, verb="watch", after_bytes=10)
    with pytest.raises(httpx.RemoteProtocolError):
        async with client.stream("GET", PODS, params={"watch": "1"}) as resp:
            received = b""
            async for chunk in resp.aiter_bytes():
                received += chunk
    assert demo.faults.dropped_requests == 2


async def test_reject_initial_events(client: httpx.AsyncClient, demo: DemoUpstream) -> None:
    demo.faults.reject_initial_events()
    params = {
        "watch": "1",
        "sendInitialEvents": "true",
        "allowWatchBookmarks": "true",
        "resourceVersionMatch": "NotOlderThan",
    }
    r = await client.get(PODS, params=params)
    assert r.status_code == 422
    assert r.json()["message"] == (
        'ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents '
        "is forbidden for watch unless the WatchList feature gate is enabled"
    )
    demo.faults.reset()
    async with client.stream("GET", PODS, params={**params, "timeoutSeconds": "1"}) as resp:
        assert resp.status_code == 200
        assert (await WatchReader(resp).next())["type"] == "ADDED"


async def test_reset_disarms_everything(client: httpx.AsyncClient, demo: DemoUpstream) -> None:
    demo.faults.fail_requests(5, status=503)
    demo.faults.expire_watches(5)
    demo.faults.close_watches_after(1)
    demo.faults.drop_connections(5)
    demo.faults.set_delay(10)
    demo.faults.reject_initial_events()
    demo.faults.reset()
    assert (await client.get(PODS)).status_code == 200
    assert demo.faults.watch_cut is None
    assert demo.faults.take_expire() is None

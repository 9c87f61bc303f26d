"""Watch semantics: initial events, resumption, 410, bookmarks, initial-events-end, selectors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from kube_gateway_demo import DemoUpstream

from .conftest import ADMIN, WatchReader

PODS = "/api/v1/namespaces/demo/pods"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"


async def test_watch_without_rv_starts_with_synthetic_added(
    client: httpx.AsyncClient, open_watch: Any, pod: Callable[..., dict[str, Any]]
) -> None:
    for rv in ("", "0"):
        current = (await client.get(PODS)).json()
        expected = [i["metadata"]["name"] for i in current["items"]]
        params = {"resourceVersion": rv} if rv else {}
        async with open_watch(PODS, **params) as w:
            assert w.response.status_code == 200
            assert w.response.headers["content-type"] == "application/json"
            initial = await w.take(len(expected))
            assert [e["type"] for e in initial] == ["ADDED"] * len(expected)
            assert [e["object"]["metadata"]["name"] for e in initial] == expected
            assert all(e["object"]["kind"] == "Pod" for e in initial)
            created = (await client.post(PODS, json=pod(f"after-{rv or 'unset'}"))).json()
            event = await w.next()
            assert event["type"] == "ADDED"
            assert event["object"]["metadata"] == created["metadata"]


async def test_watch_from_rv_replays_history_then_follows(
    client: httpx.AsyncClient, open_watch: Any, pod: Callable[..., dict[str, Any]]
) -> None:
    start = (await client.get(PODS)).json()["metadata"]["resourceVersion"]
    a = (await client.post(PODS, json=pod("h-a"))).json()
    a["metadata"]["labels"]["x"] = "1"
    modified = (await client.put(f"{PODS}/h-a", json=a)).json()
    deleted = (await client.delete(f"{PODS}/h-a")).json()
    async with open_watch(PODS, resourceVersion=start) as w:
        events = await w.take(4)
        # a pod is always marked for deletion first (then, unscheduled, removed at once)
        assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
        assert (
            events[1]["object"]["metadata"]["resourceVersion"]
            == (modified["metadata"]["resourceVersion"])
        )
        assert events[2]["object"]["metadata"]["deletionGracePeriodSeconds"] == 0
        final = events[3]["object"]
        assert final["metadata"]["labels"]["x"] == "1"
        assert final["metadata"]["deletionTimestamp"]
        assert final["metadata"]["generation"] == modified["metadata"]["generation"] + 1
        assert int(final["metadata"]["resourceVersion"]) > int(
            modified["metadata"]["resourceVersion"]
        )
        assert final["metadata"]["resourceVersion"] == deleted["metadata"]["resourceVersion"]
        b = (await client.post(PODS, json=pod("h-b"))).json()
        live = await w.next()
        assert (live["type"], live["object"]["metadata"]["name"]) == ("ADDED", "h-b")
        assert live["object"]["metadata"]["resourceVersion"] == b["metadata"]["resourceVersion"]
    # resuming from the last event delivers nothing twice
    async with open_watch(
        PODS, resourceVersion=live["object"]["metadata"]["resourceVersion"], timeoutSeconds=1
    ) as w:
        await client.post(PODS, json=pod("h-c"))
        event = await w.next()
        assert event["object"]["metadata"]["name"] == "h-c"


async def test_too_old_resource_version_is_an_error_event(
    client: httpx.AsyncClient,
    demo: DemoUpstream,
    open_watch: Any,
    pod: Callable[..., dict[str, Any]],
) -> None:
    start = (await client.get(PODS)).json()["metadata"]["resourceVersion"]
    await client.post(PODS, json=pod("compact-me"))
    floor = demo.faults.compact()
    async with open_watch(PODS, resourceVersion=start) as w:
        assert w.response.status_code == 200
        events = await w.rest()
    assert events == [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {start} ({floor})",
                "reason": "Expired",
                "code": 410,
            },
        }
    ]


async def test_bookmarks_carry_only_the_resource_version() -> None:
    async with (
        DemoUpstream(bookmark_interval=0.05) as fast,
        httpx.AsyncClient(base_url=fast.url, headers=ADMIN, timeout=10, verify=False) as c,
    ):
        rv = (await c.get(LEASES)).json()["metadata"]["resourceVersion"]
        params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true"}
        async with c.stream("GET", LEASES, params=params) as resp:
            w = WatchReader(resp)
            bookmark = await w.next()
    # only the resourceVersion matters; like the apiserver's, the object is otherwise an
    # empty Lease (whose spec, not omitempty, serialises as {})
    assert bookmark == {
        "type": "BOOKMARK",
        "object": {
            "kind": "Lease",
            "apiVersion": "coordination.k8s.io/v1",
            "metadata": {"resourceVersion": rv},
            "spec": {},
        },
    }


async def test_timeout_ends_the_stream_and_a_bookmark_precedes_it(
    client: httpx.AsyncClient, open_watch: Any
) -> None:
    rv = (await client.get(LEASES)).json()["metadata"]["resourceVersion"]

    async def until_timeout() -> list[dict[str, Any]]:
        async with open_watch(LEASES, resourceVersion=rv, timeoutSeconds=1) as w:
            events: list[dict[str, Any]] = await w.rest(timeout=5)
            return events

    async def bookmark_before_expiry() -> dict[str, Any]:
        # the cacher sends a watcher its resume point about 2 s before its deadline
        async with open_watch(
            LEASES, resourceVersion=rv, timeoutSeconds=3, allowWatchBookmarks="true"
        ) as w:
            return await w.next(timeout=5)

    ended, bookmark = await asyncio.gather(until_timeout(), bookmark_before_expiry())
    assert ended == []
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["metadata"]["resourceVersion"] == rv


async def test_send_initial_events_ends_with_the_marker(
    client: httpx.AsyncClient, open_watch: Any
) -> None:
    listed = (await client.get(LEASES)).json()
    async with open_watch(
        LEASES,
        sendInitialEvents="true",
        allowWatchBookmarks="true",
        resourceVersionMatch="NotOlderThan",
        resourceVersion="",
    ) as w:
        initial = await w.take(len(listed["items"]))
        assert {e["type"] for e in initial} == {"ADDED"}
        marker = await w.next()
    assert marker["type"] == "BOOKMARK"
    assert marker["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(marker["object"]["metadata"]["resourceVersion"]) >= int(
        listed["metadata"]["resourceVersion"]
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"sendInitialEvents": "true"},
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
            "resourceVersionMatch to NotOlderThan",
        ),
        (
            {"resourceVersionMatch": "NotOlderThan"},
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless "
            "sendInitialEvents is provided",
        ),
        (
            {"sendInitialEvents": "true", "resourceVersionMatch": "Exact"},
            "[resourceVersionMatch: Forbidden: sendInitialEvents requires setting "
            "resourceVersionMatch to NotOlderThan, resourceVersionMatch: Unsupported value: "
            '"Exact": supported values: "NotOlderThan"]',
        ),
    ],
)
async def test_watch_option_validation(
    client: httpx.AsyncClient, params: dict[str, str], message: str
) -> None:
    r = await client.get(PODS, params={"watch": "true", **params})
    assert r.status_code == 422
    assert r.json()["message"] == f'ListOptions.meta.k8s.io "" is invalid: {message}'


async def test_label_change_out_of_selector_is_deleted(
    client: httpx.AsyncClient, open_watch: Any, pod: Callable[..., dict[str, Any]]
) -> None:
    created = (
        await client.post(
            PODS, json={**pod("sel"), "metadata": {"name": "sel", "labels": {"watch": "me"}}}
        )
    ).json()
    rv = created["metadata"]["resourceVersion"]
    async with open_watch(PODS, resourceVersion=rv, labelSelector="watch=me") as w:
        out = await client.patch(
            f"{PODS}/sel",
            json={"metadata": {"labels": {"watch": "no"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        event = await w.next()
        assert event["type"] == "DELETED"
        # the previous content, at the new resourceVersion
        assert event["object"]["metadata"]["labels"] == {"watch": "me"}
        assert (
            event["object"]["metadata"]["resourceVersion"]
            == (out.json()["metadata"]["resourceVersion"])
        )
        await client.patch(
            f"{PODS}/sel",
            json={"metadata": {"labels": {"watch": "me"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        back = await w.next()
        assert back["type"] == "ADDED"
        assert back["object"]["metadata"]["labels"] == {"watch": "me"}
        await client.patch(
            f"{PODS}/sel",
            json={"metadata": {"labels": {"other": "x"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert (await w.next())["type"] == "MODIFIED"


async def test_field_selector_watches_one_object(
    client: httpx.AsyncClient, open_watch: Any, pod: Callable[..., dict[str, Any]]
) -> None:
    await client.post(PODS, json=pod("one"))
    await client.post(PODS, json=pod("two"))
    async with open_watch(PODS, fieldSelector="metadata.name=two") as w:
        first = await w.next()
        assert first["object"]["metadata"]["name"] == "two"
        await client.patch(
            f"{PODS}/one",
            json={"metadata": {"labels": {"a": "b"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        await client.patch(
            f"{PODS}/two",
            json={"metadata": {"labels": {"a": "b"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        event = await w.next()
        assert (event["type"], event["object"]["metadata"]["name"]) == ("MODIFIED", "two")
    # the deprecated /watch/ path with a name does the same
    async with client.stream("GET", "/api/v1/watch/namespaces/demo/pods/two") as resp:
        w = WatchReader(resp)
        assert (await w.next())["object"]["metadata"]["name"] == "two"


async def test_namespace_scoping_of_all_namespace_watch(
    client: httpx.AsyncClient, open_watch: Any, pod: Callable[..., dict[str, Any]]
) -> None:
    rv = (await client.get("/api/v1/pods")).json()["metadata"]["resourceVersion"]
    async with (
        open_watch("/api/v1/pods", resourceVersion=rv) as everywhere,
        open_watch("/api/v1/namespaces/default/pods", resourceVersion=rv) as default_only,
    ):
        await client.post(PODS, json=pod("ns-demo"))
        await client.post(
            "/api/v1/namespaces/default/pods", json=pod("ns-default", namespace="default")
        )
        seen = [e["object"]["metadata"]["name"] for e in await everywhere.take(2)]
        assert seen == ["ns-demo", "ns-default"]
        only = await default_only.next()
        assert only["object"]["metadata"]["name"] == "ns-default"


async def test_in_process_writes_produce_the_same_events(
    demo: DemoUpstream,
    client: httpx.AsyncClient,
    open_watch: Any,
    pod: Callable[..., dict[str, Any]],
) -> None:
    rv = (await client.get(PODS)).json()["metadata"]["resourceVersion"]
    async with open_watch(PODS, resourceVersion=rv) as w:
        created = await demo.store.create("pods", pod("inproc"))
        await demo.store.patch(
            "pods", "inproc", {"metadata": {"labels": {"k": "v"}}}, namespace="demo"
        )
        await demo.store.delete("pods", "inproc", namespace="demo")
        events = await w.take(4)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
    assert events[0]["object"] == created


async def test_server_shutdown_ends_open_watches(pod: Callable[..., dict[str, Any]]) -> None:
    async with (
        DemoUpstream(seed=False) as demo,
        httpx.AsyncClient(base_url=demo.url, headers=ADMIN, timeout=10, verify=False) as c,
        c.stream(
            "GET", "/api/v1/namespaces/default/pods", params={"watch": "1", "resourceVersion": "0"}
        ) as resp,
    ):
        w = WatchReader(resp)
        await c.post("/api/v1/namespaces/default/pods", json=pod("x", namespace="default"))
        assert (await w.next())["type"] == "ADDED"
        await demo.stop()
        assert await w.rest() == []

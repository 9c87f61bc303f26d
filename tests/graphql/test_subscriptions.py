"""Subscriptions over graphql-transport-ws, legacy graphql-ws and SSE, with real clients:
watches that survive upstream closes and 410s, shared feeds, slow subscribers, log follow."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import orjson
import pytest

from gateway.core.upstream.budget import scope_of
from gateway.core.upstream.credentials import Credential
from gateway.graphql.resolvers.context import Context
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import ADMIN, ALICE, NAMESPACE, SSE, Gateway, unique, ws_client

WATCH = """subscription($ns: String, $labels: String, $rv: String, $initial: Boolean) {
  watchPods(namespace: $ns, labelSelector: $labels, resourceVersion: $rv,
            sendInitialEvents: $initial) {
    type resourceVersion object { metadata { name resourceVersion labels } }
  }
}"""


def _pod(name: str, label: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"suite": label, **labels}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def _event(payload: dict[str, Any]) -> tuple[str, str]:
    assert "errors" not in payload, payload
    event = payload["data"]["watchPods"]
    return event["type"], event["object"]["metadata"]["name"]


@pytest.mark.parametrize("protocol", ["graphql-transport-ws", "graphql-ws"])
async def test_watch_over_websocket(gateway: Gateway, demo: DemoUpstream, protocol: str) -> None:
    label = unique("ws")
    await demo.store.create("pods", _pod(f"{label}-a", label), namespace=NAMESPACE)
    async with ws_client(gateway, protocol) as ws:
        op = await ws.subscribe(WATCH, {"ns": NAMESPACE, "labels": f"suite={label}"})
        assert _event(await ws.next(op)) == ("ADDED", f"{label}-a")
        await demo.store.create("pods", _pod(f"{label}-b", label), namespace=NAMESPACE)
        assert _event(await ws.next(op)) == ("ADDED", f"{label}-b")
        await demo.store.patch(
            "pods", f"{label}-a", {"metadata": {"labels": {"x": "y"}}}, namespace=NAMESPACE
        )
        assert _event(await ws.next(op)) == ("MODIFIED", f"{label}-a")
        await demo.store.delete("pods", f"{label}-b", namespace=NAMESPACE, grace_period_seconds=0)
        event = _event(await ws.next(op))
        if event == ("MODIFIED", f"{label}-b"):  # graceful deletion: deletionTimestamp first
            event = _event(await ws.next(op))
        assert event == ("DELETED", f"{label}-b")
        # A query over the same connection answers once, then completes.
        q = await ws.subscribe(
            f'{{ pod(namespace: "demo", name: "{label}-a") {{ metadata {{ name }} }} }}'
        )
        assert (await ws.next(q))["data"]["pod"]["metadata"]["name"] == f"{label}-a"
        assert (await ws.recv())["type"] == "complete"
        await ws.send({"id": op, "type": "stop" if protocol == "graphql-ws" else "complete"})
        if protocol == "graphql-ws":
            assert (await ws.recv()) == {"id": op, "type": "complete"}


async def test_auth_token_payload_and_unauthenticated(gateway: Gateway) -> None:
    async with ws_client(gateway, payload={"authToken": ALICE}) as ws:
        op = await ws.subscribe("subscription { watchPods { type } }")
        payload = await ws.next(op)
        assert payload["errors"][0]["extensions"]["code"] == "FORBIDDEN"
        assert (await ws.recv())["type"] == "complete"
    async with ws_client(gateway, payload={}) as ws:
        op = await ws.subscribe("subscription { watchLeases { type } }")
        payload = await ws.next(op)
        assert payload["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
        assert "Authorization: Bearer <token>" in payload["errors"][0]["message"]


@pytest.mark.parametrize(
    "payload",
    [
        {"Authorization": f"Bearer {ALICE}"},
        {"authorization": f"Bearer {ALICE}"},
        {"headers": {"Authorization": f"Bearer {ALICE}"}},
        {"headers": {"authorization": f"Bearer {ALICE}"}},
        {"authToken": ALICE},
    ],
)
async def test_each_documented_connection_init_spelling_is_the_callers_identity(
    gateway: Gateway, payload: dict[str, Any]
) -> None:
    """Every ``connection_init`` payload spelling the README documents carries the token:
    alice is refused by name where she may not read (not as an anonymous caller)."""
    async with ws_client(gateway, payload=payload) as ws:
        op = await ws.subscribe("subscription { watchPods { type } }")
        error = (await ws.next(op))["errors"][0]
        assert error["extensions"]["code"] == "FORBIDDEN"
        assert "alice" in error["message"]


@contextlib.asynccontextmanager
async def _watch_over_sse(gateway: Gateway, label: str) -> AsyncIterator[httpx.Response]:
    """``WATCH`` of the suite's pods labelled ``label``, as a graphql-sse stream."""
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as client,
        client.stream(
            "POST",
            "/graphql",
            json={"query": WATCH, "variables": {"ns": NAMESPACE, "labels": f"suite={label}"}},
            headers={"Accept": "text/event-stream", "Authorization": f"Bearer {ADMIN}"},
        ) as response,
    ):
        yield response


async def test_heartbeats_while_a_watch_opens_do_not_cut_its_opening(
    gateway: Gateway, demo: DemoUpstream
) -> None:
    """The first subscriber of a watch waits for the upstream to answer; the heartbeats
    sent meanwhile must not cut that opening short (it goes on, and its events come)."""
    label = unique("sse-slow-open")
    await demo.store.create("pods", _pod(f"{label}-a", label), namespace=NAMESPACE)
    gateway.graphql.admission = replace(
        gateway.graphql.admission, limits=replace(gateway.graphql.limits, heartbeat_seconds=0.05)
    )
    demo.faults.hold(verb="list")
    try:
        async with _watch_over_sse(gateway, label) as response:
            sse = SSE(response)
            await demo.faults.wait_held()
            for _ in range(3):  # heartbeats while the upstream list is held
                await sse.heartbeat()
            demo.faults.release()
            name, payload = await sse.event()
            assert (name, _event(payload)) == ("next", ("ADDED", f"{label}-a"))
    finally:
        demo.faults.release()


async def test_watch_over_sse_with_heartbeat(gateway: Gateway, demo: DemoUpstream) -> None:
    label = unique("sse")
    await demo.store.create("pods", _pod(f"{label}-a", label), namespace=NAMESPACE)
    gateway.graphql.admission = replace(
        gateway.graphql.admission, limits=replace(gateway.graphql.limits, heartbeat_seconds=0.05)
    )
    async with _watch_over_sse(gateway, label) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        sse = SSE(response)
        name, payload = await sse.event()
        assert (name, _event(payload)) == ("next", ("ADDED", f"{label}-a"))
        await sse.heartbeat()  # idle: a comment line keeps the stream alive
        await demo.store.create("pods", _pod(f"{label}-b", label), namespace=NAMESPACE)
        name, payload = await sse.event()
        assert (name, _event(payload)) == ("next", ("ADDED", f"{label}-b"))
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        response = await client.get(
            "/graphql",
            params={
                "query": '{ pods(namespace: "demo", limit: 1) { items { metadata { name } } } }'
            },
            headers={"Accept": "text/event-stream", "Authorization": f"Bearer {ADMIN}"},
        )
        events = response.text.split("\n\n")
        assert events[0].startswith("event: next")
        assert events[1].startswith("event: complete")


@pytest.mark.parametrize("fault", ["close", "expire-event", "expire-http"])
async def test_watch_survives_upstream_close_and_410(
    gateway: Gateway, demo: DemoUpstream, fault: str
) -> None:
    """Every change is seen exactly once across cut streams or forced 410s (relist + diff)."""
    label = unique("heal")

    async def changes(ws: Any, op: str, count: int) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        while len(out) < count:
            kind, name = _event(await ws.next(op, timeout=20))
            if (kind, name) == ("MODIFIED", f"{label}-0"):
                continue  # graceful deletion sets deletionTimestamp before DELETED
            if kind not in ("RESYNC", "BOOKMARK"):
                out.append((kind, name))
        return out

    async with ws_client(gateway) as ws:
        op = await ws.subscribe(WATCH, {"ns": NAMESPACE, "labels": f"suite={label}"})
        await demo.store.create("pods", _pod(f"{label}-0", label), namespace=NAMESPACE)
        assert await changes(ws, op, 1) == [("ADDED", f"{label}-0")]
        # Every watch stream now ends early ("close": after one whole line and half of the
        # next); with "expire", the next two watch requests also get 410 Expired (as an
        # ERROR event or an HTTP 410) and the watcher relists.
        if fault == "close":
            demo.faults.close_watches_after(2, cut_last_line=True)
        else:
            demo.faults.close_watches_after(1)
        if fault != "close":
            demo.faults.expire_watches(2, mode="event" if fault == "expire-event" else "http")
        expected = []
        for i in range(1, 6):
            await demo.store.create("pods", _pod(f"{label}-{i}", label), namespace=NAMESPACE)
            expected.append(("ADDED", f"{label}-{i}"))
        await demo.store.delete("pods", f"{label}-0", namespace=NAMESPACE, grace_period_seconds=0)
        expected.append(("DELETED", f"{label}-0"))
        seen = await changes(ws, op, len(expected))
        if fault == "close":
            assert seen == expected  # resumed from the last RV: in order
        else:
            assert sorted(seen) == sorted(expected)  # relist + diff: DELETED for the gap
        demo.faults.reset()
        # Nothing is delivered twice: the next change is the next thing the client sees.
        await demo.store.create("pods", _pod(f"{label}-last", label), namespace=NAMESPACE)
        assert await changes(ws, op, 1) == [("ADDED", f"{label}-last")]


async def test_resume_from_resource_version(gateway: Gateway, demo: DemoUpstream) -> None:
    label = unique("resume")
    async with ws_client(gateway) as ws:
        op = await ws.subscribe(WATCH, {"ns": NAMESPACE, "labels": f"suite={label}"})
        await demo.store.create("pods", _pod(f"{label}-a", label), namespace=NAMESPACE)
        first = (await ws.next(op))["data"]["watchPods"]
        await ws.send({"id": op, "type": "complete"})
    await demo.store.create("pods", _pod(f"{label}-b", label), namespace=NAMESPACE)
    async with ws_client(gateway) as ws:
        op = await ws.subscribe(
            WATCH, {"ns": NAMESPACE, "labels": f"suite={label}", "rv": first["resourceVersion"]}
        )
        assert _event(await ws.next(op)) == ("ADDED", f"{label}-b")


async def test_subscribers_share_one_upstream_watch_per_credential(
    gateway: Gateway, demo: DemoUpstream
) -> None:
    label = unique("share")
    variables = {"ns": NAMESPACE, "labels": f"suite={label}"}
    await demo.store.create("pods", _pod(f"{label}-a", label), namespace=NAMESPACE)
    subscriptions = gateway.graphql.subscriptions
    async with ws_client(gateway) as one, ws_client(gateway) as two:
        a = await one.subscribe(WATCH, variables)
        assert _event(await one.next(a)) == ("ADDED", f"{label}-a")
        b = await two.subscribe(WATCH, variables)
        # The late joiner gets the current state, then live events.
        assert _event(await two.next(b)) == ("ADDED", f"{label}-a")
        await demo.store.create("pods", _pod(f"{label}-b", label), namespace=NAMESPACE)
        assert _event(await one.next(a)) == ("ADDED", f"{label}-b")
        assert _event(await two.next(b)) == ("ADDED", f"{label}-b")
        assert demo.faults.watch_requests == 1  # one upstream watch serves both
        mine = [k for k in subscriptions.executions if k[0] == scope_of(Credential(ADMIN))]
        assert len(mine) == 1  # one execution of the document per event for both
        async with ws_client(gateway, payload={"authToken": ALICE}) as three:
            c = await three.subscribe(WATCH, variables)
            assert _event(await three.next(c)) == ("ADDED", f"{label}-a")
            # another identity: its own execution, never shared
            assert len(subscriptions.executions) == 2


async def test_slow_subscriber_is_ended_with_a_resume_point(
    gateway: Gateway, demo: DemoUpstream
) -> None:
    label = unique("slow")
    variables = {"ns": NAMESPACE, "labels": f"suite={label}"}
    cluster = gateway.app.state.runtime.cluster
    cluster.watches.max_queue = 3  # the core hub's bound of each subscriber's queue
    subscriptions = gateway.graphql.subscriptions
    async with ws_client(gateway) as fast:
        op = await fast.subscribe(WATCH, variables)
        await demo.store.create("pods", _pod(f"{label}-0", label), namespace=NAMESPACE)
        assert _event(await fast.next(op)) == ("ADDED", f"{label}-0")
        execution = next(
            e for k, e in subscriptions.executions.items() if k[0] == scope_of(Credential(ADMIN))
        )
        # A second subscriber of the same execution: it takes its initial state, then stops.
        slow_sub = subscriptions.subscribe(
            execution.prepared,
            execution.variables,
            lambda: Context(cluster.adapter, Credential(ADMIN), cluster.watches),
        )
        assert slow_sub.execution is execution
        first = orjson.loads(await slow_sub.next())
        assert _event(first) == ("ADDED", f"{label}-0")
        taken = slow_sub.resume
        assert taken is not None
        for i in range(1, 7):
            await demo.store.create("pods", _pod(f"{label}-{i}", label), namespace=NAMESPACE)
            assert _event(await fast.next(op)) == ("ADDED", f"{label}-{i}")
        # The slow one was ended (its backlog dropped); the fast one never waited for it.
        assert slow_sub.done
        assert await slow_sub.next() is None
        assert slow_sub not in execution.subscribers
        final = orjson.loads(slow_sub.final or "null")
        extensions = final["errors"][0]["extensions"]
        assert extensions["code"] == "SLOW_SUBSCRIBER"
        assert extensions["resourceVersion"] == taken
        # Resuming from there loses nothing and repeats nothing.
        again = await fast.subscribe(WATCH, {**variables, "rv": taken})
        names = [_event(await fast.next(again)) for _ in range(6)]
        assert names == [("ADDED", f"{label}-{i}") for i in range(1, 7)]


async def test_max_subscriptions_per_connection(gateway: Gateway) -> None:
    gateway.graphql.admission = replace(
        gateway.graphql.admission, limits=replace(gateway.graphql.limits, max_subscriptions=2)
    )
    async with ws_client(gateway) as ws:
        for _ in range(2):
            await ws.subscribe("subscription { watchLeases(sendInitialEvents: false) { type } }")
        op = await ws.subscribe("subscription { watchLeases { type } }")
        message = await ws.recv()
        assert message["id"] == op
        assert message["type"] == "error"
        assert message["payload"][0]["extensions"]["code"] == "TOO_MANY_SUBSCRIPTIONS"


async def test_follow_pod_log(gateway: Gateway, demo: DemoUpstream) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        pods = (
            await client.post(
                "/graphql",
                json={
                    "query": '{ pods(namespace: "demo", fieldSelector: "status.phase=Running") '
                    "{ items { metadata { name } spec { containers { name } } } } }"
                },
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
        ).json()["data"]["pods"]["items"]
    pod = next(p for p in pods if len(p["spec"]["containers"]) == 1)
    name, container = pod["metadata"]["name"], pod["spec"]["containers"][0]["name"]
    query = """subscription($n: String!) {
      followPodLog(namespace: "demo", name: $n, tailLines: 1, timestamps: true) { text timestamp }
    }"""
    await demo.store.append_log(NAMESPACE, name, container, "start")
    async with ws_client(gateway) as ws:
        op = await ws.subscribe(query, {"n": name})
        # The last line is shown first: from then on the follow is connected upstream.
        assert (await ws.next(op))["data"]["followPodLog"]["text"] == "start"
        await demo.store.append_log(NAMESPACE, name, container, "hello", "wörld")
        first = (await ws.next(op))["data"]["followPodLog"]
        second = (await ws.next(op))["data"]["followPodLog"]
        assert (first["text"], second["text"]) == ("hello", "wörld")
        assert first["timestamp"].endswith("Z")
        await demo.store.terminate_container(NAMESPACE, name, container)
        assert (await ws.recv())["type"] == "complete"

"""``changedFieldsOnly`` on watch subscriptions (watch rule 31), with real clients over
WebSocket and SSE against the demo upstream.

"Receives nothing" is proved without waiting: after the unselected changes, a selected one
is made and must be the very next event the subscriber gets.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from kube_gateway_demo import DemoUpstream
from tests.graphql.test_http_subscriptions import MULTIPART_ACCEPT, parts
from tests.support.graphql import ADMIN, NAMESPACE, SSE, Gateway, unique, ws_client

CHANGED = """subscription($ns: String, $labels: String, $rv: String, $changed: Boolean) {
  watchPods(namespace: $ns, labelSelector: $labels, resourceVersion: $rv,
            changedFieldsOnly: $changed) {
    type resourceVersion object { metadata { name labels } status { phase } }
  }
}"""

#: Another selection on the same upstream watch: only the containers' images.
IMAGES = """subscription($ns: String, $labels: String) {
  watchPods(namespace: $ns, labelSelector: $labels, changedFieldsOnly: true) {
    type
    pod: object { metadata { name } ...images }
  }
}
fragment images on Pod { spec { containers { image } } }"""


def _pod(name: str, label: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"suite": label}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]},
    }


def _event(payload: dict[str, Any], key: str = "object") -> tuple[str, str, dict[str, Any]]:
    assert "errors" not in payload, payload
    event = payload["data"]["watchPods"]
    obj = event[key]
    return event["type"], obj["metadata"]["name"], obj


class _Pods:
    """Changes to the test's pods, through the demo upstream's store."""

    def __init__(self, demo: DemoUpstream) -> None:
        self.demo = demo

    async def create(self, name: str, label: str) -> None:
        await self.demo.store.create("pods", _pod(name, label), namespace=NAMESPACE)

    async def annotate(self, name: str, value: str) -> None:
        patch = {"metadata": {"annotations": {"note": value}}}
        await self.demo.store.patch("pods", name, patch, namespace=NAMESPACE)

    async def label(self, name: str, value: str) -> None:
        patch = {"metadata": {"labels": {"step": value}}}
        await self.demo.store.patch("pods", name, patch, namespace=NAMESPACE)

    async def image(self, name: str, image: str) -> None:
        patch = {"spec": {"containers": [{"name": "c", "image": image}]}}
        await self.demo.store.patch("pods", name, patch, namespace=NAMESPACE)

    async def phase(self, name: str, phase: str) -> None:
        patch = {"status": {"phase": phase}}
        await self.demo.store.patch("pods", name, patch, namespace=NAMESPACE, subresource="status")

    async def delete(self, name: str) -> None:
        await self.demo.store.delete("pods", name, namespace=NAMESPACE, grace_period_seconds=0)


async def test_only_selected_changes_arrive_and_each_one_does(
    gateway: Gateway, demo: DemoUpstream
) -> None:
    label = unique("changed")
    pods = _Pods(demo)
    await pods.create(f"{label}-a", label)
    variables = {"ns": NAMESPACE, "labels": f"suite={label}"}
    async with ws_client(gateway) as ws:
        changed = await ws.subscribe(CHANGED, {**variables, "changed": True})
        every = await ws.subscribe(CHANGED, variables)
        images = await ws.subscribe(IMAGES, variables)
        got: dict[str, list[dict[str, Any]]] = {changed: [], every: [], images: []}

        async def next_of(op: str) -> dict[str, Any]:
            while not got[op]:
                message = await ws.recv()
                assert message["type"] == "next", message
                got[message["id"]].append(message["payload"])
            return got[op].pop(0)

        for op in (changed, every):
            assert _event(await next_of(op))[:2] == ("ADDED", f"{label}-a")
        assert _event(await next_of(images), "pod")[:2] == ("ADDED", f"{label}-a")

        # Unselected by `changed`: an annotation and an image.  Without the flag both arrive.
        await pods.annotate(f"{label}-a", "one")
        await pods.image(f"{label}-a", "busybox:2")
        for _ in range(2):
            assert _event(await next_of(every))[0] == "MODIFIED"
        kind, _, pod = _event(await next_of(images), "pod")
        assert (kind, pod["spec"]["containers"][0]["image"]) == ("MODIFIED", "busybox:2")
        # Every change of a selected field, in order, none lost (also two in a row).
        await pods.label(f"{label}-a", "1")
        await pods.label(f"{label}-a", "2")
        await pods.annotate(f"{label}-a", "two")
        await pods.phase(f"{label}-a", "Running")
        for step in ("1", "2"):
            kind, _, obj = _event(await next_of(changed))
            assert (kind, obj["metadata"]["labels"]["step"]) == ("MODIFIED", step)
        kind, _, obj = _event(await next_of(changed))
        assert (kind, obj["status"]["phase"]) == ("MODIFIED", "Running")
        for _ in range(4):
            assert _event(await next_of(every))[0] == "MODIFIED"
        # ADDED and DELETED always go; nothing the image subscriber selects changed since.
        await pods.create(f"{label}-b", label)
        await pods.delete(f"{label}-a")
        seen = []
        for _ in range(2):
            kind, name, _ = _event(await next_of(changed))
            if (kind, name) == ("MODIFIED", f"{label}-a"):  # graceful deletion: the timestamp
                kind, name, _ = _event(await next_of(changed))
            seen.append((kind, name))
        assert seen == [("ADDED", f"{label}-b"), ("DELETED", f"{label}-a")]
        assert _event(await next_of(images), "pod")[:2] == ("ADDED", f"{label}-b")
        kind, name, _ = _event(await next_of(images), "pod")
        assert (kind, name) == ("DELETED", f"{label}-a")
        assert demo.faults.watch_requests == 1  # one upstream watch serves the three


async def test_a_late_joiner_of_the_shared_execution(gateway: Gateway, demo: DemoUpstream) -> None:
    """Two subscribers of one shared execution, the second joining after changes the first
    did not receive: both get exactly the selected changes after the join."""
    label = unique("joiner")
    pods = _Pods(demo)
    await pods.create(f"{label}-a", label)
    variables = {"ns": NAMESPACE, "labels": f"suite={label}", "changed": True}
    async with ws_client(gateway) as one, ws_client(gateway) as two:
        a = await one.subscribe(CHANGED, variables)
        assert _event(await one.next(a))[:2] == ("ADDED", f"{label}-a")
        await pods.annotate(f"{label}-a", "one")
        await pods.label(f"{label}-a", "1")
        kind, _, obj = _event(await one.next(a))
        assert (kind, obj["metadata"]["labels"]["step"]) == ("MODIFIED", "1")
        b = await two.subscribe(CHANGED, variables)
        kind, _, obj = _event(await two.next(b))
        assert (kind, obj["metadata"]["labels"]["step"]) == ("ADDED", "1")
        assert len(gateway.graphql.subscriptions.executions) == 1  # one execution for both
        await pods.annotate(f"{label}-a", "two")
        await pods.image(f"{label}-a", "busybox:2")
        await pods.label(f"{label}-a", "2")
        for ws, op in ((one, a), (two, b)):
            kind, _, obj = _event(await ws.next(op))
            assert (kind, obj["metadata"]["labels"]["step"]) == ("MODIFIED", "2")


async def test_a_relist_sends_only_what_changed_in_the_gap(
    gateway: Gateway, demo: DemoUpstream
) -> None:
    """After a 410 the relist's MODIFIED events are compared with what the subscriber last
    received: a selected change missed in the gap arrives, an unselected one does not."""
    label = unique("relist")
    pods = _Pods(demo)
    await pods.create(f"{label}-a", label)
    await pods.create(f"{label}-b", label)
    # The gateway's upstream watch stream ends after its second event line.
    demo.faults.close_watches_after(2)
    variables = {"ns": NAMESPACE, "labels": f"suite={label}", "changed": True}
    async with ws_client(gateway) as ws:
        op = await ws.subscribe(CHANGED, variables)
        names = sorted([_event(await ws.next(op))[1], _event(await ws.next(op))[1]])
        assert names == [f"{label}-a", f"{label}-b"]
        await pods.label(f"{label}-b", "0")  # the first line: the upstream watch is open
        kind, _, obj = _event(await ws.next(op))
        assert (kind, obj["metadata"]["labels"]["step"]) == ("MODIFIED", "0")
        demo.faults.hold(verb="watch")
        await pods.label(f"{label}-a", "1")  # that line, then the stream ends
        kind, _, obj = _event(await ws.next(op))
        assert (kind, obj["metadata"]["labels"]["step"]) == ("MODIFIED", "1")
        await demo.faults.wait_held(1)  # the watch is down: changes now are in the gap
        await pods.annotate(f"{label}-a", "gap")
        await pods.image(f"{label}-a", "busybox:2")
        await pods.label(f"{label}-b", "gap")
        demo.faults.watch_cut = None
        demo.faults.expire_watches(1)  # the resumed watch gets 410: relist and diff
        demo.faults.release()
        payload = await ws.next(op)
        assert payload["data"]["watchPods"]["type"] == "RESYNC"
        kind, name, obj = _event(await ws.next(op))
        assert (kind, name, obj["metadata"]["labels"]["step"]) == ("MODIFIED", f"{label}-b", "gap")
        payload = await ws.next(op)
        assert payload["data"]["watchPods"]["type"] == "RESYNC"
        await pods.label(f"{label}-a", "2")
        kind, name, obj = _event(await ws.next(op))
        assert (kind, name, obj["metadata"]["labels"]["step"]) == ("MODIFIED", f"{label}-a", "2")


@pytest.mark.parametrize("resume", [False, True])
async def test_over_sse_and_last_event_id(
    gateway: Gateway, demo: DemoUpstream, resume: bool
) -> None:
    """Over SSE, and after a reconnect with ``Last-Event-ID``: the replay leaves out the
    unselected changes made while the client was away."""
    label = unique("sse-changed")
    pods = _Pods(demo)
    await pods.create(f"{label}-a", label)
    body = {
        "query": CHANGED,
        "variables": {"ns": NAMESPACE, "labels": f"suite={label}", "changed": True},
    }
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        async with client.stream("POST", "/graphql", json=body, headers=headers) as response:
            sse = SSE(response)
            name, payload = await sse.event()
            assert (name, _event(payload)[:2]) == ("next", ("ADDED", f"{label}-a"))
            await pods.annotate(f"{label}-a", "one")
            await pods.label(f"{label}-a", "1")
            name, payload = await sse.event()
            kind, _, obj = _event(payload)
            assert (kind, obj["metadata"]["labels"]["step"]) == ("MODIFIED", "1")
            last = payload["data"]["watchPods"]["resourceVersion"]
            if not resume:
                await pods.image(f"{label}-a", "busybox:2")
                await pods.label(f"{label}-a", "2")
                name, payload = await sse.event()
                kind, _, obj = _event(payload)
                assert (kind, obj["metadata"]["labels"]["step"]) == ("MODIFIED", "2")
                return
        # Away: unselected changes, then a selected one, then unselected again.
        await pods.annotate(f"{label}-a", "two")
        await pods.image(f"{label}-a", "busybox:2")
        await pods.label(f"{label}-a", "2")
        await pods.annotate(f"{label}-a", "three")
        again = {**headers, "Last-Event-ID": last}
        async with client.stream("POST", "/graphql", json=body, headers=again) as response:
            sse = SSE(response)
            name, payload = await sse.event()
            kind, _, obj = _event(payload)
            assert (name, kind, obj["metadata"]["labels"]["step"]) == ("next", "MODIFIED", "2")
            await pods.phase(f"{label}-a", "Running")
            name, payload = await sse.event()
            kind, _, obj = _event(payload)
            assert (kind, obj["status"]["phase"]) == ("MODIFIED", "Running")


async def test_over_multipart(gateway: Gateway, demo: DemoUpstream) -> None:
    label = unique("multipart-changed")
    pods = _Pods(demo)
    await pods.create(f"{label}-a", label)
    body = {
        "query": CHANGED,
        "variables": {"ns": NAMESPACE, "labels": f"suite={label}", "changed": True},
    }
    headers = {"Accept": MULTIPART_ACCEPT, "Authorization": f"Bearer {ADMIN}"}
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as client,
        client.stream("POST", "/graphql", json=body, headers=headers) as response,
    ):
        reader = parts(response)
        part = await anext(reader)
        assert part is not None
        assert _event(part["payload"])[:2] == ("ADDED", f"{label}-a")
        await pods.annotate(f"{label}-a", "one")
        await pods.image(f"{label}-a", "busybox:2")
        await pods.label(f"{label}-a", "1")
        part = await anext(reader)
        assert part is not None
        kind, _, obj = _event(part["payload"])
        assert (kind, obj["metadata"]["labels"]["step"]) == ("MODIFIED", "1")

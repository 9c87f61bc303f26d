"""Subscriptions over plain HTTP, byte for byte: graphql-sse events with ``id:`` and
``Last-Event-ID`` resumes (watch rule 23), request errors inside the stream, and Apollo's
multipart subscriptions.  The npm clients themselves are driven in
``test_http_subscription_clients.py``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx
import orjson

from kube_gateway_demo import DemoUpstream
from tests.support.graphql import ADMIN, ALICE, NAMESPACE, SSE, Gateway, serve_gateway, unique

WATCH = """subscription($ns: String, $labels: String) {
  watchPods(namespace: $ns, labelSelector: $labels) {
    type resourceVersion object { metadata { name } }
  }
}"""


def pod(name: str, label: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"suite": label}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def change(payload: dict[str, Any]) -> tuple[str, str]:
    assert "errors" not in payload, payload
    event = payload["data"]["watchPods"]
    return event["type"], event["object"]["metadata"]["name"]


class IdSSE(SSE):
    """An SSE reader that also keeps each event's ``id:`` (what ``EventSource`` keeps)."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response)
        self.last_id: str | None = None
        self.ids: list[str | None] = []

    async def next_event(self) -> tuple[str, Any, str | None]:
        name, lines, event_id = "", [], None
        while True:
            line = await anext(self._lines)
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "id":
                event_id = self.last_id = value
            elif field == "event":
                name = value
            elif field == "data":
                lines.append(value)
            elif line == "" and name:
                self.ids.append(event_id)
                raw = "\n".join(lines)
                return name, orjson.loads(raw) if raw else None, event_id


@contextlib.asynccontextmanager
async def sse_watch(
    gateway: Gateway, label: str, last_event_id: str | None = None
) -> AsyncIterator[IdSSE]:
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {ADMIN}"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    params = {
        "query": WATCH,
        "variables": orjson.dumps({"ns": NAMESPACE, "labels": f"suite={label}"}).decode(),
    }
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as client,
        client.stream("GET", "/graphql", params=params, headers=headers) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        yield IdSSE(response)


async def changes(sse: IdSSE, count: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    while len(out) < count:
        name, payload, _ = await sse.next_event()
        assert name == "next", (name, payload)
        out.append(change(payload))
    return out


async def test_sse_events_carry_their_resume_point_and_last_event_id_resumes(
    gateway: Gateway, demo: DemoUpstream
) -> None:
    label = unique("sse-id")
    await demo.store.create("pods", pod(f"{label}-a", label), namespace=NAMESPACE)
    async with sse_watch(gateway, label) as sse:
        assert await changes(sse, 1) == [("ADDED", f"{label}-a")]
        snapshot_id = sse.last_id
        assert snapshot_id is not None  # the snapshot is whole: its version is the id
        created = await demo.store.create("pods", pod(f"{label}-b", label), namespace=NAMESPACE)
        assert await changes(sse, 1) == [("ADDED", f"{label}-b")]
        assert sse.last_id == created["metadata"]["resourceVersion"]
    # Disconnected: two changes happen; the reconnect with Last-Event-ID gets exactly them.
    await demo.store.create("pods", pod(f"{label}-c", label), namespace=NAMESPACE)
    await demo.store.patch(
        "pods", f"{label}-a", {"metadata": {"labels": {"x": "y"}}}, namespace=NAMESPACE
    )
    async with sse_watch(gateway, label, sse.last_id) as again:
        assert await changes(again, 2) == [("ADDED", f"{label}-c"), ("MODIFIED", f"{label}-a")]
        await demo.store.create("pods", pod(f"{label}-d", label), namespace=NAMESPACE)
        assert await changes(again, 1) == [("ADDED", f"{label}-d")]
        assert all(i is not None for i in again.ids)


async def test_last_event_id_across_a_gateway_restart_and_expired(demo: DemoUpstream) -> None:
    """A new gateway (empty hub) resumes from the id the old one gave; once the upstream
    compacted that version away, the resume is a RESYNC frame of the whole state."""
    label = unique("sse-restart")
    await demo.store.create("pods", pod(f"{label}-a", label), namespace=NAMESPACE)
    async with serve_gateway(demo) as gateway, sse_watch(gateway, label) as sse:
        assert await changes(sse, 1) == [("ADDED", f"{label}-a")]
        last = sse.last_id
    assert last is not None
    await demo.store.create("pods", pod(f"{label}-b", label), namespace=NAMESPACE)
    await demo.store.delete("pods", f"{label}-a", namespace=NAMESPACE, grace_period_seconds=0)
    async with serve_gateway(demo) as gateway, sse_watch(gateway, label, last) as sse:
        seen = [c for c in await changes(sse, 2) if c != ("MODIFIED", f"{label}-a")]
        if len(seen) < 2:  # graceful deletion: deletionTimestamp before DELETED
            seen += await changes(sse, 1)
        assert seen == [("ADDED", f"{label}-b"), ("DELETED", f"{label}-a")]
        final = sse.last_id
    assert final is not None
    # A third gateway, once the upstream compacted `last` away: the whole state in a RESYNC
    # frame (its events carry an id only once it is whole).
    demo.faults.compact()
    async with serve_gateway(demo) as gateway, sse_watch(gateway, label, last) as sse:
        frame = [await sse.next_event() for _ in range(3)]
    assert [change(p) for _, p, _ in frame][1] == ("ADDED", f"{label}-b")
    assert [change(p)[0] for _, p, _ in frame] == ["RESYNC", "ADDED", "RESYNC"]
    assert [i for _, _, i in frame][:2] == [None, None]
    assert frame[2][2] is not None


async def test_sse_request_errors_are_next_events(gateway: Gateway) -> None:
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        for params in (
            {"query": "subscription { watchPods { nope } }"},
            {"query": "subscription {"},
            {"query": WATCH, "variables": '{"ns": 1}'},
        ):
            response = await client.get("/graphql", params=params, headers=headers)
            assert response.status_code == 200, response.text
            events = [e for e in response.text.split("\n\n") if not e.startswith(":")]
            assert events[0].startswith('event: next\ndata: {"errors":'), events
            assert events[1] == "event: complete\ndata: "
        response = await client.get(
            "/graphql", params={"query": WATCH}, headers={**headers, "Last-Event-ID": "a b"}
        )
        assert '"code":"BAD_REQUEST"' in response.text and "Last-Event-ID" in response.text


MULTIPART_ACCEPT = 'multipart/mixed;subscriptionSpec="1.0", application/json'


async def parts(response: httpx.Response) -> AsyncIterator[dict[str, Any] | None]:
    """The JSON parts of a multipart body (``None`` for the closing boundary)."""
    buffer = b""
    async for chunk in response.aiter_bytes():
        buffer += chunk
        while True:
            head, sep, rest = buffer.partition(b"\r\n--graphql")
            if not sep:
                break
            if head.strip():
                headers, _, body = head.partition(b"\r\n\r\n")
                assert headers.strip().lower() == b"content-type: application/json", headers
                yield orjson.loads(body)
            buffer = rest
            if buffer.startswith(b"--"):
                yield None
                return


async def test_multipart_subscription(gateway: Gateway, demo: DemoUpstream) -> None:
    label = unique("multipart")
    await demo.store.create("pods", pod(f"{label}-a", label), namespace=NAMESPACE)
    gateway.graphql.admission = replace(
        gateway.graphql.admission, limits=replace(gateway.graphql.limits, heartbeat_seconds=0.05)
    )
    body = {"query": WATCH, "variables": {"ns": NAMESPACE, "labels": f"suite={label}"}}
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as client,
        client.stream(
            "POST",
            "/graphql",
            json=body,
            headers={"Accept": MULTIPART_ACCEPT, "Authorization": f"Bearer {ADMIN}"},
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"] == (
            'multipart/mixed; boundary="graphql"; subscriptionSpec=1.0'
        )
        reader = parts(response)
        assert change((await anext(reader))["payload"]) == ("ADDED", f"{label}-a")  # type: ignore[index]
        assert await anext(reader) == {}  # idle: a heartbeat
        await demo.store.create("pods", pod(f"{label}-b", label), namespace=NAMESPACE)
        part = await anext(reader)
        while part == {}:
            part = await anext(reader)
        assert change(part["payload"]) == ("ADDED", f"{label}-b")  # type: ignore[index]

    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        # The source stream fails (the upstream refuses the watch): a transport-level error,
        # no payload, then the end.
        response = await client.post(
            "/graphql",
            json={"query": WATCH},  # every namespace: more than alice may watch
            headers={"Accept": MULTIPART_ACCEPT, "Authorization": f"Bearer {ALICE}"},
        )
        assert response.status_code == 200
        got = [p async for p in parts(response)]
        assert got[-1] is None and len(got) == 2, got
        assert got[0] is not None and got[0]["payload"] is None, got
        assert got[0]["errors"][0]["extensions"]["code"] == "FORBIDDEN"
        # Variables that do not coerce: GraphQL errors in a payload, then the end.
        response = await client.post(
            "/graphql",
            json={"query": WATCH, "variables": {"ns": 1}},
            headers={"Accept": MULTIPART_ACCEPT, "Authorization": f"Bearer {ADMIN}"},
        )
        got = [p async for p in parts(response)]
        assert got[-1] is None and len(got) == 2, got
        assert got[0] is not None and "data" not in got[0]["payload"], got
        assert got[0]["payload"]["errors"][0]["message"].startswith("String cannot represent")
        # A document that does not validate: an ordinary GraphQL-over-HTTP answer.
        response = await client.post(
            "/graphql",
            json={"query": "subscription { watchPods { nope } }"},
            headers={"Accept": MULTIPART_ACCEPT, "Authorization": f"Bearer {ADMIN}"},
        )
        assert response.status_code == 200  # application/json only: the legacy 200
        assert response.json()["errors"][0]["message"].startswith("Cannot query field")
        # A query with the multipart Accept is plain JSON.
        response = await client.post(
            "/graphql",
            json={"query": "{ __typename }"},
            headers={"Accept": MULTIPART_ACCEPT, "Authorization": f"Bearer {ADMIN}"},
        )
        assert response.json() == {"data": {"__typename": "Query"}}

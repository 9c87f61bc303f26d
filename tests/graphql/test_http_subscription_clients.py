"""Subscriptions over plain HTTP with the clients front ends use: meros reading Apollo's
multipart subscriptions, graphql-sse's client, and a browser ``EventSource`` (Debian's
headless Chromium).  The SSE clients resume by ``Last-Event-ID`` across a gateway restart:
the demo upstream keeps running while the gateway is away, and every change made then
arrives exactly once from the next gateway.

The npm clients are the pinned packages of ``tests/graphql-http`` (``make audit-deps``),
run as small scripts that print one JSON line per thing they receive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import orjson

from kube_gateway_demo import DemoUpstream
from tests.graphql.test_http_subscriptions import WATCH, change, pod
from tests.support.chromium import chromium
from tests.support.graphql import ADMIN, ALICE, NAMESPACE, Gateway, serve_gateway, unique

CLIENTS = Path(__file__).resolve().parents[1] / "graphql-http"


def watch_request(label: str) -> str:
    return json.dumps({"query": WATCH, "variables": {"ns": NAMESPACE, "labels": f"suite={label}"}})


class Node:
    """One node script of tests/graphql-http, read line by line."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        raw = await self.proc.stdout.readline()
        if not raw:
            assert self.proc.stderr is not None
            error = (await self.proc.stderr.read()).decode()
            raise AssertionError(f"the client ended: {error}")
        value: dict[str, Any] = orjson.loads(raw)
        return value


@contextlib.asynccontextmanager
async def node(script: str, *args: str) -> AsyncIterator[Node]:
    executable = shutil.which("node")
    assert executable is not None, "Node.js is needed for the client tests"
    for package in ("meros", "graphql-sse"):
        assert (CLIENTS / "node_modules" / package).is_dir(), "run `make audit-deps`"
    proc = await asyncio.create_subprocess_exec(
        executable,
        str(CLIENTS / script),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=CLIENTS,
    )
    try:
        yield Node(proc)
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def test_meros_reads_live_watch_events(gateway: Gateway, demo: DemoUpstream) -> None:
    label = unique("meros")
    await demo.store.create("pods", pod(f"{label}-a", label), namespace=NAMESPACE)
    gateway.graphql.admission = replace(
        gateway.graphql.admission, limits=replace(gateway.graphql.limits, heartbeat_seconds=0.05)
    )
    url = f"{gateway.url}/graphql"
    async with node("multipart.mjs", url, ADMIN, watch_request(label), "2") as client:
        assert await client.line() == {
            "status": 200,
            "type": 'multipart/mixed; boundary="graphql"; subscriptionSpec=1.0',
        }
        first = await client.line()
        assert first["json"] is True
        assert change(first["part"]["payload"]) == ("ADDED", f"{label}-a")
        heartbeat = await client.line()  # idle: an empty part, which clients ignore
        assert heartbeat == {"part": {}, "json": True}
        await demo.store.create("pods", pod(f"{label}-b", label), namespace=NAMESPACE)
        part = await client.line()
        while part["part"] == {}:
            part = await client.line()
        assert change(part["part"]["payload"]) == ("ADDED", f"{label}-b")
        assert await client.proc.wait() == 0
    # A subscription the upstream refuses: a transport-level error, then the final boundary.
    async with node("multipart.mjs", url, ALICE, json.dumps({"query": WATCH}), "9") as client:
        assert (await client.line())["status"] == 200
        error = (await client.line())["part"]
        assert error["payload"] is None
        assert error["errors"][0]["extensions"]["code"] == "FORBIDDEN"
        assert await client.line() == {"end": True}


async def sse_changes(client: Node, count: int, deleted: str = "") -> list[tuple[str, str]]:
    """The next ``count`` changes a graphql-sse client printed (a graceful deletion's
    MODIFIED of ``deleted`` skipped)."""
    out: list[tuple[str, str]] = []
    while len(out) < count:
        line = await client.line()
        assert "next" in line, line
        event = change(line["next"])
        if event != ("MODIFIED", deleted):
            out.append(event)
    return out


async def test_graphql_sse_client_resumes_across_a_gateway_restart(demo: DemoUpstream) -> None:
    label = unique("gsse")
    await demo.store.create("pods", pod(f"{label}-a", label), namespace=NAMESPACE)
    async with serve_gateway(demo) as gateway:
        url = f"{gateway.url}/graphql"
        async with node("sse.mjs", url, ADMIN, watch_request(label)) as client:
            assert await sse_changes(client, 1) == [("ADDED", f"{label}-a")]
            created = await demo.store.create("pods", pod(f"{label}-b", label), namespace=NAMESPACE)
            assert await sse_changes(client, 1) == [("ADDED", f"{label}-b")]
        # A query through the same client: one result, then complete.
        query = json.dumps({"query": "{ __typename }"})
        async with node("sse.mjs", url, ADMIN, query) as client:
            assert await client.line() == {"next": {"data": {"__typename": "Query"}}}
            assert await client.line() == {"complete": True}
    # The gateway is gone; the upstream changes.
    last = created["metadata"]["resourceVersion"]  # the id of the last event received
    await demo.store.create("pods", pod(f"{label}-c", label), namespace=NAMESPACE)
    await demo.store.patch(
        "pods", f"{label}-a", {"metadata": {"labels": {"x": "y"}}}, namespace=NAMESPACE
    )
    await demo.store.delete("pods", f"{label}-b", namespace=NAMESPACE, grace_period_seconds=0)
    async with (
        serve_gateway(demo) as gateway,
        node("sse.mjs", f"{gateway.url}/graphql", ADMIN, watch_request(label), last) as client,
    ):
        assert await sse_changes(client, 3, deleted=f"{label}-b") == [
            ("ADDED", f"{label}-c"),
            ("MODIFIED", f"{label}-a"),
            ("DELETED", f"{label}-b"),
        ]
        await demo.store.create("pods", pod(f"{label}-d", label), namespace=NAMESPACE)
        assert await sse_changes(client, 1) == [("ADDED", f"{label}-d")]


# The page's EventSource: every `next` event into `window.seen` ([lastEventId, data]); the
# browser reconnects by itself (with Last-Event-ID) whenever the stream breaks.
OPEN = """(() => {
  window.seen = [];
  window.opened = 0;
  const source = new EventSource(%s);
  source.addEventListener('open', () => { window.opened += 1; });
  source.addEventListener('next', (e) => { window.seen.push([e.lastEventId, e.data]); });
  window.source = source;
  return true;
})()"""

WAIT_FOR = """new Promise((resolve) => {
  const tick = () => {
    if (window.seen.length >= %d) resolve(window.seen); else setTimeout(tick, 20);
  };
  tick();
})"""


async def test_browser_event_source_resumes_across_a_gateway_restart(
    demo: DemoUpstream, tmp_path: Path
) -> None:
    label = unique("es")
    await demo.store.create("pods", pod(f"{label}-a", label), namespace=NAMESPACE)
    variables = json.dumps({"ns": NAMESPACE, "labels": f"suite={label}"})
    path = "/graphql?" + urlencode({"query": WATCH, "variables": variables})
    async with chromium(tmp_path / "profile") as page:
        # EventSource cannot set headers: the browser adds the credential to every request
        # (as an authenticating proxy in front of the gateway would).
        await page.call("Network.enable")
        await page.call("Network.setExtraHTTPHeaders", headers={"Authorization": f"Bearer {ADMIN}"})
        async with serve_gateway(demo) as gateway:
            port = urlsplit(gateway.url).port
            assert port is not None
            await page.call("Page.navigate", url=f"{gateway.url}/healthz")  # same origin
            assert await page.evaluate(OPEN % json.dumps(path)) is True
            seen = await page.evaluate(WAIT_FOR % 1)
            assert change(orjson.loads(seen[0][1])) == ("ADDED", f"{label}-a")
            created = await demo.store.create("pods", pod(f"{label}-b", label), namespace=NAMESPACE)
            seen = await page.evaluate(WAIT_FOR % 2)
            assert change(orjson.loads(seen[1][1])) == ("ADDED", f"{label}-b")
            assert seen[1][0] == created["metadata"]["resourceVersion"]  # the event's id
        # The gateway is gone (the browser keeps trying); the upstream changes meanwhile.
        await demo.store.create("pods", pod(f"{label}-c", label), namespace=NAMESPACE)
        await demo.store.patch(
            "pods", f"{label}-a", {"metadata": {"labels": {"x": "y"}}}, namespace=NAMESPACE
        )
        await demo.store.delete("pods", f"{label}-b", namespace=NAMESPACE, grace_period_seconds=0)
        async with serve_gateway(demo, port=port):
            # (a graceful deletion's MODIFIED of b before its DELETED is skipped)
            seen, changes = [], []
            while len(changes) < 5:
                seen = await page.evaluate(WAIT_FOR % (len(seen) + 1))
                changes = [change(orjson.loads(data)) for _, data in seen]
                changes = [c for c in changes if c != ("MODIFIED", f"{label}-b")]
            opened = await page.evaluate("window.opened")
            await page.evaluate("window.source.close(), true")
    assert changes == [
        ("ADDED", f"{label}-a"),
        ("ADDED", f"{label}-b"),
        ("ADDED", f"{label}-c"),
        ("MODIFIED", f"{label}-a"),
        ("DELETED", f"{label}-b"),
    ]
    assert opened == 2  # one reconnect, with Last-Event-ID: no snapshot again
    assert all(event_id for event_id, _ in seen)

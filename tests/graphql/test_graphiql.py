"""GraphiQL loads in headless Chromium (Debian's ``chromium``), offline, and runs a query
and, in demo mode, a subscription.

Chromium is driven over the DevTools protocol (tests/support/chromium.py): open the page,
click GraphiQL's run button, wait in the page for the result,
take a screenshot and check the result text.  Every request the page makes must go to the
gateway itself: GraphiQL's assets are served locally, not from a CDN.  In demo mode the page
opens with the demo token in its Headers pane and example tabs; the example subscription
runs over the gateway's WebSocket and shows a change made through the API while it runs.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from websockets.asyncio.client import connect

from gateway.settings import Settings
from kube_gateway_demo import ADMIN_TOKEN, DemoUpstream
from tests.gateway.test_fleet import serves, until
from tests.support.chromium import DevTools, chromium
from tests.support.graphql import (
    ADMIN,
    Gateway,
    TransportWS,
    data,
    gql,
    serve_app,
    serve_gateway,
    unique,
)

WAIT_AND_RUN = """new Promise((resolve, reject) => {
  const deadline = Date.now() + 30000;
  const tick = () => {
    const button = document.querySelector('.graphiql-execute-button');
    if (button) { button.click(); resolve(true); }
    else if (Date.now() > deadline) reject(new Error('GraphiQL did not render'));
    else setTimeout(tick, 50);
  };
  tick();
})"""

# A click that lands while GraphiQL is still setting up its editors is dropped (seen on a
# loaded machine): run again, at most once a second, until the result shows.  Running the
# same query twice gives the same result.
WAIT_FOR_RESULT = """new Promise((resolve, reject) => {
  const deadline = Date.now() + 30000;
  let clicked = Date.now();
  const tick = () => {
    const out = document.querySelector('.result-window');
    const text = out ? out.innerText : '';
    if (text.includes(%s)) { resolve(text); return; }
    if (Date.now() > deadline) { reject(new Error('no result: ' + text)); return; }
    const button = document.querySelector('.graphiql-execute-button');
    if (button && Date.now() - clicked > 1000) { button.click(); clicked = Date.now(); }
    setTimeout(tick, 50);
  };
  tick();
})"""


async def test_graphiql_runs_a_query_offline(tmp_path: Path) -> None:
    async with DemoUpstream() as demo, serve_gateway(demo) as gateway:
        pods = await demo.store.list("pods", namespace="demo")
        expected = pods[0]["metadata"]["name"]
        query = '{ pods(namespace: "demo") { items { metadata { name } } } }'
        url = f"{gateway.url}/graphql?" + urlencode(
            {"query": query, "headers": json.dumps({"Authorization": f"Bearer {ADMIN}"})}
        )
        async with chromium(tmp_path / "profile") as page:
            await page.call("Network.enable")
            await page.call("Page.enable")
            await page.call("Page.navigate", url=url)
            assert await page.evaluate(WAIT_AND_RUN) is True
            text = await page.evaluate(WAIT_FOR_RESULT % json.dumps(expected))
            shot = await page.call("Page.captureScreenshot", format="png")
            png = base64.b64decode(shot["data"])
            (tmp_path / "graphiql.png").write_bytes(png)
            requested = [
                e["params"]["request"]["url"]
                for e in page.events
                if e.get("method") == "Network.requestWillBeSent"
            ]
    assert expected in text
    assert '"pods"' in text
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert requested, "the page made no requests"
    external = [u for u in requested if not u.startswith((gateway.url, "data:", "blob:"))]
    assert not external, external
    assert any(u.endswith("/graphql/static/graphiql.min.js") for u in requested)


@contextlib.asynccontextmanager
async def serve_demo_mode() -> AsyncIterator[str]:
    """The gateway serving its own (animated) demo upstream, as ``--demo`` does; yields its
    base URL."""
    settings = Settings(host="127.0.0.1", http_port=0, grpc_port=0, demo=True, log_level="warning")
    async with serve_app(settings) as (url, app):
        # Discovery's kinds are in the schema once its first build (in the background) is in.
        runtime = app.state.runtime
        await runtime.live_schema.wait_ready()
        yield url


async def test_graphiql_settings_hold_no_token_outside_demo_mode(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    settings = await client.get("/graphql/graphiql.json", headers={"Authorization": ""})
    assert settings.status_code == 200
    assert settings.json() == {}
    assert settings.headers["cache-control"] == "no-store"
    assert settings.headers["x-content-type-options"] == "nosniff"
    html = await client.get("/graphql", headers={"Accept": "text/html", "Authorization": ""})
    assert html.status_code == 200
    assert "token" not in html.text.lower() and "bearer" not in html.text.lower()
    assert '"/graphql/graphiql.json"' in html.text
    policy = dict(
        d.strip().split(" ", 1) for d in html.headers["content-security-policy"].split(";")
    )
    assert policy["connect-src"] == "'self'"


async def test_demo_mode_examples_run_with_the_demo_token() -> None:
    async with serve_demo_mode() as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        settings = (await client.get("/graphql/graphiql.json")).json()
        headers = json.loads(settings["headers"])
        assert headers == {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        query, subscription, mutation, live_view, relations = settings["tabs"]
        assert all(json.loads(tab["headers"]) == headers for tab in settings["tabs"])
        token = headers["Authorization"].removeprefix("Bearer ")

        pods = data(await gql(client, query["query"], token=token))["pods"]["items"]
        assert "web-6d4b9c7f5-x7k2p" in [p["metadata"]["name"] for p in pods]

        across = data(await gql(client, relations["query"], token=token))
        (web,) = [d for d in across["deployments"]["items"] if d["metadata"]["name"] == "web"]
        assert web["replicaSets"][0]["pods"][0]["node"]["metadata"]["name"]
        group = "/apis/demo.kube-gateway.dev/graphql"
        at_group = (await client.get(f"{group}/graphiql.json")).json()
        widgets_tab = at_group["tabs"][-1]
        widgets = data(await gql(client, widgets_tab["query"], token=token, path=group))
        assert {w["metadata"]["name"] for w in widgets["widgets"]["items"]} == {
            "blue-widget",
            "red-widget",
        }

        variables = json.loads(mutation["variables"])
        patched = data(await gql(client, mutation["query"], variables, token=token))
        assert patched["patchPod"]["metadata"]["labels"]["tried"] == "graphiql"

        # GraphiQL's fetcher sends the Headers pane as the connection_init payload.
        ws_url = url.replace("http://", "ws://") + "/graphql"
        async with connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
            socket = TransportWS(ws)
            await socket.send({"type": "connection_init", "payload": headers})
            assert (await socket.recv())["type"] == "connection_ack"
            op = await socket.subscribe(subscription["query"])
            event = (await socket.next(op))["data"]["watchPods"]
            assert event["type"] == "ADDED"
            assert event["object"]["metadata"]["name"]
        # the live view: the web pods at once, then the mutation's label
        async with connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
            socket = TransportWS(ws)
            await socket.send({"type": "connection_init", "payload": headers})
            assert (await socket.recv())["type"] == "connection_ack"
            live = await socket.subscribe(live_view["query"])
            page = (await socket.next(live))["data"]["podsView"]
            names = [n["metadata"]["name"] for n in page["nodes"]]
            assert names == ["web-6d4b9c7f5-m9q4z", "web-6d4b9c7f5-x7k2p"]
            assert page["total"] == 2 and page["nodes"][1]["metadata"]["labels"]["tried"]
            variables = {"patch": {"metadata": {"labels": {"tried": "live"}}}}
            patched = data(await gql(client, mutation["query"], variables, token=token))
            update = (await socket.next(live))["data"]["podsView"]
            assert update["nodes"][1]["metadata"]["labels"]["tried"] == "live"
            version = patched["patchPod"]["metadata"]["resourceVersion"]
            assert update["resourceVersion"] == version


async def test_the_fleet_endpoint_tabs_run_on_every_cluster() -> None:
    settings = Settings(
        host="127.0.0.1", http_port=0, grpc_port=0, demo=True, demo_clusters=2, log_level="warning"
    )
    async with serve_app(settings) as (url, app), httpx.AsyncClient(base_url=url) as client:
        await until(app.state.runtime.fleet, serves("demo-2"))
        fleet = "/fleet/graphql"
        tabs = (await client.get(f"{fleet}/graphiql.json")).json()["tabs"]
        query, watch = tabs
        headers = json.loads(query["headers"])
        token = headers["Authorization"].removeprefix("Bearer ")
        members = data(await gql(client, query["query"], token=token, path=fleet))["fleet"]
        assert [m["cluster"] for m in members] == ["default", "demo-2"]
        assert all(m["pods"]["items"] and m["error"] is None for m in members)
        ws_url = url.replace("http://", "ws://") + fleet
        async with connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
            socket = TransportWS(ws)
            await socket.send({"type": "connection_init", "payload": headers})
            assert (await socket.recv())["type"] == "connection_ack"
            op = await socket.subscribe(watch["query"])
            clusters = set()
            while clusters != {"default", "demo-2"}:
                event = (await socket.next(op))["data"]["watchPods"]
                assert event["type"] == "ADDED"
                clusters.add(event["cluster"])


async def wait_until(page: DevTools, condition: str, what: str) -> Any:
    """Poll ``condition`` (a JavaScript expression) in the page until it is truthy; returns
    its value.  A bounded wait, failing with ``what`` and the page's last value."""
    return await page.evaluate(
        """new Promise((resolve, reject) => {
  const deadline = Date.now() + 30000;
  const tick = () => {
    let value = null;
    try { value = (CONDITION); } catch (e) { value = null; }
    if (value) { resolve(value); return; }
    if (Date.now() > deadline) { reject(new Error('timed out waiting for ' + WHAT)); return; }
    setTimeout(tick, 50);
  };
  tick();
})""".replace("CONDITION", condition).replace("WHAT", json.dumps(what))
    )


HEADERS_PANE = (
    'document.querySelector(\'section.graphiql-editor-tool[aria-label="Headers"] '
    ".graphiql-editor:not(.hidden) .CodeMirror').CodeMirror.getValue()"
)
TAB_TITLES = "[...document.querySelectorAll('.graphiql-tab-button')].map(b => b.innerText.trim())"
QUERY_EDITOR = "document.querySelector('.graphiql-query-editor').innerText"

# Every text the result pane shows, in order (GraphiQL replaces it with each event).
RECORD_RESULTS = """(() => {
  window.results = [];
  const record = () => {
    const out = document.querySelector('.result-window');
    const text = out ? out.innerText : '';
    if (text && window.results[window.results.length - 1] !== text) window.results.push(text);
  };
  new MutationObserver(record).observe(
    document.body, { subtree: true, childList: true, characterData: true });
  return true;
})()"""

# Click run until the subscription is running (a click that lands while GraphiQL is still
# setting up its editors is dropped; a click while it runs would stop it).
RUN_SUBSCRIPTION = """new Promise((resolve, reject) => {
  const deadline = Date.now() + 30000;
  let clicked = 0;
  const tick = () => {
    const button = document.querySelector('.graphiql-execute-button');
    const label = button ? button.getAttribute('aria-label') : '';
    if (label.startsWith('Stop')) { resolve(true); return; }
    if (Date.now() > deadline) { reject(new Error('the subscription did not start')); return; }
    if (button && Date.now() - clicked > 1000) { button.click(); clicked = Date.now(); }
    setTimeout(tick, 50);
  };
  tick();
})"""


async def test_graphiql_runs_a_subscription_in_demo_mode(tmp_path: Path) -> None:
    async with (
        serve_demo_mode() as url,
        httpx.AsyncClient(base_url=url, timeout=10) as client,
        chromium(tmp_path / "profile") as page,
    ):
        for domain in ("Network", "Page", "Log", "Runtime"):
            await page.call(f"{domain}.enable")
        await page.call("Page.navigate", url=f"{url}/graphql")

        headers = await wait_until(page, HEADERS_PANE, "the Headers pane")
        titles = await wait_until(page, f"{TAB_TITLES}.length === 5 && {TAB_TITLES}", "tabs")
        await page.evaluate(
            "[...document.querySelectorAll('.graphiql-tab-button')]"
            ".find(b => b.innerText.trim() === 'WatchDemoPods').click()"
        )
        await wait_until(page, f"{QUERY_EDITOR}.includes('subscription WatchDemoPods')", "tab")
        assert await page.evaluate(RECORD_RESULTS) is True
        for _attempt in range(3):
            assert await page.evaluate(RUN_SUBSCRIPTION) is True
            # GraphiQL can run a freshly switched tab with the previous tab's operation name
            # (its own race, answered 'unknown operation named ...'): run it again then.
            seen = await wait_until(
                page,
                "window.results.find(t => t.includes('watchPods') "
                "|| t.includes('unknown operation named'))",
                "events",
            )
            if "watchPods" in seen:
                break
            await page.evaluate("window.results = []")
        else:
            raise AssertionError("GraphiQL kept running the subscription under another name")

        # A change made through the API while the subscription runs shows up live.
        value = unique("browser")
        patch = {"metadata": {"labels": {"seen-by": value}}}
        await gql(
            client,
            'mutation($p: JSON!) { patchPod(namespace: "demo", '
            'name: "web-6d4b9c7f5-x7k2p", patch: $p) { metadata { name } } }',
            {"p": patch},
            token=ADMIN_TOKEN,
        )
        live = await wait_until(
            page, f"window.results.find(t => t.includes({json.dumps(value)}))", value
        )
        shot = await page.call("Page.captureScreenshot", format="png")
        png = base64.b64decode(shot["data"])
        (tmp_path / "graphiql-subscription.png").write_bytes(png)

        await page.evaluate(
            "document.querySelector('button[aria-label=\"Show Documentation Explorer\"]').click()"
        )
        docs = await wait_until(
            page,
            "document.querySelector('.graphiql-doc-explorer').innerText"
            ".includes('Subscription') && "
            "document.querySelector('.graphiql-doc-explorer').innerText",
            "the docs explorer",
        )
        events = list(page.events)

    assert json.loads(headers) == {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    assert titles == ["DemoPods", "WatchDemoPods", "LabelWebPod", "LiveWebPods", "DemoRelations"]
    assert '"MODIFIED"' in live and "web-6d4b9c7f5-x7k2p" in live
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert (tmp_path / "graphiql-subscription.png").stat().st_size == len(png)
    assert "query" in docs and "mutation" in docs and "subscription" in docs
    sockets = [e["params"]["url"] for e in events if e.get("method") == "Network.webSocketCreated"]
    assert sockets == [url.replace("http://", "ws://") + "/graphql"]
    requested = [
        e["params"]["request"]["url"]
        for e in events
        if e.get("method") == "Network.requestWillBeSent"
    ]
    assert f"{url}/graphql/graphiql.json" in requested
    external = [u for u in requested if not u.startswith((url, "data:", "blob:"))]
    assert not external, external
    refused = [e for e in events if "Content Security Policy" in json.dumps(e.get("params", {}))]
    assert not refused, refused


async def test_graphiql_shows_a_live_view_in_demo_mode(tmp_path: Path) -> None:
    async with (
        serve_demo_mode() as url,
        httpx.AsyncClient(base_url=url, timeout=10) as client,
        chromium(tmp_path / "profile") as page,
    ):
        for domain in ("Page", "Runtime"):
            await page.call(f"{domain}.enable")
        await page.call("Page.navigate", url=f"{url}/graphql")
        await wait_until(page, f"{TAB_TITLES}.includes('LiveWebPods')", "tabs")
        await page.evaluate(
            "[...document.querySelectorAll('.graphiql-tab-button')]"
            ".find(b => b.innerText.trim() === 'LiveWebPods').click()"
        )
        await wait_until(page, f"{QUERY_EDITOR}.includes('subscription LiveWebPods')", "tab")
        assert await page.evaluate(RECORD_RESULTS) is True
        for _attempt in range(3):
            assert await page.evaluate(RUN_SUBSCRIPTION) is True
            # GraphiQL's own race (see the subscription test): run it again then.
            seen = await wait_until(
                page,
                "window.results.find(t => t.includes('podsView') "
                "|| t.includes('unknown operation named'))",
                "the first page",
            )
            if "podsView" in seen:
                break
            await page.evaluate("window.results = []")
        else:
            raise AssertionError("GraphiQL kept running the live view under another name")
        # a label written through the API while the live view runs shows in its page
        value = unique("browser")
        await gql(
            client,
            'mutation($p: JSON!) { patchPod(namespace: "demo", '
            'name: "web-6d4b9c7f5-x7k2p", patch: $p) { metadata { name } } }',
            {"p": {"metadata": {"labels": {"seen-by": value}}}},
            token=ADMIN_TOKEN,
        )
        live = await wait_until(
            page, f"window.results.find(t => t.includes({json.dumps(value)}))", value
        )
        shot = await page.call("Page.captureScreenshot", format="png")
        png = base64.b64decode(shot["data"])
        (tmp_path / "graphiql-live-view.png").write_bytes(png)

    assert '"total": 2' in seen and "web-6d4b9c7f5-m9q4z" in seen
    assert '"total": 2' in live and "web-6d4b9c7f5-x7k2p" in live
    assert png.startswith(b"\x89PNG") and len(png) > 10_000

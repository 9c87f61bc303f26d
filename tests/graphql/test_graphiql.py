"""GraphiQL loads in headless Chromium (Debian's ``chromium``), offline, and runs a query.

Chromium is driven over the DevTools protocol (a WebSocket, with the ``websockets``
package): open the page, click GraphiQL's run button, wait in the page for the result,
take a screenshot and check the result text.  Every request the page makes must go to the
gateway itself: GraphiQL's assets are served locally, not from a CDN.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson
from websockets.asyncio.client import ClientConnection, connect

from gateway.demo import DemoUpstream
from tests.support.graphql import ADMIN, serve_gateway

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,800",
    "--remote-debugging-port=0",
]


class DevTools:
    """A minimal DevTools protocol client for one page (flattened session)."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.session: str | None = None
        self.events: list[dict[str, Any]] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        message: dict[str, Any] = {"id": call_id, "method": method, "params": params}
        if self.session is not None:
            message["sessionId"] = self.session
        await self.ws.send(orjson.dumps(message).decode())
        while True:
            reply = orjson.loads(await self.ws.recv())
            if reply.get("id") == call_id:
                assert "error" not in reply, reply
                result: dict[str, Any] = reply["result"]
                return result
            self.events.append(reply)

    async def evaluate(self, expression: str) -> Any:
        result = await self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")


@contextlib.asynccontextmanager
async def chromium(profile: Path) -> AsyncIterator[DevTools]:
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM,
        *FLAGS,
        f"--user-data-dir={profile}",
        "about:blank",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        async with asyncio.timeout(60):
            while True:
                line = (await proc.stderr.readline()).decode()
                assert line, "chromium exited before its DevTools endpoint was up"
                if line.startswith("DevTools listening on "):
                    endpoint = line.split(" on ", 1)[1].strip()
                    break
        drain = asyncio.create_task(proc.stderr.read())
        async with connect(endpoint, max_size=None) as ws:
            tools = DevTools(ws)
            target = await tools.call("Target.createTarget", url="about:blank")
            attached = await tools.call(
                "Target.attachToTarget", targetId=target["targetId"], flatten=True
            )
            tools.session = attached["sessionId"]
            yield tools
        drain.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await drain
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


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

"""Debian's headless Chromium driven over the DevTools protocol (a WebSocket, with the
``websockets`` package): one page, a flattened session, ``evaluate`` awaiting promises."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect

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
    """A headless Chromium with one blank page, closed when the block exits."""
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

"""The two long-lived responses: watch streams (JSON lines) and pod log streams (text)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from gateway.core.model.registry import Resource
from kube_gateway_demo.faults import WatchCut
from kube_gateway_demo.http import (
    DropConnection,
    Receive,
    Responder,
    wait_for_disconnect,
    warning_header,
)
from kube_gateway_demo.logs import ContainerLog, LogLine, LogStore
from kube_gateway_demo.storage import Storage, encode_event
from kube_gateway_demo.watches import DemoWatcher, Pending

_EXPIRY_LEAD = 2.0


@contextlib.asynccontextmanager
async def _disconnect_watch(
    receive: Receive, wake: asyncio.Event
) -> AsyncIterator[asyncio.Task[None]]:
    """A task that finishes (and sets ``wake``) when the client goes away."""
    task = asyncio.create_task(wait_for_disconnect(receive), name="demo-disconnect")
    task.add_done_callback(lambda _: wake.set())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def serve_watch(
    resp: Responder,
    receive: Receive,
    storage: Storage,
    res: Resource,
    watcher: DemoWatcher,
    *,
    timeout: float,
    bookmarks: bool,
    bookmark_interval: float,
    make_bookmark: Callable[[int], Pending],
    cut: WatchCut | None,
    warnings: list[str] | None = None,
) -> None:
    """Stream ``watcher``'s events until timeout, close, disconnect or a fault cuts it.

    ``make_bookmark`` builds a BOOKMARK for a resourceVersion.
    """
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = start + timeout
    next_bookmark = start + bookmark_interval
    # the cacher tells a watcher its resume point shortly before it expires it
    if deadline - _EXPIRY_LEAD > start:
        next_bookmark = min(next_bookmark, deadline - _EXPIRY_LEAD)
    sent = 0
    headers = [("content-type", "application/json")]
    headers += [("warning", warning_header(w)) for w in warnings or []]
    await resp.start(200, headers)
    try:
        async with _disconnect_watch(receive, watcher.wake) as gone:
            while True:
                while watcher.pending:
                    item = watcher.pending.popleft()
                    line = item.line(res)
                    sent += 1
                    if cut is not None and sent >= cut.after_events:
                        if cut.cut_last_line:
                            line = line[: max(1, len(line) // 2)]
                        await resp.write(line)
                        if cut.abrupt:
                            raise DropConnection
                        await resp.finish()
                        return
                    await resp.write(line)
                if watcher.closed or gone.done():
                    break
                now = loop.time()
                if now >= deadline:
                    break
                wake_at = min(deadline, next_bookmark) if bookmarks else deadline
                watcher.wake.clear()
                if watcher.pending or watcher.closed:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(watcher.wake.wait(), wake_at - now)
                now = loop.time()
                if bookmarks and not watcher.pending and now >= next_bookmark and now < deadline:
                    rv = max(storage.rv, watcher.start_rv)
                    watcher.pending.append(make_bookmark(rv))
                    next_bookmark = now + bookmark_interval
                    if deadline - _EXPIRY_LEAD > now:
                        next_bookmark = min(next_bookmark, deadline - _EXPIRY_LEAD)
    finally:
        storage.remove_watcher(res, watcher)
    await resp.finish()


async def serve_error_event(resp: Responder, status: dict[str, object]) -> None:
    """HTTP 200 with a single ERROR event, then the end (an expired watch, the cacher's way)."""
    await resp.start(200, [("content-type", "application/json")])
    await resp.write(encode_event("ERROR", dict(status)))
    await resp.finish()


def render(lines: list[LogLine], timestamps: bool) -> bytes:
    """Log lines as served."""
    return b"".join(line.render(timestamps) for line in lines)


async def serve_log(
    resp: Responder,
    receive: Receive,
    logs: LogStore,
    log: ContainerLog | None,
    initial: list[LogLine],
    *,
    follow: bool,
    timestamps: bool,
    limit_bytes: int | None,
    since_ts: float | None,
) -> None:
    """Send the selected lines, then (with ``follow``) every line written until the
    container ends, the pod goes, ``limitBytes`` is reached or the client leaves."""
    await resp.start(200, [("content-type", "text/plain")])
    budget = limit_bytes

    async def send(data: bytes) -> bool:
        nonlocal budget
        if budget is not None:
            data = data[:budget]
            budget -= len(data)
        if data:
            await resp.write(data)
        return budget is None or budget > 0

    more = await send(render(initial, timestamps))
    if follow and more and log is not None and not log.ended:
        wake = asyncio.Event()
        log.followers.add(wake)
        lines = log.lines
        index = len(lines)
        try:
            async with _disconnect_watch(receive, wake) as gone:
                while True:
                    wake.clear()
                    if log.lines is not lines:
                        break  # a new container instance: this stream is over
                    fresh = [ln for ln in lines[index:] if since_ts is None or ln.ts >= since_ts]
                    index = len(lines)
                    if fresh and not await send(render(fresh, timestamps)):
                        break
                    if log.ended or logs.closed or gone.done():
                        break
                    await wake.wait()
        finally:
            log.followers.discard(wake)
    await resp.finish()

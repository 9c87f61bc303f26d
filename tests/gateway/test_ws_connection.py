"""The WebSocket connection under uvicorn (gateway/httpserver.py, ``LeanWebSocketProtocol``):
text frames of every length class framed right with and without permessage-deflate, and an
idle connection that holds neither its handshake nor a queue's deques."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import itertools
import logging
import random
import time
from typing import Any

import pytest
from websockets.extensions.permessage_deflate import PerMessageDeflate
from websockets.frames import Frame, Opcode

from gateway.graphql.endpoints.server import GraphQLApp
from gateway.graphql.transport import websocket
from gateway.httpserver import (
    _HEADERS,
    _HEADERS_MAX,
    DEFLATE,
    LeanWebSocketProtocol,
    _deflated_frame,
    _header,
    _Inbox,
    _Writable,
)
from gateway.requestid import RequestContext
from gateway.shutdown import DrainGate
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import NAMESPACE, TransportWS, serve_gateway, unique, ws_client

LEASE = """query($ns: String!, $name: String!) {
  lease(namespace: $ns, name: $name) { metadata { name annotations } }
}"""
WATCH = """subscription($ns: String, $labels: String) {
  watchLeases(namespace: $ns, labelSelector: $labels, sendInitialEvents: false) {
    type object { metadata { name annotations } }
  }
}"""


def _lease(name: str, label: str, filler: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": {"suite": label}, "annotations": {"f": filler}},
        "spec": {"holderIdentity": "test"},
    }


@pytest.mark.parametrize("compression", [True, False])
async def test_text_frames_of_every_length(demo: DemoUpstream, compression: bool) -> None:
    """Answers of under 126 bytes, of 126 to 65,535 and of more (the three heads of RFC 6455)
    arrive whole and exact, framed by the gateway (no extension) or by websockets
    (permessage-deflate); a subscription's events too."""
    label = unique("frames")
    sizes = [10, 500, 70_000, 200_000]
    for i, size in enumerate(sizes):
        await demo.store.create(
            "leases", _lease(f"{label}-{i}", label, "x" * size), namespace=NAMESPACE
        )
    await demo.store.create("leases", _lease(f"{label}-w", f"{label}-w", ""), namespace=NAMESPACE)
    async with serve_gateway(demo, ws_compression=compression) as gateway, ws_client(gateway) as ws:
        accepted = ws.ws.response.headers.get("Sec-WebSocket-Extensions") or ""
        assert ("permessage-deflate" in accepted) is compression, accepted
        if compression:  # each message on its own: no zlib state kept between them
            assert "server_no_context_takeover" in accepted, accepted
            assert "client_no_context_takeover" in accepted, accepted
        for i, size in enumerate(sizes):
            op = await ws.subscribe(LEASE, {"ns": NAMESPACE, "name": f"{label}-{i}"})
            payload = await ws.next(op)
            assert payload["data"]["lease"]["metadata"]["annotations"] == {"f": "x" * size}
            assert await ws.recv() == {"id": op, "type": "complete"}
        op = await ws.subscribe(WATCH, {"ns": NAMESPACE, "labels": f"suite={label}-w"})
        # the subscription is established once a change made after it arrives
        for size in (20, 90_000, 3):
            annotations = await _patched_until_seen(demo, ws, op, f"{label}-w", "y" * size)
            assert annotations["f"] == "y" * size


_counter = itertools.count()


async def _patched_until_seen(
    demo: DemoUpstream, ws: TransportWS, op: str, name: str, filler: str
) -> dict[str, str]:
    """Patch the Lease's annotation ``f`` to ``filler`` (and ``n`` to a new number, as a
    patch that changes nothing makes no event) until the subscription delivers that very
    patch (the first ones may come before it is established); its annotations."""
    deadline = time.monotonic() + 30
    while True:
        n = str(next(_counter))
        await demo.store.patch(
            "leases",
            name,
            {"metadata": {"annotations": {"f": filler, "n": n}}},
            namespace=NAMESPACE,
        )
        with contextlib.suppress(TimeoutError):
            while True:  # events of earlier patches may still come
                event = await ws.next(op, timeout=1)
                annotations: dict[str, str] = event["data"]["watchLeases"]["object"]["metadata"][
                    "annotations"
                ]
                if annotations.get("n") == n:
                    return annotations
        assert time.monotonic() < deadline, f"the patch {n} of {name} never came within 30 s"


def _server_protocols() -> list[LeanWebSocketProtocol]:
    gc.collect()
    return [
        p
        for p in gc.get_objects()
        if isinstance(p, LeanWebSocketProtocol) and not p.disconnected and p.handshake_complete
    ]


def _coroutines_of(*functions: Any, scope: str | None = None) -> list[Any]:
    """The live coroutines running any of ``functions`` (with ``scope``: for an ASGI scope
    of that type only; the lifespan's call lives as long as the server)."""
    codes = {f.__code__ for f in functions}
    gc.collect()
    found = []
    for o in gc.get_objects():
        if type(o).__name__ != "coroutine" or o.cr_code not in codes:
            continue
        if scope is not None:
            frame = o.cr_frame
            asgi = frame.f_locals.get("scope") if frame is not None else None
            if not isinstance(asgi, dict) or asgi.get("type") != scope:
                continue
        found.append(o)
    return found


async def test_an_idle_connection_lets_its_handshake_go(demo: DemoUpstream) -> None:
    """Once accepted, a subscriber's connection keeps neither the request's headers, the
    parsed request nor the 101 response, nor the ASGI call (it is served outside it, in a
    task of the server's: no frame of the middleware stack, of the router or of the
    endpoint, and no ASGI scope, is held), and its receive queue and writable flag are the
    lean ones; it is served as before, and a connection opened after it too."""
    label = unique("idle")
    await demo.store.create("leases", _lease(f"{label}-a", label, "a"), namespace=NAMESPACE)
    async with serve_gateway(demo) as gateway, ws_client(gateway) as ws:
        op = await ws.subscribe(WATCH, {"ns": NAMESPACE, "labels": f"suite={label}"})
        # a query answered on the same connection: the upgrade is long done
        q = await ws.subscribe(LEASE, {"ns": NAMESPACE, "name": f"{label}-a"})
        assert (await ws.next(q))["data"]["lease"]["metadata"]["name"] == f"{label}-a"
        assert await ws.recv() == {"id": q, "type": "complete"}
        (protocol,) = _server_protocols()
        assert protocol.response is None
        assert len(protocol.request.headers) == 0
        assert protocol.detached and protocol.scope is None
        # every attribute in a slot: no instance dictionary (uvicorn added one: name it)
        assert not vars(protocol), sorted(vars(protocol))
        # the ASGI call returned: none of its frames is alive, the connection's task is
        # the server's (uvicorn's shutdown waits for it)
        calls = (RequestContext.__call__, DrainGate.__call__, GraphQLApp.__call__, websocket.serve)
        assert not _coroutines_of(*calls, scope="websocket")
        (serving,) = _coroutines_of(websocket.Connection.serve)
        assert any(t.get_coro() is serving for t in protocol.tasks)
        assert isinstance(protocol.queue, _Inbox) and protocol.queue.empty()
        assert isinstance(protocol.writable, _Writable) and protocol.writable.is_set()
        async with ws_client(gateway) as second:
            op2 = await second.subscribe(WATCH, {"ns": NAMESPACE, "labels": f"suite={label}"})
            # each sees a patch made once it is established
            first = await _patched_until_seen(demo, ws, op, f"{label}-a", "1")
            second_seen = await _patched_until_seen(demo, second, op2, f"{label}-a", "2")
            assert (first["f"], second_seen["f"]) == ("1", "2")


def test_shared_header_lines_stay_bounded() -> None:
    """Header lines are shared between connections only up to a bound and only of headers
    that carry no secret: clients sending endless distinct lines (a hostile one) neither
    grow the cache past it nor lose a header; a credential or a connection's own key is
    never kept; a line kept is handed out as the same object."""
    for i in range(3 * _HEADERS_MAX):
        line = (b"User-Agent", str(i).encode())
        assert _header(line) == line
    assert len(_HEADERS) <= _HEADERS_MAX
    for secret in ((b"Authorization", b"Bearer t0ken"), (b"cookie", b"s=1")):
        assert _header(secret) == secret and secret not in _HEADERS
    key = (b"Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ==")
    assert _header(key) == key and key not in _HEADERS
    long = (b"Origin", b"x" * 4096)
    assert _header(long) is long and long not in _HEADERS
    kept = next(iter(_HEADERS))
    assert _header((bytes(bytearray(kept[0])), bytes(bytearray(kept[1])))) is kept


@pytest.mark.parametrize("size", [0, 10, 125, 500, 70_000, 300_000])
def test_a_compressed_frame_is_what_websockets_writes(size: int) -> None:
    """The frame the gateway compresses once for every subscriber is, byte for byte, the
    one ``websockets`` writes for a connection that negotiated permessage-deflate without
    context takeover (random text: incompressible, so every length class of the head)."""
    text = base64.b64encode(random.randbytes(size)).decode()[:size]
    (factory,) = DEFLATE
    extension = PerMessageDeflate(True, True, 12, 12, factory.compress_settings)
    expected = Frame(Opcode.TEXT, text.encode()).serialize(mask=False, extensions=[extension])
    assert _deflated_frame(text, extension) == expected
    assert _deflated_frame(text, extension) == expected  # the shared one, once made


async def test_a_binary_message_is_refused_and_a_neighbour_is_served(
    demo: DemoUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """A binary message (neither protocol has any) closes its connection at once with 4400
    and a clear reason, logged as no server error; a subscriber beside it keeps being
    served, its answers quick."""
    label = unique("binary")
    await demo.store.create("leases", _lease(f"{label}-a", label, "a"), namespace=NAMESPACE)
    async with serve_gateway(demo) as gateway, ws_client(gateway) as good:
        op = await good.subscribe(WATCH, {"ns": NAMESPACE, "labels": f"suite={label}"})
        async with ws_client(gateway) as hostile:
            await hostile.ws.send(b"\x00" * 1000)
            async with asyncio.timeout(10):
                await hostile.ws.wait_closed()
            assert hostile.ws.close_code == 4400
            assert hostile.ws.close_reason == "Invalid message received"
        started = time.monotonic()
        q = await good.subscribe(LEASE, {"ns": NAMESPACE, "name": f"{label}-a"})
        assert (await good.next(q))["data"]["lease"]["metadata"]["name"] == f"{label}-a"
        assert await good.recv() == {"id": q, "type": "complete"}
        assert time.monotonic() - started < 5.0
        seen = await _patched_until_seen(demo, good, op, f"{label}-a", "after")
        assert seen["f"] == "after"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


async def test_shutdown_ends_connections_served_outside_their_call(
    demo: DemoUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's shutdown closes idle subscribers served outside their ASGI call as it
    closed them inside it (1012), waits for them: once it is over no task of theirs is left
    (no connection's, no operation's), and each connection and operation wrote its access
    line (the operation's ``cancelled``)."""
    caplog.set_level(logging.INFO, logger="gateway.access")
    label = unique("shutdown")
    await demo.store.create("leases", _lease(f"{label}-a", label, "a"), namespace=NAMESPACE)
    async with contextlib.AsyncExitStack() as clients:
        async with serve_gateway(demo) as gateway:
            subscribers = []
            for i in range(3):
                ws = await clients.enter_async_context(ws_client(gateway))
                op = await ws.subscribe(WATCH, {"ns": NAMESPACE, "labels": f"suite={label}"})
                await _patched_until_seen(demo, ws, op, f"{label}-a", str(i))
                subscribers.append(ws)
            assert len(_coroutines_of(websocket.Connection.serve)) == 3
        for ws in subscribers:
            async with asyncio.timeout(10):
                await ws.ws.wait_closed()
            assert ws.ws.close_code == 1012
    codes = {websocket.Connection.serve.__code__, websocket.Connection._run.__code__}
    left = [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "cr_code", None) in codes]
    assert not left
    lines = [r for r in caplog.records if r.name == "gateway.access"]
    connections = [r for r in lines if getattr(r, "transport", None) == "websocket"]
    assert [r.__dict__["method"] for r in connections].count("GET") == 3
    assert all(
        r.__dict__["status"] == 101 and r.__dict__["bytes"] > 0
        for r in connections
        if r.__dict__["method"] == "GET"
    )
    operations = [r for r in connections if r.__dict__["method"] == "subscription"]
    assert len(operations) == 3
    assert all(r.__dict__["ended"] == "cancelled" for r in operations)


async def test_the_inbox_hands_messages_over_in_order() -> None:
    """The receive queue: a waiting reader is handed the next message, messages queued
    while none waits come out in order, and a message put while the reader that waited was
    cancelled (its task ended) is kept for the next reader, not lost."""
    inbox = _Inbox()
    first = inbox.get()
    assert not first.done()
    inbox.put_nowait({"n": 1})
    assert first.result() == {"n": 1} and inbox.empty()
    inbox.put_nowait({"n": 2})
    inbox.put_nowait({"n": 3})
    assert inbox.qsize() == 2
    assert await inbox.get() == {"n": 2}
    assert await inbox.get() == {"n": 3}
    assert inbox.empty()
    left = inbox.get()
    left.cancel()
    inbox.put_nowait({"n": 4})
    assert await inbox.get() == {"n": 4} and inbox.empty()

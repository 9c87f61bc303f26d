"""The core's Watcher and adapter under injected upstream faults (demo upstream only)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from gateway.core import errors
from gateway.core.model.options import ListOptions
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from gateway.core.watch.watcher import RESYNC_ANNOTATION, Backoff, Watcher, WatchEvent
from kube_gateway_demo import DemoUpstream

ADMIN = Credential("admin-token")
NS = "demo"
FAST = Backoff(initial=0.01, cap=0.05)


@dataclass
class Env:
    demo: DemoUpstream
    kube: KubeAdapter


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    async with DemoUpstream(seed=False, history=20_000) as demo:
        await demo.store.ensure_namespace(NS)
        async with build_http_client(UpstreamConfig(server=demo.url, source="demo")) as http:
            yield Env(demo, KubeAdapter(http))


def lease(name: str, holder: str = "a") -> dict[str, object]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "watch-test"}},
        "spec": {"holderIdentity": holder},
    }


async def changes_until(
    stream: AsyncIterator[WatchEvent], last_rv: str, timeout: float = 60
) -> list[WatchEvent]:
    seen: list[WatchEvent] = []
    async with asyncio.timeout(timeout):
        async for event in stream:
            if event.type in ("ADDED", "MODIFIED", "DELETED"):
                seen.append(event)
                if event.resource_version == last_rv:
                    return seen
    raise AssertionError("the stream ended")


@pytest.mark.parametrize("abrupt", [False, True])
async def test_every_change_exactly_once_in_order_while_the_upstream_keeps_cutting(
    env: Env, abrupt: bool
) -> None:
    """3,000 changes; the upstream ends every stream after 250 lines, cutting the last."""
    for i in range(10):
        await env.demo.store.create("leases", lease(f"l{i}"), namespace=NS)
    watcher = Watcher(env.kube, "leases", namespace=NS, credential=ADMIN, backoff=FAST)
    async with contextlib.aclosing(watcher.events()) as stream:
        initial = [await anext(stream) for _ in range(10)]
        assert sorted(e.object["metadata"]["name"] for e in initial) == [f"l{i}" for i in range(10)]
        env.demo.faults.close_watches_after(250, cut_last_line=True, abrupt=abrupt)

        async def write() -> list[tuple[str, str, str]]:
            written = []
            for n in range(3000):
                name = f"l{n % 10}"
                if n % 500 == 499:
                    await env.demo.store.delete("leases", name, namespace=NS)
                    written.append(("DELETED", name, env.demo.store.resource_version))
                    obj = await env.demo.store.create("leases", lease(name), namespace=NS)
                    written.append(("ADDED", name, obj["metadata"]["resourceVersion"]))
                else:
                    obj = await env.demo.store.patch(
                        "leases", name, {"spec": {"holderIdentity": f"h{n}"}}, namespace=NS
                    )
                    written.append(("MODIFIED", name, obj["metadata"]["resourceVersion"]))
                if n % 100 == 0:
                    await asyncio.sleep(0)  # let the watch make progress while we write
            return written

        writer = asyncio.create_task(write())
        written = await writer
        seen = await changes_until(stream, written[-1][2])
    got = [(e.type, e.object["metadata"]["name"], e.resource_version) for e in seen]
    assert got == written
    assert watcher.reconnects >= 3000 // 250
    assert watcher.relists == 0


async def drain_until_resync_end(stream: AsyncIterator[WatchEvent]) -> list[WatchEvent]:
    out: list[WatchEvent] = []
    async with asyncio.timeout(30):
        async for event in stream:
            out.append(event)
            if event.type == "RESYNC" and (
                event.object["metadata"]["annotations"][RESYNC_ANNOTATION] == "end"
            ):
                return out
    raise AssertionError("the stream ended")


@pytest.mark.parametrize("mode", ["compact", "event", "http"])
async def test_410_relists_and_reports_what_vanished_during_the_gap(env: Env, mode: str) -> None:
    for name in ("a", "b", "c"):
        await env.demo.store.create("leases", lease(name), namespace=NS)
    watcher = Watcher(env.kube, "leases", namespace=NS, credential=ADMIN, backoff=FAST)
    async with contextlib.aclosing(watcher.events()) as stream:
        assert {(await anext(stream)).object["metadata"]["name"] for _ in range(3)} == {
            "a",
            "b",
            "c",
        }
        # The consumer is not pulling, so the watcher is not connected: these happen in a gap.
        held_rv = watcher.resource_version
        await env.demo.store.delete("leases", "b", namespace=NS)
        await env.demo.store.patch("leases", "c", {"spec": {"holderIdentity": "z"}}, namespace=NS)
        await env.demo.store.create("leases", lease("d"), namespace=NS)
        if mode == "compact":
            env.demo.faults.compact()  # the held resourceVersion is now too old: 410
        else:
            env.demo.faults.expire_watches(1, mode=mode)  # type: ignore[arg-type]
        events = await drain_until_resync_end(stream)
    kinds = [(e.type, e.object["metadata"].get("name")) for e in events]
    assert kinds[0] == ("RESYNC", None) and kinds[-1] == ("RESYNC", None)
    assert sorted(kinds[1:-1]) == [("ADDED", "d"), ("DELETED", "b"), ("MODIFIED", "c")]
    deleted = next(e for e in events if e.type == "DELETED")
    assert deleted.object["spec"]["holderIdentity"] == "a"  # its last known state
    assert watcher.relists == 1
    assert watcher.resource_version not in (None, held_rv)
    assert set(watcher.state) == {f"{NS}/a", f"{NS}/c", f"{NS}/d"}


async def test_watch_continues_after_the_relist(env: Env) -> None:
    await env.demo.store.create("leases", lease("a"), namespace=NS)
    watcher = Watcher(env.kube, "leases", namespace=NS, credential=ADMIN, backoff=FAST)
    async with contextlib.aclosing(watcher.events()) as stream:
        await anext(stream)
        env.demo.faults.expire_watches(2, mode="event")  # the first watch after the relist too
        await env.demo.store.create("leases", lease("b"), namespace=NS)
        await drain_until_resync_end(stream)
        created = await env.demo.store.create("leases", lease("c"), namespace=NS)
        seen = await changes_until(stream, created["metadata"]["resourceVersion"])
    assert [(e.type, e.object["metadata"]["name"]) for e in seen][-1] == ("ADDED", "c")
    assert watcher.relists == 2


async def test_throttling_and_server_errors_back_off_and_resume_at_the_same_rv(env: Env) -> None:
    await env.demo.store.create("leases", lease("a"), namespace=NS)
    watcher = Watcher(env.kube, "leases", namespace=NS, credential=ADMIN, backoff=FAST)
    async with contextlib.aclosing(watcher.events()) as stream:
        await anext(stream)
        env.demo.faults.fail_requests(1, status=429, verb="watch", retry_after=0)
        env.demo.faults.fail_requests(1, status=503, verb="watch")
        env.demo.faults.fail_requests(1, status=500, verb="watch")
        changed = await env.demo.store.patch(
            "leases", "a", {"spec": {"holderIdentity": "b"}}, namespace=NS
        )
        seen = await changes_until(stream, changed["metadata"]["resourceVersion"])
    assert [e.type for e in seen] == ["MODIFIED"]
    assert env.demo.faults.failed_requests == 3
    assert watcher.relists == 0


async def test_unauthorized_and_forbidden_end_the_watch(env: Env) -> None:
    bad = Watcher(env.kube, "leases", namespace=NS, credential=Credential("wrong"), backoff=FAST)
    with pytest.raises(errors.Unauthorized):
        async with contextlib.aclosing(bad.events()) as stream:
            await anext(stream)


async def test_streaming_list_cut_before_its_end_marker_is_discarded(env: Env) -> None:
    for name in ("a", "b", "c"):
        await env.demo.store.create("leases", lease(name), namespace=NS)
    env.demo.faults.close_watches_after(2)  # every stream ends before the end marker
    watcher = Watcher(
        env.kube, "leases", namespace=NS, credential=ADMIN, backoff=FAST, streaming_list=True
    )
    async with contextlib.aclosing(watcher.events()) as stream:
        first = [await anext(stream) for _ in range(3)]
        env.demo.faults.reset()
        created = await env.demo.store.create("leases", lease("d"), namespace=NS)
        rest = await changes_until(stream, created["metadata"]["resourceVersion"])
    names = [e.object["metadata"]["name"] for e in first + rest]
    assert names.count("a") == names.count("b") == names.count("c") == 1  # no partial duplicates
    assert sorted(names) == ["a", "b", "c", "d"]


async def test_server_without_watch_list_falls_back_to_list_then_watch(env: Env) -> None:
    for name in ("a", "b"):
        await env.demo.store.create("leases", lease(name), namespace=NS)
    env.demo.faults.reject_initial_events()
    watcher = Watcher(
        env.kube, "leases", namespace=NS, credential=ADMIN, backoff=FAST, streaming_list=True
    )
    async with contextlib.aclosing(watcher.events()) as stream:
        got = sorted([(await anext(stream)).object["metadata"]["name"] for _ in range(2)])
        created = await env.demo.store.create("leases", lease("c"), namespace=NS)
        rest = await changes_until(stream, created["metadata"]["resourceVersion"])
    assert got == ["a", "b"] and [e.object["metadata"]["name"] for e in rest] == ["c"]


# -- adapter error mapping and transport failures -----------------------------------------


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (429, errors.TooManyRequests),
        (500, errors.Internal),
        (503, errors.ServiceUnavailable),
        (504, errors.Timeout),
    ],
)
async def test_injected_upstream_failures_map_to_the_error_tree(
    env: Env, status: int, cls: type[errors.GatewayError]
) -> None:
    env.demo.faults.fail_requests(1, status=status, verb="list", retry_after=2)
    with pytest.raises(cls) as exc:
        await env.kube.list("leases", namespace=NS, credential=ADMIN)
    assert exc.value.status_code == status
    if status == 429:
        assert exc.value.retry_after == 2.0
    await env.kube.list("leases", namespace=NS, credential=ADMIN)  # one failure only


async def test_a_dropped_connection_is_retried_once_for_reads_then_unavailable(env: Env) -> None:
    await env.demo.store.create("leases", lease("a"), namespace=NS)
    env.demo.faults.drop_connections(1, verb="get")
    got = await env.kube.get("leases", "a", namespace=NS, credential=ADMIN)
    assert got["metadata"]["name"] == "a"
    env.demo.faults.drop_connections(2, verb="get")
    with pytest.raises(errors.Unavailable):
        await env.kube.get("leases", "a", namespace=NS, credential=ADMIN)
    env.demo.faults.drop_connections(1, verb="create")
    with pytest.raises(errors.Unavailable):  # writes are never replayed
        await env.kube.create("leases", lease("b"), namespace=NS, credential=ADMIN)


async def test_unreachable_upstream_is_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with build_http_client(
        UpstreamConfig(server=f"http://127.0.0.1:{port}", source="t")
    ) as http:
        with pytest.raises(errors.Unavailable) as exc:
            await KubeAdapter(http).list("pods", credential=ADMIN)
    assert "token" not in exc.value.message and "admin" not in exc.value.message


async def test_bad_options_fail_before_any_request(env: Env) -> None:
    before = env.demo.faults.watch_requests
    with pytest.raises(errors.InvalidParameter):
        async with env.kube.watch_stream("pods", options=ListOptions(limit=5), credential=ADMIN):
            pass
    with pytest.raises(errors.MethodNotSupported):
        await env.kube.replace("pods", "p", {}, namespace=NS, subresource="log", credential=ADMIN)
    with pytest.raises(errors.UnknownResource):
        await env.kube.list("secrets", credential=ADMIN)
    assert env.demo.faults.watch_requests == before


async def test_a_relist_that_fails_is_retried_without_touching_the_consumers_view(env: Env) -> None:
    await env.demo.store.create("leases", lease("a"), namespace=NS)
    watcher = Watcher(env.kube, "leases", namespace=NS, credential=ADMIN, backoff=FAST)
    async with contextlib.aclosing(watcher.events()) as stream:
        await anext(stream)
        await env.demo.store.delete("leases", "a", namespace=NS)
        env.demo.faults.compact()
        env.demo.faults.fail_requests(2, status=503, verb="list")
        events = await drain_until_resync_end(stream)
    assert [(e.type, e.object["metadata"].get("name")) for e in events] == [
        ("RESYNC", None),
        ("DELETED", "a"),
        ("RESYNC", None),
    ]
    assert watcher.relists == 3 and env.demo.faults.failed_requests == 2


async def test_a_half_open_watch_is_detected_by_its_idle_deadline() -> None:
    """A server that starts a watch and then goes silent past timeoutSeconds (watch rule 18
    of ``docs/watch-semantics.md``)."""
    hung = asyncio.Event()
    closed = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            await writer.drain()
            hung.set()
            with contextlib.suppress(ConnectionError):
                await reader.read()  # never answers again; returns when the client gives up
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        finally:
            closed.set()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        cfg = UpstreamConfig(server=f"http://127.0.0.1:{port}", source="t")
        async with build_http_client(cfg) as http:
            kube = KubeAdapter(http, watch_idle_margin=0.2)
            options = ListOptions(timeout_seconds=1)
            with pytest.raises(errors.Unavailable) as exc:
                async with kube.watch_stream("leases", namespace=NS, options=options) as stream:
                    async for _ in stream:
                        raise AssertionError("a silent server sent an event")
            assert hung.is_set() and "idle" in exc.value.message
        async with asyncio.timeout(10):
            await closed.wait()  # the server side is closed before the loop ends
    finally:
        server.close()
        await server.wait_closed()


async def test_a_watcher_keeps_only_what_its_consumer_needs_a_page_at_a_time(env: Env) -> None:
    """``keep`` shapes every object (listed, page by page, and in events), so a watcher of
    large objects (CRDs, hundreds of KB each) never holds them whole; ``page_size`` sets
    the list's pages."""
    first = await env.kube.create("leases", lease("kept-0"), namespace=NS, credential=ADMIN)
    for i in range(1, 5):
        await env.kube.create("leases", lease(f"kept-{i}"), namespace=NS, credential=ADMIN)
    seen: list[dict[str, object]] = []

    def keep(obj: dict[str, object]) -> dict[str, object]:
        seen.append(obj)
        return {"metadata": obj["metadata"], "slim": True}

    watcher = Watcher(env.kube, "leases", namespace=NS, credential=ADMIN, keep=keep, page_size=2)
    await watcher.prime()
    assert len(watcher.state) == 5
    assert all(obj["slim"] is True and "spec" not in obj for obj in watcher.state.values())
    assert len(seen) == 5  # each object shaped once, as its page arrived
    changed = lease("kept-0", holder="b")
    changed["metadata"]["resourceVersion"] = first["metadata"]["resourceVersion"]  # type: ignore[index]
    made = await env.kube.replace("leases", "kept-0", changed, namespace=NS, credential=ADMIN)
    stream = watcher.events()
    async with contextlib.aclosing(stream):
        (event,) = await changes_until(stream, made["metadata"]["resourceVersion"])
    assert event.type == "MODIFIED"
    assert event.object["slim"] is True and "spec" not in event.object

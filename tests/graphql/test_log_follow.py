"""Pod log follow subscriptions that survive the upstream (watch rules 27 to 30 of
``docs/watch-semantics.md``).

Against the demo upstream: the follow stream is cut mid-line (fault injection), the
subscription resumes with ``timestamps=true&sinceTime=`` and delivers every line exactly
once, and it ends cleanly when the container exits.  Against a scripted kubelet-like
upstream on a loopback socket: a clean end while the container still runs resumes, the
repeated second is deduplicated by timestamp, a restarted container ends the follow.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
import uvicorn

from gateway.core import errors
from gateway.core.model.options import LogOptions
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.credentials import Credential
from gateway.core.watch.logfollow import LogFollower, parse_stamp, since_time
from gateway.core.watch.watcher import Backoff
from kube_gateway_demo import DemoUpstream
from tests.support.graphql import ADMIN, NAMESPACE, Gateway, TransportWS, _Server, ws_client

FOLLOW = """subscription($n: String!, $c: String, $tail: Long, $ts: Boolean, $limit: Long) {
  followPodLog(namespace: "demo", name: $n, container: $c, tailLines: $tail, timestamps: $ts,
               limitBytes: $limit) { text timestamp }
}"""


async def _running_pod(gateway: Gateway) -> tuple[str, str]:
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
    return pod["metadata"]["name"], pod["spec"]["containers"][0]["name"]


async def _served(demo: DemoUpstream, pod: str, container: str) -> list[bytes]:
    """The lines of a container's log as the demo serves them with timestamps."""
    obj = await demo.store.get("pods", pod, namespace=NAMESPACE)
    log = demo.store.logs.get(str(obj["metadata"]["uid"]), container)
    assert log is not None
    return [line.render(True) for line in log.lines]


async def _lines_until_complete(
    ws: TransportWS, op: str, count: int, timeout: float = 20
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while len(out) < count:
        out.append((await ws.next(op, timeout))["data"]["followPodLog"])
    return out


@pytest.mark.parametrize("timestamps", [False, True])
async def test_follow_resumes_after_upstream_breaks_without_loss_or_duplicates(
    gateway: Gateway, demo: DemoUpstream, timestamps: bool
) -> None:
    name, container = await _running_pod(gateway)
    await demo.store.set_log(NAMESPACE, name, container, ["a1", "a2"])
    a1, a2 = await _served(demo, name, container)
    # The first follow request is cut inside its second line; the resumed one later, inside
    # a live line (it first repeats the lines of the last delivered line's second).
    demo.faults.drop_connections(1, verb="get", resource="pods/log", after_bytes=len(a1) + 5)
    b1_size = len(a1)  # "b1" renders to as many bytes as "a1"
    demo.faults.drop_connections(
        1, verb="get", resource="pods/log", after_bytes=len(a1) + len(a2) + b1_size + 5
    )
    async with ws_client(gateway) as ws:
        op = await ws.subscribe(FOLLOW, {"n": name, "tail": 10, "ts": timestamps})
        first = await _lines_until_complete(ws, op, 2)
        assert [x["text"] for x in first] == ["a1", "a2"]
        await demo.store.append_log(NAMESPACE, name, container, "b1", "b2")
        second = await _lines_until_complete(ws, op, 2)
        assert [x["text"] for x in second] == ["b1", "b2"]
        # lines written while the follow reconnects are not skipped
        await demo.store.append_log(NAMESPACE, name, container, "c1")
        await demo.store.append_log(NAMESPACE, name, container, "c2", "c3")
        third = await _lines_until_complete(ws, op, 3)
        assert [x["text"] for x in third] == ["c1", "c2", "c3"]
        assert demo.faults.dropped_requests == 2
        stamps = [x["timestamp"] for x in first + second + third]
        if timestamps:
            served = [s.split(b" ", 1)[0].decode() for s in await _served(demo, name, container)]
            assert stamps == served
        else:
            assert stamps == [None] * 7
        await demo.store.terminate_container(NAMESPACE, name, container)
        assert await ws.recv() == {"id": op, "type": "complete"}


async def test_follow_ends_cleanly_when_the_container_exits_during_a_break(
    gateway: Gateway, demo: DemoUpstream
) -> None:
    name, container = await _running_pod(gateway)
    await demo.store.set_log(NAMESPACE, name, container, ["start"])
    [start] = await _served(demo, name, container)
    # cut inside the first live line; the container exits before (or while) the follow
    # reconnects: the rest of the log is delivered, then the subscription completes
    demo.faults.drop_connections(1, verb="get", resource="pods/log", after_bytes=len(start) + 10)
    # a rule that never fires: consumed by the resumed request, it proves there was one
    demo.faults.drop_connections(1, verb="get", resource="pods/log", after_bytes=10**9)
    async with ws_client(gateway) as ws:
        op = await ws.subscribe(FOLLOW, {"n": name, "tail": 1})
        assert [x["text"] for x in await _lines_until_complete(ws, op, 1)] == ["start"]
        await demo.store.append_log(NAMESPACE, name, container, "last words", "bye")
        await demo.store.terminate_container(NAMESPACE, name, container)
        lines = await _lines_until_complete(ws, op, 2)
        assert [x["text"] for x in lines] == ["last words", "bye"]
        assert await ws.recv() == {"id": op, "type": "complete"}
    assert demo.faults.dropped_requests == 2


async def test_follow_limit_bytes_spans_resumes(gateway: Gateway, demo: DemoUpstream) -> None:
    name, container = await _running_pod(gateway)
    await demo.store.set_log(NAMESPACE, name, container, ["0123456789"])
    [line] = await _served(demo, name, container)
    demo.faults.drop_connections(1, verb="get", resource="pods/log", after_bytes=len(line) + 3)
    demo.faults.drop_connections(1, verb="get", resource="pods/log", after_bytes=10**9)
    async with ws_client(gateway) as ws:
        # 11 bytes for "0123456789\n", then 6 of "abcdefghij": the follow ends there
        op = await ws.subscribe(FOLLOW, {"n": name, "tail": 1, "limit": 17})
        assert (await ws.next(op))["data"]["followPodLog"]["text"] == "0123456789"
        await demo.store.append_log(NAMESPACE, name, container, "abcdefghij", "more")
        assert (await ws.next(op))["data"]["followPodLog"]["text"] == "abcdef"
        assert await ws.recv() == {"id": op, "type": "complete"}
    assert demo.faults.dropped_requests == 2  # the first request was cut, then resumed


async def test_a_failed_start_is_reported_and_a_failed_resume_retried(
    gateway: Gateway, demo: DemoUpstream
) -> None:
    name, container = await _running_pod(gateway)
    await demo.store.set_log(NAMESPACE, name, container, ["first"])
    [line] = await _served(demo, name, container)
    demo.faults.fail_requests(1, status=503, verb="get", resource="pods/log")
    async with ws_client(gateway) as ws:
        op = await ws.subscribe(FOLLOW, {"n": name, "tail": 1})
        payload = await ws.next(op)
        assert payload["errors"][0]["extensions"]["code"] == "SERVICE_UNAVAILABLE"
        assert await ws.recv() == {"id": op, "type": "complete"}
        demo.faults.drop_connections(1, verb="get", resource="pods/log", after_bytes=len(line) + 3)
        op = await ws.subscribe(FOLLOW, {"n": name, "tail": 1})
        assert (await ws.next(op))["data"]["followPodLog"]["text"] == "first"
        demo.faults.fail_requests(1, status=500, verb="get", resource="pods/log")
        await demo.store.append_log(NAMESPACE, name, container, "second", "third")
        lines = await _lines_until_complete(ws, op, 2)
        assert [x["text"] for x in lines] == ["second", "third"]
    assert demo.faults.failed_requests == 2


# -- a scripted kubelet ------------------------------------------------------------------------


def test_parse_stamp_and_since_time() -> None:
    assert parse_stamp(b"2026-03-01T10:00:05.000000001Z") == (1772359205, 1)
    assert parse_stamp(b"2026-03-01T10:00:05.5Z") == (1772359205, 500_000_000)
    assert parse_stamp(b"2026-03-01T11:00:05+01:00") == (1772359205, 0)
    assert parse_stamp(b"not-a-time") is None
    assert since_time((1772359205, 999)) == "2026-03-01T10:00:05Z"


@dataclass
class Kubelet:
    """A tiny upstream serving one pod and its log, scripted per request."""

    #: Each log request pops one script: a list of byte chunks (or a callable awaited
    #: before sending), and how the response ends ("eof" or "break").
    scripts: list[tuple[list[bytes | Callable[[], Awaitable[None]]], str]]
    running: bool = True
    restarts: int = 0
    requests: list[dict[str, str]] = field(default_factory=list)

    def pod(self) -> dict[str, Any]:
        state = {"running": {"startedAt": "2026-03-01T00:00:00Z"}} if self.running else {}
        return {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
            "status": {
                "containerStatuses": [{"name": "c", "restartCount": self.restarts, "state": state}]
            },
        }

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/api/v1/namespaces/ns/pods/p":
            body = orjson.dumps(self.pod())
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        assert path == "/api/v1/namespaces/ns/pods/p/log", path
        query = httpx.QueryParams(scope["query_string"].decode())
        self.requests.append(dict(query))
        chunks, ending = self.scripts.pop(0)
        if ending == "waiting":
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "message": 'container "c" in pod "p" is waiting to start: ContainerCreating',
                "reason": "BadRequest",
                "code": 400,
            }
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": orjson.dumps(status)})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain")],
            }
        )
        for chunk in chunks:
            if callable(chunk):
                await chunk()
                continue
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if ending == "break":
            raise RuntimeError("connection dropped")  # uvicorn aborts the response
        await send({"type": "http.response.body", "body": b""})


@contextlib.asynccontextmanager
async def kubelet_adapter(kubelet: Kubelet) -> AsyncIterator[KubeAdapter]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    server = _Server(uvicorn.Config(kubelet, lifespan="off", log_config=None, log_level=None))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await server.ready.wait()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            yield KubeAdapter(http)
    finally:
        server.should_exit = True
        await task
        sock.close()


def _follower(adapter: KubeAdapter, **options: Any) -> LogFollower:
    return LogFollower(
        adapter,
        namespace="ns",
        name="p",
        options=LogOptions(**options),
        credential=Credential("t"),
        backoff=Backoff(initial=0.01, cap=0.05),
    )


T = "2026-03-01T10:00:05"


async def test_resume_dedupes_the_repeated_second() -> None:
    kubelet = Kubelet(
        scripts=[
            # two lines of the same instant, one later in that second, then a cut line
            (
                [
                    f"{T}.100000000Z one\n{T}.100000000Z two\n".encode(),
                    f"{T}.200000000Z three\n{T}.3000".encode(),
                ],
                "break",
            ),
            # the repeat of the whole second (the cut line in full), then a new one
            (
                [
                    f"{T}.000000000Z zero\n{T}.100000000Z one\n{T}.100000000Z two\n".encode(),
                    f"{T}.200000000Z three\n{T}.300000000Z four\n".encode(),
                    b"2026-03-01T10:00:06.000000000Z five\n",
                ],
                "eof",  # the kubelet's idle timeout: the container still runs
            ),
            ([b"2026-03-01T10:00:06.000000000Z five\n2026-03-01T10:00:07Z six"], "eof"),
        ]
    )

    async def stop() -> None:
        kubelet.running = False

    kubelet.scripts[2][0].append(stop)
    async with kubelet_adapter(kubelet) as adapter:
        follower = _follower(adapter, container="c", tail_lines=3)
        got = [(line.data, line.stamp) async for line in follower.lines()]
    assert [d for d, _ in got] == [b"one", b"two", b"three", b"four", b"five", b"six"]
    assert got[-1][1] == b"2026-03-01T10:00:07Z"  # a last line without its newline
    assert kubelet.requests[0] == {
        "container": "c",
        "follow": "true",
        "timestamps": "true",
        "tailLines": "3",
    }
    for request in kubelet.requests[1:]:
        assert "tailLines" not in request
    assert kubelet.requests[1]["sinceTime"] == f"{T}Z"
    assert kubelet.requests[2]["sinceTime"] == "2026-03-01T10:00:06Z"
    assert follower.reconnects == 2


async def test_a_restarted_container_ends_the_follow() -> None:
    kubelet = Kubelet(scripts=[([f"{T}.1Z one\n".encode()], "eof")])

    async def restart() -> None:
        kubelet.restarts += 1

    kubelet.scripts[0][0].append(restart)
    async with kubelet_adapter(kubelet) as adapter:
        follower = _follower(adapter)
        assert [line.data async for line in follower.lines()] == [b"one"]
    assert len(kubelet.requests) == 1


async def test_a_container_waiting_after_a_break_ends_the_follow() -> None:
    kubelet = Kubelet(scripts=[([f"{T}.1Z one\n{T}.2Z tw".encode()], "break"), ([], "waiting")])
    async with kubelet_adapter(kubelet) as adapter:
        follower = _follower(adapter)
        assert [line.data async for line in follower.lines()] == [b"one"]
    assert len(kubelet.requests) == 2


async def test_errors_of_the_first_request_reach_the_caller() -> None:
    kubelet = Kubelet(scripts=[([], "waiting")])
    async with kubelet_adapter(kubelet) as adapter:
        follower = _follower(adapter)
        with pytest.raises(errors.BadRequest, match="waiting to start"):
            [line async for line in follower.lines()]


async def test_a_line_that_never_ends_is_delivered_in_pieces_not_held_whole() -> None:
    endless = [f"{T}.1Z ".encode() + b"x" * 1000] + [b"y" * 1000 for _ in range(9)]
    kubelet = Kubelet(scripts=[(endless, "eof")])

    async def restart() -> None:
        kubelet.restarts += 1  # the container went: the follow ends after this stream

    kubelet.scripts[0][0].append(restart)
    async with kubelet_adapter(kubelet) as adapter:
        follower = LogFollower(
            adapter,
            namespace="ns",
            name="p",
            options=LogOptions(),
            credential=Credential("t"),
            backoff=Backoff(initial=0.01, cap=0.05),
            max_line_bytes=4096,
        )
        pieces = [line.data async for line in follower.lines()]
    assert all(len(piece) <= 4096 for piece in pieces)
    assert b"".join(pieces) == b"x" * 1000 + b"y" * 9000  # nothing lost


async def test_a_log_read_larger_than_the_cap_is_refused_not_buffered(
    gateway: Gateway, demo: DemoUpstream
) -> None:
    name, container = await _running_pod(gateway)
    await demo.store.set_log(NAMESPACE, name, container, ["z" * 100 for _ in range(20)])
    gateway.app.state.runtime.cluster.adapter.max_log_bytes = 1000
    query = """query($n: String!, $c: String, $limit: Long) {
      podLog(namespace: "demo", name: $n, container: $c, limitBytes: $limit) }"""
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10, headers=headers) as client:
        whole = (
            await client.post(
                "/graphql", json={"query": query, "variables": {"n": name, "c": container}}
            )
        ).json()
        part = (
            await client.post(
                "/graphql",
                json={"query": query, "variables": {"n": name, "c": container, "limit": 500}},
            )
        ).json()
    assert whole["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE"
    assert "limitBytes" in whole["errors"][0]["message"]
    assert len(part["data"]["podLog"]) == 500

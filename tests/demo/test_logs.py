"""Pod logs: container selection, every parameter, follow, and the apiserver's errors."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import httpx

from kube_gateway_demo import DemoUpstream

PODS = "/api/v1/namespaces/demo/pods"
NGINX_LOG = "/api/v1/namespaces/default/pods/nginx-7c5ddbdf54-x2x9p/log"
WEB_LOG = f"{PODS}/web-6d4b9c7f5-x7k2p/log"
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ")


async def _scheduled(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]], name: str, **spec: Any
) -> None:
    r = await client.post(PODS, json=pod(name, nodeName="node-a", **spec))
    assert r.status_code == 201, r.text


async def test_single_container_log(client: httpx.AsyncClient) -> None:
    r = await client.get(NGINX_LOG)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain"
    lines = r.text.splitlines()
    assert len(lines) == 5
    assert lines[0] == "/docker-entrypoint.sh: Configuration complete; ready for start up"
    assert r.text.endswith("\n")
    # deterministic
    assert (await client.get(NGINX_LOG)).text == r.text


async def test_container_selection_errors(client: httpx.AsyncClient) -> None:
    r = await client.get(WEB_LOG)
    assert r.status_code == 400
    assert r.json()["message"] == (
        "a container name must be specified for pod web-6d4b9c7f5-x7k2p, choose one of: "
        "[app sidecar]"
    )
    r = await client.get(WEB_LOG, params={"container": "nope"})
    assert r.status_code == 400
    assert r.json()["message"] == "container nope is not valid for pod web-6d4b9c7f5-x7k2p"
    r = await client.get(WEB_LOG, params={"container": "sidecar"})
    assert r.status_code == 200 and "[sidecar]" in r.text
    r = await client.get(f"{PODS}/db-migrate-5c8f7/log", params={"container": "init-schema"})
    assert r.status_code == 200 and "[init-schema]" in r.text
    r = await client.get(f"{PODS}/missing/log")
    assert r.status_code == 404
    assert r.json()["message"] == 'pods "missing" not found'


async def test_unscheduled_pod_has_an_empty_log(client: httpx.AsyncClient) -> None:
    r = await client.get(f"{PODS}/pending-7f9d8/log")
    assert r.status_code == 204
    assert r.content == b""
    assert "content-type" not in r.headers
    # no kubelet is asked, so not even a missing previous instance is an error
    r = await client.get(f"{PODS}/pending-7f9d8/log", params={"previous": "true"})
    assert r.status_code == 204


async def test_tail_limit_timestamps(
    client: httpx.AsyncClient, demo: DemoUpstream, pod: Callable[..., dict[str, Any]]
) -> None:
    await _scheduled(client, pod, "lg")
    await demo.store.set_log("demo", "lg", "c", ["one", "two", "three", "four"])
    path = f"{PODS}/lg/log"
    assert (await client.get(path)).text == "one\ntwo\nthree\nfour\n"
    assert (await client.get(path, params={"tailLines": 2})).text == "three\nfour\n"
    assert (await client.get(path, params={"tailLines": 0})).text == ""
    assert (await client.get(path, params={"limitBytes": 6})).text == "one\ntw"
    stamped = (await client.get(path, params={"timestamps": "true", "tailLines": 1})).text
    assert TS.match(stamped) and stamped.endswith(" four\n")
    r = await client.get(path, params={"insecureSkipTLSVerifyBackend": "true"})
    assert r.status_code == 200


async def test_since_seconds_and_since_time(
    client: httpx.AsyncClient, demo: DemoUpstream, pod: Callable[..., dict[str, Any]]
) -> None:
    await _scheduled(client, pod, "since")
    now = [1_700_000_000.0]
    demo.store.clock = lambda: now[0]
    await demo.store.set_log("demo", "since", "c", ["old"])
    now[0] += 100
    await demo.store.append_log("demo", "since", "c", "new")
    path = f"{PODS}/since/log"
    assert (await client.get(path, params={"sinceSeconds": 10})).text == "new\n"
    assert (await client.get(path, params={"sinceTime": "2023-11-14T22:14:30Z"})).text == "new\n"
    assert (await client.get(path, params={"sinceTime": "2023-11-14T22:13:20Z"})).text == (
        "old\nnew\n"
    )
    r = await client.get(path, params={"sinceSeconds": 10, "sinceTime": "2023-11-14T22:14:30Z"})
    assert r.status_code == 422
    assert r.json()["message"] == (
        'PodLogOptions "since" is invalid: []: Forbidden: at most one of `sinceTime` or '
        "`sinceSeconds` may be specified"
    )
    r = await client.get(path, params={"sinceSeconds": 0})
    assert r.status_code == 422
    r = await client.get(path, params={"tailLines": -1, "limitBytes": 0})
    assert r.status_code == 422
    assert r.json()["message"] == (
        'PodLogOptions "since" is invalid: [tailLines: Invalid value: -1: must be greater than '
        "or equal to 0, limitBytes: Invalid value: 0: must be greater than 0]"
    )
    assert (await client.get(path, params={"tailLines": "x"})).status_code == 400


async def test_previous_logs(
    client: httpx.AsyncClient, demo: DemoUpstream, pod: Callable[..., dict[str, Any]]
) -> None:
    await _scheduled(client, pod, "prev")
    path = f"{PODS}/prev/log"
    r = await client.get(path, params={"previous": "true"})
    assert r.status_code == 400
    assert r.json()["message"] == 'previous terminated container "c" in pod "prev" not found'
    await demo.store.set_log("demo", "prev", "c", ["crashed here"], previous=True)
    r = await client.get(path, params={"previous": "true"})
    assert r.text == "crashed here\n"


async def test_waiting_container_is_a_400(
    client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]
) -> None:
    await _scheduled(client, pod, "wait")
    body = (await client.get(f"{PODS}/wait")).json()
    body["status"]["containerStatuses"] = [
        {
            "name": "c",
            "ready": False,
            "restartCount": 0,
            "image": "busybox",
            "imageID": "",
            "state": {"waiting": {"reason": "ImagePullBackOff"}},
        }
    ]
    assert (await client.put(f"{PODS}/wait/status", json=body)).status_code == 200
    r = await client.get(f"{PODS}/wait/log")
    assert r.status_code == 400
    assert r.json()["message"] == (
        'container "c" in pod "wait" is waiting to start: ImagePullBackOff'
    )


async def test_follow_streams_until_the_container_ends(
    client: httpx.AsyncClient, demo: DemoUpstream, pod: Callable[..., dict[str, Any]]
) -> None:
    await _scheduled(client, pod, "fol")
    await demo.store.set_log("demo", "fol", "c", ["first"])
    async with client.stream("GET", f"{PODS}/fol/log", params={"follow": "true"}) as resp:
        lines = resp.aiter_lines()
        async with asyncio.timeout(5):
            assert await anext(lines) == "first"
            await demo.store.append_log("demo", "fol", "c", "second")
            assert await anext(lines) == "second"
            await demo.store.append_log("demo", "fol", "c", "third", "fourth")
            assert [await anext(lines), await anext(lines)] == ["third", "fourth"]
            await demo.store.terminate_container("demo", "fol", "c")
            assert [line async for line in lines] == []


async def test_follow_ends_when_the_pod_is_deleted(
    client: httpx.AsyncClient, demo: DemoUpstream, pod: Callable[..., dict[str, Any]]
) -> None:
    await _scheduled(client, pod, "gone")
    async with client.stream(
        "GET", f"{PODS}/gone/log", params={"follow": "1", "tailLines": "1"}
    ) as resp:
        chunks = resp.aiter_text()
        async with asyncio.timeout(5):
            first = await anext(chunks)
            assert first.count("\n") == 1
            await client.delete(f"{PODS}/gone", params={"gracePeriodSeconds": "0"})
            assert "".join([c async for c in chunks]) == ""


async def test_follow_respects_limit_bytes(
    client: httpx.AsyncClient, demo: DemoUpstream, pod: Callable[..., dict[str, Any]]
) -> None:
    await _scheduled(client, pod, "lim")
    await demo.store.set_log("demo", "lim", "c", ["12345"])
    async with client.stream(
        "GET", f"{PODS}/lim/log", params={"follow": "true", "limitBytes": "10"}
    ) as resp:
        body = b""
        async with asyncio.timeout(5):
            stream = resp.aiter_bytes()
            body += await anext(stream)
            await demo.store.append_log("demo", "lim", "c", "abcdefgh")
            body += b"".join([chunk async for chunk in stream])
    assert body == b"12345\nabcd"

"""Lists: selectors, pagination, resourceVersion semantics and their validation."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.sample import make_pods

PODS = "/api/v1/namespaces/demo/pods"
EVENTS = "/api/v1/namespaces/demo/events"


def names(body: dict[str, Any]) -> list[str]:
    return [i["metadata"]["name"] for i in body["items"]]


async def _labelled(client: httpx.AsyncClient, pod: Callable[..., dict[str, Any]]) -> None:
    for name, labels in (
        ("l-a", {"app": "x", "tier": "web", "rank": "3"}),
        ("l-b", {"app": "x", "tier": "db", "rank": "7"}),
        ("l-c", {"app": "y"}),
        ("l-d", {"team": "t"}),
    ):
        body = pod(name)
        body["metadata"]["labels"] = labels
        assert (await client.post(PODS, json=body)).status_code == 201


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=x", ["l-a", "l-b"]),
        ("app==x", ["l-a", "l-b"]),
        ("app!=x", ["l-c", "l-d"]),
        ("app in (x, y)", ["l-a", "l-b", "l-c"]),
        ("app notin (x)", ["l-c", "l-d"]),
        ("tier", ["l-a", "l-b"]),
        ("!tier", ["l-c", "l-d"]),
        ("app=x,tier=web", ["l-a"]),
        ("app=x, !tier", []),
        ("rank>5", ["l-b"]),
        ("rank<5", ["l-a"]),
        ("", ["l-a", "l-b", "l-c", "l-d"]),
    ],
)
async def test_label_selectors(
    client: httpx.AsyncClient,
    pod: Callable[..., dict[str, Any]],
    selector: str,
    expected: list[str],
) -> None:
    await _labelled(client, pod)
    body = (await client.get(PODS, params={"labelSelector": selector})).json()
    assert [n for n in names(body) if n.startswith("l-")] == expected


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        # the wording of a real kube-apiserver 1.36, including its inconsistencies
        ("app in x", "unable to parse requirement: found 'x' expected: '('"),
        ("app=x,", "found '', expected: identifier after ','"),
        ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("=x", "found '=', expected: !, identifier, or 'end of string'"),
        ("app in (x y)", "unable to parse requirement: found 'y', expected: ',' or ')'"),
        (
            "app > x",
            "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', "
            "'Lt' operators, the value must be an integer",
        ),
        (
            "/x=1",
            'unable to parse requirement: <nil>: Invalid value: "/x": prefix part must be '
            "non-empty",
        ),
        ("app=bad value!", "found 'value', expected: ',' or 'end of string'"),
    ],
)
async def test_bad_label_selectors_are_400(
    client: httpx.AsyncClient, selector: str, message: str | None
) -> None:
    r = await client.get(PODS, params={"labelSelector": selector})
    assert r.status_code == 400
    assert r.json()["reason"] == "BadRequest"
    if message:
        assert r.json()["message"] == message


async def test_label_value_validation_message(client: httpx.AsyncClient) -> None:
    r = await client.get(PODS, params={"labelSelector": "app=-bad"})
    assert r.status_code == 400
    assert r.json()["message"].startswith(
        'unable to parse requirement: values[0][app]: Invalid value: "-bad": a valid label must '
        "be an empty string or consist of alphanumeric characters"
    )


async def test_pod_field_selectors(client: httpx.AsyncClient) -> None:
    running = (
        await client.get("/api/v1/pods", params={"fieldSelector": "status.phase=Running"})
    ).json()
    assert running["items"] and all(i["status"]["phase"] == "Running" for i in running["items"])
    on_a = (
        await client.get("/api/v1/pods", params={"fieldSelector": "spec.nodeName=node-a"})
    ).json()
    assert on_a["items"] and all(i["spec"]["nodeName"] == "node-a" for i in on_a["items"])
    unscheduled = (await client.get(PODS, params={"fieldSelector": "spec.nodeName="})).json()
    assert names(unscheduled) == ["pending-7f9d8"]
    combo = (
        await client.get(
            "/api/v1/pods",
            params={"fieldSelector": "metadata.namespace=demo,status.phase!=Running"},
        )
    ).json()
    assert sorted(names(combo)) == ["pending-7f9d8", "worker-28474810-bz4xq"]
    one = (await client.get(PODS, params={"fieldSelector": "metadata.name=pending-7f9d8"})).json()
    assert names(one) == ["pending-7f9d8"]
    r = await client.get(PODS, params={"fieldSelector": "spec.containers=x"})
    assert r.status_code == 400
    assert r.json()["message"] == "field label not supported: spec.containers"
    r = await client.get(PODS, params={"fieldSelector": "nonsense"})
    assert r.status_code == 400
    assert r.json()["message"] == "invalid selector: 'nonsense'; can't understand 'nonsense'"


async def test_event_field_selectors(client: httpx.AsyncClient) -> None:
    pod = (await client.get(f"{PODS}/web-6d4b9c7f5-x7k2p")).json()
    by_object = (
        await client.get(
            EVENTS,
            params={
                "fieldSelector": (
                    "involvedObject.kind=Pod,involvedObject.name=web-6d4b9c7f5-x7k2p,"
                    "involvedObject.namespace=demo"
                )
            },
        )
    ).json()
    assert by_object["items"]
    assert all(e["involvedObject"]["name"] == "web-6d4b9c7f5-x7k2p" for e in by_object["items"])
    by_uid = (
        await client.get(
            EVENTS, params={"fieldSelector": f"involvedObject.uid={pod['metadata']['uid']}"}
        )
    ).json()
    assert names(by_uid) == names(by_object)
    warnings = (await client.get(EVENTS, params={"fieldSelector": "type=Warning"})).json()
    assert [e["reason"] for e in warnings["items"]] == ["BackOff"]
    sched = (
        await client.get(
            EVENTS, params={"fieldSelector": "reason=Scheduled,source=default-scheduler"}
        )
    ).json()
    assert sched["items"] and all(e["reason"] == "Scheduled" for e in sched["items"])
    for field in (
        "involvedObject.fieldPath",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
    ):
        r = await client.get(EVENTS, params={"fieldSelector": f"{field}=x"})
        assert r.status_code == 200


async def test_pagination_is_a_consistent_snapshot(
    client: httpx.AsyncClient, demo: DemoUpstream
) -> None:
    await demo.store.bulk_create("pods", make_pods(25, "paged", prefix="pg"))
    path = "/api/v1/namespaces/paged/pods"
    first = (await client.get(path, params={"limit": 10})).json()
    assert len(first["items"]) == 10
    assert first["metadata"]["remainingItemCount"] == 15
    token = first["metadata"]["continue"]
    snapshot_rv = first["metadata"]["resourceVersion"]
    # the apiserver's own token format: the next key relative to the listed prefix
    assert orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))) == {
        "v": "meta.k8s.io/v1",
        "rv": int(snapshot_rv),
        "start": "/pg-00009\u0000",
    }
    # changes after the first page are not visible to the rest of the list
    await demo.store.delete("pods", "pg-00024", namespace="paged")
    await demo.store.bulk_create("pods", make_pods(1, "paged", prefix="pz"))
    seen = names(first)
    while token:
        page = (await client.get(path, params={"limit": 10, "continue": token})).json()
        assert page["metadata"]["resourceVersion"] == snapshot_rv
        seen += names(page)
        token = page["metadata"].get("continue", "")
    assert seen == [f"pg-{i:05d}" for i in range(25)]
    filtered = (await client.get(path, params={"limit": 5, "labelSelector": "app=pg"})).json()
    assert "remainingItemCount" not in filtered["metadata"]
    assert filtered["metadata"]["continue"]


async def test_expired_continue_token_is_410_with_a_fresh_token(
    client: httpx.AsyncClient, demo: DemoUpstream
) -> None:
    await demo.store.bulk_create("pods", make_pods(6, "paged", prefix="ex"))
    path = "/api/v1/namespaces/paged/pods"
    first = (await client.get(path, params={"limit": 2})).json()
    await demo.store.delete("pods", "ex-00005", namespace="paged")
    demo.faults.compact()
    r = await client.get(path, params={"limit": 2, "continue": first["metadata"]["continue"]})
    assert r.status_code == 410
    status = r.json()
    assert status["reason"] == "Expired"
    assert status["message"].startswith(
        "The provided continue parameter is too old to display a consistent list result."
    )
    inconsistent = status["metadata"]["continue"]
    rest = (await client.get(path, params={"continue": inconsistent})).json()
    assert names(rest) == ["ex-00002", "ex-00003", "ex-00004"]
    r = await client.get(path, params={"continue": "garbage!"})
    assert r.status_code == 400
    r = await client.get(
        path, params={"continue": first["metadata"]["continue"], "resourceVersion": "5"}
    )
    assert r.status_code == 400


async def test_resource_version_semantics(
    client: httpx.AsyncClient, demo: DemoUpstream, pod: Callable[..., dict[str, Any]]
) -> None:
    before = (await client.get(PODS)).json()
    rv = before["metadata"]["resourceVersion"]
    await client.post(PODS, json=pod("later"))
    exact = (
        await client.get(PODS, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
    ).json()
    assert exact["metadata"]["resourceVersion"] == rv
    assert names(exact) == names(before)
    newer = (
        await client.get(
            PODS, params={"resourceVersion": rv, "resourceVersionMatch": "NotOlderThan"}
        )
    ).json()
    assert "later" in names(newer)
    assert int(newer["metadata"]["resourceVersion"]) > int(rv)
    any_rv = (await client.get(PODS, params={"resourceVersion": "0"})).json()
    assert "later" in names(any_rv)
    legacy = (await client.get(PODS, params={"resourceVersion": rv})).json()
    assert "later" in names(legacy)

    demo.faults.compact()
    r = await client.get(PODS, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
    assert r.status_code == 410
    assert r.json()["message"] == "The resourceVersion for the provided list is too old."

    demo.store.too_large_wait = 0.05
    future = str(int(demo.store.resource_version) + 100)
    r = await client.get(PODS, params={"resourceVersion": future})
    assert r.status_code == 504
    assert r.headers["retry-after"] == "1"
    assert r.json()["message"] == (
        f"Timeout: Too large resource version: {future}, current: {demo.store.resource_version}"
    )
    assert r.json()["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    r = await client.get(PODS, params={"resourceVersion": "abc"})
    assert r.status_code == 400


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"resourceVersionMatch": "Exact"},
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless "
            "resourceVersion is provided",
        ),
        (
            {"resourceVersion": "0", "resourceVersionMatch": "Exact"},
            'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for '
            'resourceVersion "0"',
        ),
        (
            {"resourceVersion": "1", "resourceVersionMatch": "Newest"},
            'resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", '
            '"NotOlderThan", ""',
        ),
        (
            {"sendInitialEvents": "true"},
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
        ),
    ],
)
async def test_list_option_validation(
    client: httpx.AsyncClient, params: dict[str, str], message: str
) -> None:
    r = await client.get(PODS, params=params)
    assert r.status_code == 422
    assert r.json()["message"] == f'ListOptions.meta.k8s.io "" is invalid: {message}'
    assert r.json()["details"]["group"] == "meta.k8s.io"
    assert r.json()["details"]["kind"] == "ListOptions"


async def test_listing_5000_pods_whole_and_in_pages(
    client: httpx.AsyncClient, demo: DemoUpstream
) -> None:
    await demo.store.bulk_create("pods", make_pods(5000, "big"))
    r = await client.get("/api/v1/namespaces/big/pods")
    assert r.status_code == 200
    whole = names(r.json())
    assert whole == [f"bulk-{i:05d}" for i in range(5000)]
    assert len(r.content) > 5_000_000
    paged: list[str] = []
    params = {"limit": "1000"}
    for remaining in (4000, 3000, 2000, 1000):
        page = (await client.get("/api/v1/namespaces/big/pods", params=params)).json()
        assert page["metadata"]["remainingItemCount"] == remaining
        paged += names(page)
        params["continue"] = page["metadata"]["continue"]
    last = (await client.get("/api/v1/namespaces/big/pods", params=params)).json()
    assert "continue" not in last["metadata"] and "remainingItemCount" not in last["metadata"]
    assert paged + names(last) == whole

"""A resource the demo has no specific behaviour for is served from the registry and the
schema alone: discovery, CRUD, watch, every patch type and deletion, with no demo edit.

The registry here gains a namespaced ``demo.kube-gateway.io/v1`` Widget whose objects have the
schema of a Pod (the product's schema has no definition of its own for a test group), so
strategic merge patch and server-side apply find their list keys in the schema.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.core.model import schema
from gateway.core.model.registry import REGISTRY, Registry, Resource
from kube_gateway_demo import DemoUpstream

from .conftest import ADMIN, WatchReader

WIDGET = Resource(
    group="demo.kube-gateway.io",
    version="v1",
    kind="Widget",
    plural="widgets",
    singular="widget",
    namespaced=True,
    short_names=("wd",),
)
WIDGETS = "/apis/demo.kube-gateway.io/v1/namespaces/default/widgets"
SMP = {"Content-Type": "application/strategic-merge-patch+json"}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    registry = Registry((*REGISTRY.values(), WIDGET))
    pod_type = schema.kind_type("", "v1", "Pod").name
    demo = DemoUpstream(registry=registry, schema_types={WIDGET.key: pod_type}, seed=False)
    async with demo, httpx.AsyncClient(base_url=demo.url, headers=ADMIN, timeout=10.0) as c:
        yield c


def widget(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "demo.kube-gateway.io/v1",
        "kind": "Widget",
        "metadata": {"name": name, "labels": {"app": "w"}},
        "spec": {"containers": [{"name": "a", "image": "x"}]},
        **extra,
    }


async def test_discovery_lists_the_new_group(client: httpx.AsyncClient) -> None:
    groups = (await client.get("/apis")).json()["groups"]
    assert "demo.kube-gateway.io" in {g["name"] for g in groups}
    listed = (await client.get("/apis/demo.kube-gateway.io/v1")).json()
    assert listed["groupVersion"] == "demo.kube-gateway.io/v1"
    assert listed["resources"] == [
        {
            "name": "widgets",
            "singularName": "widget",
            "namespaced": True,
            "kind": "Widget",
            "verbs": sorted(WIDGET.verbs),
            "shortNames": ["wd"],
        }
    ]


async def test_create_get_list_watch_patch_delete(client: httpx.AsyncClient) -> None:
    start = (await client.get(WIDGETS)).json()
    assert start["kind"] == "WidgetList" and start["items"] == []
    params = {"watch": "1", "resourceVersion": start["metadata"]["resourceVersion"]}
    async with client.stream("GET", WIDGETS, params=params) as stream:
        events = WatchReader(stream)

        created = await client.post(WIDGETS, json=widget("w1", bogus=1))
        assert created.status_code == 201, created.text
        body = created.json()
        assert (body["kind"], body["apiVersion"]) == ("Widget", "demo.kube-gateway.io/v1")
        assert "bogus" not in body  # typed decoding against the schema drops unknown fields
        assert created.headers["warning"] == '299 - "unknown field \\"bogus\\""'
        added = await events.next()
        assert added["type"] == "ADDED" and added["object"] == body

        assert (await client.get(f"{WIDGETS}/w1")).json() == body
        listed = (await client.get(WIDGETS)).json()
        assert [i["metadata"]["name"] for i in listed["items"]] == ["w1"]

        # strategic merge: containers merge by their schema's merge key (name)
        patch = {"spec": {"containers": [{"name": "b", "image": "y"}]}}
        patched = await client.patch(f"{WIDGETS}/w1", json=patch, headers=SMP)
        assert patched.status_code == 200, patched.text
        names = [c["name"] for c in patched.json()["spec"]["containers"]]
        assert names == ["a", "b"]
        modified = await events.next()
        assert modified["type"] == "MODIFIED" and modified["object"] == patched.json()

        deleted = await client.delete(f"{WIDGETS}/w1")
        assert deleted.status_code == 200
        assert deleted.json()["status"] == "Success"
        assert deleted.json()["details"] == {
            "name": "w1",
            "group": "demo.kube-gateway.io",
            "kind": "widgets",
            "uid": body["metadata"]["uid"],
        }
        gone = await events.next()
        assert gone["type"] == "DELETED" and gone["object"]["metadata"]["name"] == "w1"
    missing = await client.get(f"{WIDGETS}/w1")
    assert missing.status_code == 404
    assert missing.json()["message"] == 'widgets.demo.kube-gateway.io "w1" not found'


async def test_update_apply_and_deletecollection(client: httpx.AsyncClient) -> None:
    body = (await client.post(WIDGETS, json=widget("w2"))).json()
    body["metadata"]["labels"]["replaced"] = "yes"
    replaced = await client.put(f"{WIDGETS}/w2", json=body)
    assert replaced.status_code == 200
    assert replaced.json()["metadata"]["labels"] == {"app": "w", "replaced": "yes"}
    stale = await client.put(f"{WIDGETS}/w2", json=body)
    assert stale.status_code == 409

    manifest = (
        b"apiVersion: demo.kube-gateway.io/v1\nkind: Widget\nmetadata:\n  name: w3\n"
        b"spec:\n  containers:\n  - name: a\n    image: x\n"
    )
    applied = await client.patch(
        f"{WIDGETS}/w3",
        content=manifest,
        params={"fieldManager": "tester"},
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert applied.status_code == 201, applied.text
    entry = next(m for m in applied.json()["metadata"]["managedFields"] if m["manager"] == "tester")
    # the containers list is keyed by name in the schema, so apply owns the element by key
    assert entry["fieldsV1"]["f:spec"]["f:containers"] == {
        'k:{"name":"a"}': {".": {}, "f:image": {}, "f:name": {}}
    }

    swept = await client.delete(WIDGETS, params={"labelSelector": "app=w"})
    assert swept.status_code == 200
    assert [i["metadata"]["name"] for i in swept.json()["items"]] == ["w2"]
    left = (await client.get(WIDGETS)).json()["items"]
    assert [i["metadata"]["name"] for i in left] == ["w3"]

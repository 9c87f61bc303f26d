# ruff: noqa: E501  (GraphQL documents read best on one line)
"""A CRD arriving, changing and leaving, seen through the gateway: the same steps on the demo
upstream (``tests/scenarios/test_crd_scenarios.py``) and on the real kube-apiserver
(``tests/e2e/test_crd_scenarios_e2e.py``).

Each step waits on the gateway's own live schema (``LiveSchema.wait_catalog``: the catalog
taken in and the group schemas refreshed), bounded, never on a sleep.  The CRD's fields are
strings, integers, booleans, objects and arrays only.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette

from gateway.graphql.schemas.schema import group_scopes
from tests.e2e.test_discovered_graphql_e2e import _ws
from tests.support.graphql import TransportWS

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
#: How long the gateway may take to serve (or drop) a group after its CRD changed: generous
#: on a loaded machine (the real apiserver publishes OpenAPI within ~0.5 s).
BOUND_S = 30.0
_counter = itertools.count()


@dataclass
class CrdBackend:
    """The gateway in front of an upstream, and an admin client of that upstream."""

    name: str
    url: str
    app: Starlette
    token: str
    upstream: httpx.AsyncClient
    namespace: str = "team-a"
    timings: dict[str, float] = field(default_factory=dict)
    ended_with: list[dict[str, Any]] = field(default_factory=list)


def gadget_crd(group: str, *, shape: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "type": "object",
        "properties": {
            "size": {"type": "integer"},
            "color": {"type": "string"},
            "enabled": {"type": "boolean"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "parts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "count": {"type": "integer"}},
                },
            },
        },
    }
    if shape:
        spec["properties"]["shape"] = {"type": "string"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gadgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": spec,
                                "status": {
                                    "type": "object",
                                    "properties": {"ready": {"type": "boolean"}},
                                },
                            },
                        }
                    },
                    "subresources": {"status": {}},
                }
            ],
        },
    }


async def _message_of(ws: TransportWS, op: str) -> dict[str, Any]:
    """The next message of the one subscription on ``ws``."""
    message = await ws.recv(BOUND_S)
    assert message.get("id") == op, message
    return message


async def _next_of(ws: TransportWS, op: str) -> dict[str, Any]:
    """The next change of the one subscription on ``ws`` (``RESYNC`` frames, which the
    gateway sends after relisting a watch the upstream refused or closed, passed over)."""
    while True:
        message = await _message_of(ws, op)
        assert message["type"] == "next" and "data" in message["payload"], message
        data: dict[str, Any] = message["payload"]["data"]
        (event,) = data.values()
        if event["type"] != "RESYNC":
            return data


async def _wait(b: CrdBackend, step: str, ready: Any) -> None:
    live = b.app.state.runtime.live_schema
    started = time.monotonic()
    async with asyncio.timeout(BOUND_S):
        await live.wait_catalog(ready)
    b.timings[step] = time.monotonic() - started


async def crd_lifecycle(b: CrdBackend) -> None:
    """Create a CRD, use its kind through the gateway, add a field, delete it."""
    group = f"s{os.getpid() % 10000}-{next(_counter)}.scenario.kube-gateway.dev"
    path = f"/apis/{group}/graphql"
    headers = {"Authorization": f"Bearer {b.token}"}
    crd_name = f"gadgets.{group}"

    async with httpx.AsyncClient(base_url=b.url, headers=headers, timeout=60) as gql:

        async def run(query: str, **variables: Any) -> dict[str, Any]:
            response = await gql.post(path, json={"query": query, "variables": variables})
            body: dict[str, Any] = response.json()
            assert response.status_code == 200 and not body.get("errors"), body
            data: dict[str, Any] = body["data"]
            return data

        assert (await gql.post(path, json={"query": "{ __typename }"})).status_code == 404
        created = await b.upstream.post(CRDS, json=gadget_crd(group))
        assert created.status_code == 201, created.text
        await _wait(b, "served", lambda catalog: group in group_scopes(catalog))

        ns = b.namespace
        async with _ws(b.url, b.token, path) as ws:
            op = await ws.subscribe(
                "subscription($ns: String!) { watchGadgets(namespace: $ns) { type object { metadata { name } spec { size color } } } }",
                {"ns": ns},
            )
            made = await run(
                "mutation($ns: String!, $m: JSON!) { createGadgetFromManifest(namespace: $ns, manifest: $m) { metadata { name } spec { size color enabled labels parts { name count } } } }",
                ns=ns,
                m={
                    "apiVersion": f"{group}/v1",
                    "kind": "Gadget",
                    "metadata": {"name": "g1"},
                    "spec": {
                        "size": 3,
                        "color": "red",
                        "enabled": True,
                        "labels": {"tier": "gold"},
                        "parts": [{"name": "bolt", "count": 4}],
                    },
                },
            )
            assert made["createGadgetFromManifest"]["spec"] == {
                "size": 3,
                "color": "red",
                "enabled": True,
                "labels": {"tier": "gold"},
                "parts": [{"name": "bolt", "count": 4}],
            }
            event = (await _next_of(ws, op))["watchGadgets"]
            assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "g1")
            listed = await run(
                "query($ns: String!) { gadgets(namespace: $ns) { items { metadata { name } spec { size } } } }",
                ns=ns,
            )
            assert listed["gadgets"]["items"] == [{"metadata": {"name": "g1"}, "spec": {"size": 3}}]
            got = await run(
                'query($ns: String!) { gadget(namespace: $ns, name: "g1") { spec { color } } }',
                ns=ns,
            )
            assert got["gadget"]["spec"]["color"] == "red"
            patched = await run(
                'mutation($ns: String!) { patchGadget(namespace: $ns, name: "g1", type: MERGE, patch: {spec: {size: 4}}) { spec { size } } }',
                ns=ns,
            )
            assert patched["patchGadget"]["spec"]["size"] == 4
            event = (await _next_of(ws, op))["watchGadgets"]
            assert (event["type"], event["object"]["spec"]["size"]) == ("MODIFIED", 4)

        # A new field: the group's schema is rebuilt and the field becomes queryable.
        current = (await b.upstream.get(f"{CRDS}/{crd_name}")).json()
        changed = copy.deepcopy(current)
        changed["spec"]["versions"] = gadget_crd(group, shape=True)["spec"]["versions"]
        put = await b.upstream.put(f"{CRDS}/{crd_name}", json=changed)
        assert put.status_code == 200, put.text

        async def has_shape() -> bool:
            body = (
                await gql.post(
                    path, json={"query": '{ __type(name: "GadgetSpec") { fields { name } } }'}
                )
            ).json()
            fields = ((body.get("data") or {}).get("__type") or {}).get("fields") or []
            return any(f["name"] == "shape" for f in fields)

        started = time.monotonic()
        live = b.app.state.runtime.live_schema
        async with asyncio.timeout(BOUND_S):
            while True:
                # every catalog read so far taken in; else the next one (the gateway's
                # reloader follows the CRD watch and re-reads discovery and OpenAPI)
                taken = await live.wait_catalog(lambda c: True)
                if await has_shape():
                    break
                await live.wait_catalog(lambda c, g=taken.generation: c.generation > g)
        b.timings["new field"] = time.monotonic() - started
        shaped = await run(
            'mutation($ns: String!) { patchGadget(namespace: $ns, name: "g1", type: MERGE, patch: {spec: {shape: "round"}}) { spec { shape size } } }',
            ns=ns,
        )
        assert shaped["patchGadget"]["spec"] == {"shape": "round", "size": 4}

        # Delete: the kind goes away, a subscription on it ends with a clear error.
        async with _ws(b.url, b.token, path) as ws:
            op = await ws.subscribe(
                "subscription($ns: String!) { watchGadgets(namespace: $ns) { type object { metadata { name } } } }",
                {"ns": ns},
            )
            first = (await _next_of(ws, op))["watchGadgets"]
            assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "g1")
            started = time.monotonic()
            deleted = await b.upstream.delete(f"{CRDS}/{crd_name}")
            assert deleted.status_code == 200, deleted.text
            await _wait(b, "gone", lambda catalog: group not in group_scopes(catalog))
            async with asyncio.timeout(BOUND_S):
                message = await _message_of(ws, op)
                while message["type"] == "next" and "data" in message["payload"]:
                    # g1 goes with its kind: its DELETED, or (when the gateway's watch had
                    # to relist while the kind was being torn down) a RESYNC frame around it;
                    # before them, the shape patch's MODIFIED where the subscription's first
                    # state was taken before the hub's watch had that patch's event (it
                    # started at the hub's version, as a watch from the apiserver's cache does)
                    event = message["payload"]["data"]["watchGadgets"]
                    assert event["type"] in ("MODIFIED", "DELETED", "RESYNC"), message
                    if event["type"] != "RESYNC":
                        assert event["object"]["metadata"]["name"] == "g1", message
                    message = await _message_of(ws, op)
            b.timings["subscription ended"] = time.monotonic() - started
            errors = (
                message["payload"]
                if message["type"] == "error"
                else message["payload"].get("errors")
            )
            assert errors, message
            codes = {(e.get("extensions") or {}).get("code") for e in errors}
            assert codes == {"NOT_FOUND"}, errors
            b.ended_with = errors
        gone = await gql.post(path, json={"query": "{ __typename }"})
        assert gone.status_code == 404

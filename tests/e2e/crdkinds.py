"""Exercising every kind of a CRD group through its GraphQL endpoint (the zoo and corpus
tests): a subscription, a create from a manifest, a get, a list and the ``ADDED`` event,
with what the gateway answers compared to what the apiserver answers directly."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.core.model.registry import Resource
from gateway.graphql.endpoints.live import LiveSchema
from gateway.graphql.resolvers import operations as ops
from tests.support.graphql import TransportWS

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@dataclass(frozen=True)
class Names:
    """A kind's root fields in its group's schema (as :mod:`gateway.graphql.schemas.native` names
    them from the kind's GraphQL type name)."""

    resource: Resource
    type_name: str

    @property
    def get(self) -> str:
        return ops._lower(self.type_name)

    @property
    def list(self) -> str:
        return ops.list_field_name(self.resource, self.type_name)

    @property
    def create(self) -> str:
        return f"create{self.type_name}FromManifest"

    @property
    def watch(self) -> str:
        return "watch" + ops.plural_type_name(self.resource, self.type_name)


async def group_names(live: LiveSchema, group: str) -> list[Names]:
    """The names of every kind ``group``'s schema serves (built now if it is not)."""
    await live.group_app(group)
    built = live.groups[group].built  # read at once: nothing can evict it in between
    return [
        Names(r, built.model.kind_type(r.group, r.version, r.kind).short_name)
        for r in built.registry.values()
        if r.group == group
    ]


def path(r: Resource, name: str = "", namespace: str = "") -> str:
    """The apiserver's path of ``r`` (a collection, or one object)."""
    base = f"/apis/{r.group}/{r.version}"
    if r.namespaced:
        base += f"/namespaces/{namespace}"
    base += f"/{r.plural}"
    return f"{base}/{name}" if name else base


@contextlib.asynccontextmanager
async def ws(url: str, token: str, at: str) -> AsyncIterator[TransportWS]:
    from websockets.asyncio.client import connect

    async with connect(
        url.replace("http://", "ws://") + at,
        subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
        max_size=2**24,
    ) as socket:
        client = TransportWS(socket)
        await client.send(
            {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
        )
        ack = await client.recv(60)
        assert ack["type"] == "connection_ack", ack
        yield client


async def added(client: TransportWS, op_id: str, watch: str, name: str) -> dict[str, Any]:
    """The ``ADDED`` event of ``name`` on subscription ``op_id`` (other events and RESYNC
    markers passed over; this client carries one subscription)."""
    while True:
        message = await client.recv(120)
        assert message.get("id") == op_id and message["type"] == "next", message
        payload = message["payload"]
        assert "errors" not in payload, payload
        event = payload["data"][watch]
        if event["type"] == "ADDED" and event["object"]["metadata"]["name"] == name:
            return event  # type: ignore[no-any-return]


@dataclass
class Outcome:
    """What one kind answered."""

    kind: str
    created: bool
    #: The apiserver's refusal of the example, as the gateway relayed it (code, message).
    refused: tuple[str, str] | None = None


async def exercise(
    *,
    gql: httpx.AsyncClient,
    admin: httpx.AsyncClient,
    url: str,
    token: str,
    at: str,
    names: Names,
    manifest: dict[str, Any],
    namespace: str,
    typed: str = "",
    typed_expected: Callable[[dict[str, Any]], Any] | None = None,
) -> Outcome:
    """Subscribe to ``names``' kind, create ``manifest`` through the gateway, then get, list
    and take the ``ADDED`` event; each answer's ``raw`` is the apiserver's own object, and
    ``typed`` (a selection on the kind) equals ``typed_expected(that object)``."""
    r = names.resource
    name = manifest["metadata"]["name"]
    ns_arg, ns_var, ns_value = (
        ("(namespace: $ns)", "($ns: String!)", {"ns": namespace}) if r.namespaced else ("", "", {})
    )
    ns_in = "namespace: $ns, " if r.namespaced else ""
    selection = "{ metadata { name } raw " + typed + " }"

    async def run(query: str, **variables: Any) -> dict[str, Any]:
        response = await gql.post(at, json={"query": query, "variables": variables})
        assert response.status_code == 200, response.text[:2000]
        return response.json()  # type: ignore[no-any-return]

    async with ws(url, token, at) as client:
        op = await client.subscribe(
            f"subscription{ns_var} {{ {names.watch}{ns_arg} "
            "{ type object { metadata { name } raw } } }",
            ns_value,
        )
        made = await run(
            f"mutation($m: JSON!{', $ns: String!' if r.namespaced else ''}) "
            f"{{ {names.create}({ns_in}manifest: $m) {selection} }}",
            m=manifest,
            **ns_value,
        )
        if "errors" in made:
            (error,) = made["errors"]
            return Outcome(r.kind, False, (error["extensions"]["code"], error["message"]))
        direct = (await admin.get(path(r, name, namespace))).json()
        assert made["data"][names.create]["raw"] == direct
        got = await run(
            f"query($n: String!{', $ns: String!' if r.namespaced else ''}) "
            f"{{ {names.get}({ns_in}name: $n) {selection} }}",
            n=name,
            **ns_value,
        )
        assert "errors" not in got, got
        assert got["data"][names.get]["raw"] == direct, r.kind
        if typed_expected is not None:
            answer = {k: v for k, v in got["data"][names.get].items() if k not in ("raw",)}
            assert answer == typed_expected(direct), r.kind
        listed = await run(
            f"query{ns_var} {{ {names.list}{ns_arg} {{ items {{ metadata {{ name }} raw }} }} }}",
            **ns_value,
        )
        assert "errors" not in listed, listed
        items = {i["metadata"]["name"]: i["raw"] for i in listed["data"][names.list]["items"]}
        assert items[name] == direct, r.kind
        event = await added(client, op, names.watch, name)
        assert event["object"]["raw"] == direct, r.kind
    return Outcome(r.kind, True)

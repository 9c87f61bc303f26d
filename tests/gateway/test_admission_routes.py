"""Every way into the GraphQL side passes the same admission: a table of every route.

The gateway is served with two clusters (``default`` and ``b``, two demo upstreams), group
schemas on, and once with trusted documents, once with Automatic Persisted Queries off.
Every route the application has is looked up in :data:`OPERATIONS` (routes that run
GraphQL operations, each probed over HTTP and WebSocket) or :data:`NO_OPERATIONS` (routes
that run none); a route in neither fails the test, so an endpoint added later is covered
from the start or the suite says which one is not.  Each operation route is then attacked
with what the admission must refuse:

- a document the trusted-documents manifest does not hold (a fleet mutation among them:
  nothing is written on either cluster);
- a hash registration while Automatic Persisted Queries are off;
- an introspection multiplied through fragments, and one nested to produce far more than
  the schema's full introspection;
- variables the operation does not declare;
- ``Impersonate-*`` from the caller, an oversized body, a foreign browser origin.

Each refusal is precise (its code) and fast; the same endpoint serves an honest operation
right after.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from graphql import get_introspection_query
from starlette.routing import Mount, Route, WebSocketRoute
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from gateway.core import DEFAULT, Cluster, Fleet, KubeAdapter, Visibility, WatchHub
from gateway.core.model.registry import LEASE
from gateway.graphql.endpoints.server import GraphQLApp
from gateway.graphql.engine.admission import Admission
from gateway.graphql.engine.persisted import Persisted
from kube_gateway_demo import DemoUpstream
from tests.gateway.test_fleet import gateway, kubeconfig, serves, until
from tests.support.graphql import ADMIN, NAMESPACE, Gateway, TransportWS

AUTH = {"Authorization": f"Bearer {ADMIN}"}
GROUP = "demo.kube-gateway.dev"

#: Route templates that run GraphQL operations, and the path each is probed at.
OPERATIONS = {
    "/graphql": "/graphql",
    "/apis/{group}/graphql": f"/apis/{GROUP}/graphql",
    "/clusters/{name}/graphql": "/clusters/b/graphql",
    "/clusters/{name}/apis/{group}/graphql": f"/clusters/b/apis/{GROUP}/graphql",
    "/fleet/graphql": "/fleet/graphql",
}
#: Routes that run no operation (pages, probes, GraphiQL's settings and assets).
NO_OPERATIONS = {
    "/",
    "/healthz",
    "/readyz",
    "/metrics",
    "/graphql/graphiql.json",
    "/graphql/static",
    "/apis/{group}/graphql/graphiql.json",
    "/clusters/{name}/graphql/graphiql.json",
    "/clusters/{name}/apis/{group}/graphql/graphiql.json",
    "/fleet/graphql/graphiql.json",
    "/fleet/graphql/static",
}

#: A document that reads the schema: served to callers the cluster authenticates only.
SCHEMA = "query Schema { __schema { queryType { name } } }"
#: An honest query every endpoint's schema answers (the fleet's too).
HONEST = "query Honest { __typename }"
#: A query the manifest does not hold: a write to every cluster on the fleet endpoint.
UNTRUSTED_MUTATION = (
    'mutation { fleet(clusters: ["*"]) { createLease(namespace: "demo", '
    'body: {metadata: {name: "planted"}}) { metadata { name } } } }'
)
#: 30 aliases (the most a document may hold) multiplied through fragments under
#: ``__schema``: a 0.4 KB document that selects 3,584 fields.
AMPLIFIED = (
    "query { "
    + " ".join(f"a{i}: __schema {{ ...S }}" for i in range(7))
    + " } fragment S on __Schema { "
    + " ".join(f"b{i}: types {{ ...T }}" for i in range(7))
    + " } fragment T on __Type { "
    + " ".join(f"c{i}: fields {{ ...F }}" for i in range(8))
    + " } fragment F on __Field { "
    + " ".join(f"d{i}: name" for i in range(8))
    + " }"
)
#: graphql-core refuses ``fields`` nested three deep in introspection (validation); two
#: deep, aliased 20 times: a small, valid document whose answer would be ~7 times the
#: schema's full introspection.
_TWO = "fields { name type { name kind } }"
NESTED = (
    "query { "
    + " ".join(
        f"a{i}: __schema {{ types {{ fields {{ type {{ {_TWO} }} }} }} }}" for i in range(20)
    )
    + " }"
)
#: ... and one nested three deep, which validation refuses.
TOO_DEEP = (
    "query { __schema { types { fields { type { fields { type { fields { name } } } } } } } }"
)


def routes_of(app: Any) -> dict[str, str]:
    """Every route of the application, by path, with its kind."""
    found: dict[str, str] = {}
    for route in app.routes:
        kind = {Route: "http", WebSocketRoute: "websocket", Mount: "mount"}[type(route)]
        found.setdefault(route.path, kind)
        if kind == "websocket":
            found[route.path] = "http+websocket" if route.path in found else kind
    return found


@contextlib.asynccontextmanager
async def two_clusters(
    tmp_path: Path, *flags: str
) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient, DemoUpstream, DemoUpstream]]:
    token = tmp_path / "token"
    token.write_text(ADMIN)
    async with DemoUpstream() as a, DemoUpstream() as b:
        config = kubeconfig(tmp_path / "b.yaml", b.url)
        async with gateway(
            a, "--cluster", f"b={config}", "--discovery-token-file", str(token), *flags
        ) as (served, fleet, client):
            await until(fleet, serves("b"))
            live = served.app.state.runtime.live_schema
            await live.wait_ready()
            yield served, client, a, b


#: The slowest refusal seen (each is a dictionary look-up, a parse, or an introspection
#: stopped at its budget: milliseconds on an idle machine).
SLOWEST: list[float] = [0.0]


async def post(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], **headers: str
) -> httpx.Response:
    started = time.perf_counter()
    response = await client.post(path, json=body, headers={**AUTH, **headers})
    SLOWEST[0] = max(SLOWEST[0], time.perf_counter() - started)
    return response


def code(response: httpx.Response) -> str:
    return str(response.json()["errors"][0]["extensions"]["code"])


async def ws_errors(base: str, path: str, payload: dict[str, Any], **headers: str) -> Any:
    """What one operation over graphql-transport-ws gets first: its ``error`` message's
    errors, a payload, or the close code of a refused connection."""
    url = base.replace("http://", "ws://") + path
    try:
        async with connect(
            url,
            subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
            additional_headers=headers,
        ) as ws:
            client = TransportWS(ws)
            await client.send({"type": "connection_init", "payload": AUTH})
            ack = await client.recv()
            assert ack["type"] == "connection_ack", ack
            await client.send({"id": "1", "type": "subscribe", "payload": payload})
            return await client.recv()
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd is not None else None


def test_every_route_is_classified() -> None:
    """Sanity of the table itself: no template is in both."""
    assert not set(OPERATIONS) & NO_OPERATIONS


async def test_an_endpoint_cannot_be_built_without_the_admission() -> None:
    async with httpx.AsyncClient(base_url="http://127.0.0.1:1") as http:
        adapter = KubeAdapter(http)
        fleet = Fleet()
        fleet.add(DEFAULT, Cluster(adapter, WatchHub(adapter)))
        served = {"cluster": fleet.get(), "fleet": fleet, "visibility": Visibility(fleet)}
        with pytest.raises(TypeError):
            GraphQLApp(**served)  # type: ignore[call-arg]
        with pytest.raises(TypeError):
            GraphQLApp(admission=None, **served)  # type: ignore[arg-type]
        app = GraphQLApp(admission=Admission(Persisted()), **served)
        assert app.sibling().admission is app.admission


async def test_trusted_documents_hold_on_every_route(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_bytes(orjson.dumps({hashlib.sha256(HONEST.encode()).hexdigest(): HONEST}))
    async with two_clusters(tmp_path, "--trusted-documents", str(manifest)) as (gw, client, a, b):
        found = routes_of(gw.app)
        unclassified = set(found) - set(OPERATIONS) - NO_OPERATIONS
        assert not unclassified, f"routes with no admission probe: {sorted(unclassified)}"
        for template, kind in found.items():
            if template in OPERATIONS:
                assert kind == "http+websocket", (template, kind)
        for path in OPERATIONS.values():
            refused = await post(client, path, {"query": UNTRUSTED_MUTATION})
            assert refused.status_code == 403, (path, refused.text)
            assert code(refused) == "PERSISTED_QUERY_NOT_ALLOWED", path
            message = await ws_errors(gw.url, path, {"query": UNTRUSTED_MUTATION})
            assert message["type"] == "error", (path, message)
            assert message["payload"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_ALLOWED"
            served = await client.post(path, json={"query": HONEST}, headers=AUTH)
            assert served.status_code == 200, (path, served.text)
            assert served.json()["data"]["__typename"], path
        # Orders of magnitude, on a loaded machine: no refusal does real work.
        assert SLOWEST[0] < 3, SLOWEST
        for upstream in (a, b):
            planted = await upstream.store.list(LEASE, namespace=NAMESPACE)
            assert "planted" not in {o["metadata"]["name"] for o in planted}


async def test_persisted_query_policy_holds_on_every_route(tmp_path: Path) -> None:
    digest = hashlib.sha256(HONEST.encode()).hexdigest()
    register = {
        "query": HONEST,
        "extensions": {"persistedQuery": {"version": 1, "sha256Hash": digest}},
    }
    by_hash = {"extensions": register["extensions"]}
    async with two_clusters(tmp_path, "--no-persisted-queries") as (_, client, _a, _b):
        for path in OPERATIONS.values():
            await post(client, path, register)  # registers nothing
            refused = await post(client, path, by_hash)
            assert refused.status_code == 400, (path, refused.text)
            assert code(refused) == "PERSISTED_QUERY_NOT_SUPPORTED", path


async def test_limits_origins_and_identity_hold_on_every_route(tmp_path: Path) -> None:
    async with two_clusters(tmp_path) as (gw, client, _, _b):
        limits = gw.graphql.limits
        for path in OPERATIONS.values():
            amplified = await post(client, path, {"query": AMPLIFIED})
            assert amplified.status_code == 400, (path, amplified.text[:300])
            assert code(amplified) == "QUERY_TOO_COMPLEX", path
            # Stopped at its budget (1.5 times the full introspection's values): real work,
            # but bounded by the schema's size, whatever the document multiplies (unbounded,
            # this one would cost ~14 full introspections on the cluster's schema).  Measured
            # in the CPU time of the introspection thread, where both run (its pauses not
            # counted; neither a loaded machine nor the process's other work stretches it).
            # The endpoint's schema in place (the fleet's is derived on first use), and its
            # introspection budget sized (a schema-reading document's first use does it).
            await client.post(path, json={"query": SCHEMA}, headers=AUTH)
            threads = gw.graphql.admission.introspections  # one, shared by every endpoint
            started = threads.cpu_seconds()
            nested = await client.post(path, json={"query": NESTED}, headers=AUTH)
            refused_cpu = threads.cpu_seconds() - started
            started = threads.cpu_seconds()
            # The full introspection under a name of its own: computed, not the kept answer.
            uncached = get_introspection_query().replace("IntrospectionQuery", "Once", 1)
            full = await client.post(path, json={"query": uncached}, headers=AUTH)
            full_cpu = threads.cpu_seconds() - started
            assert "errors" not in full.json(), (path, full.text[:300])
            # ~2.5 full introspections where the budget is 1.5 of the schema's; up to ~4 where
            # the schema is small and the budget's floor (32,000 values) is above that
            assert refused_cpu < 6 * full_cpu + 0.1, (path, refused_cpu, full_cpu)
            assert nested.status_code == 400, (path, nested.text[:300])
            assert code(nested) == "QUERY_TOO_COMPLEX", path
            assert len(nested.content) < 2_000, path
            too_deep = await post(client, path, {"query": TOO_DEEP})
            assert code(too_deep) == "GRAPHQL_VALIDATION_FAILED", (path, too_deep.text[:300])
            undeclared = await post(
                client, path, {"query": HONEST, "variables": {"junk": "x" * 100_000}}
            )
            assert undeclared.status_code == 400, path
            assert code(undeclared) == "BAD_REQUEST", path
            assert "$junk" in undeclared.json()["errors"][0]["message"]
            for anonymous in ({}, {"Authorization": "Bearer not-a-token"}):
                schema = await client.post(
                    path, json={"query": SCHEMA}, headers={"Authorization": "", **anonymous}
                )
                assert schema.status_code == 401, (path, schema.text[:300])
                assert code(schema) == "UNAUTHENTICATED", path
            impersonating = await post(client, path, {"query": HONEST}, **{"Impersonate-User": "x"})
            assert impersonating.status_code == 403, path
            too_large = await client.post(
                path,
                content=b" " * (limits.max_body_bytes + 1),
                headers={**AUTH, "content-type": "application/json"},
            )
            assert too_large.status_code == 413, path
            foreign = await ws_errors(
                gw.url, path, {"query": HONEST}, Origin="https://evil.example"
            )
            assert foreign == 4403, (path, foreign)
            message = await ws_errors(
                gw.url, path, {"query": HONEST, "variables": {"junk": "x" * 1000}}
            )
            assert message["type"] == "error", (path, message)
            assert message["payload"][0]["extensions"]["code"] == "BAD_REQUEST", path
            served = await client.post(path, json={"query": HONEST}, headers=AUTH)
            assert served.status_code == 200, (path, served.text)
        # Orders of magnitude, on a loaded machine: no refusal does real work.
        assert SLOWEST[0] < 3, SLOWEST


async def test_an_anonymous_caller_learns_no_group_and_builds_no_schema(tmp_path: Path) -> None:
    """Whether a group exists is discovery (authenticated callers only), and a group's
    schema is work: an anonymous or unknown caller gets the same 401 for a group that
    exists and one that does not, over HTTP and WebSocket, and no schema is built."""
    async with two_clusters(tmp_path) as (gw, client, _, _b):
        live = gw.app.state.runtime.live_schema
        built = set(live.groups)
        answers = set()
        for group in (GROUP, "nope.example.com", *(f"g{i}.example.com" for i in range(20))):
            for path in (f"/apis/{group}/graphql", f"/clusters/b/apis/{group}/graphql"):
                for token in (None, "not-a-token"):
                    headers = {"Authorization": f"Bearer {token}"} if token else {}
                    response = await client.post(path, json={"query": HONEST}, headers=headers)
                    answers.add((response.status_code, code(response)))
        assert answers == {(401, "UNAUTHENTICATED")}
        assert set(live.groups) == built
        url = gw.url.replace("http://", "ws://")
        for group in (GROUP, "nope.example.com"):
            async with connect(
                f"{url}/apis/{group}/graphql",
                subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
            ) as ws:
                await ws.send(orjson.dumps({"type": "connection_init", "payload": {}}).decode())
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.recv()
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
        # An authenticated caller is told the truth, and served.
        served = await post(client, f"/apis/{GROUP}/graphql", {"query": HONEST})
        assert served.status_code == 200, served.text
        missing = await post(client, "/apis/nope.example.com/graphql", {"query": HONEST})
        assert missing.status_code == 404
        message = await ws_errors(gw.url, f"/apis/{GROUP}/graphql", {"query": HONEST})
        assert message["type"] == "next", message
        # GraphiQL's page loads for any path (a browser's navigation carries no token).
        page = await client.get(f"/apis/{GROUP}/graphql", headers={"Accept": "text/html"})
        assert page.status_code == 200 and "graphiql" in page.text.lower()

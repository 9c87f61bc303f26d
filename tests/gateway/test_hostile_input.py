"""Hostile input over real sockets: each refused clearly, before the work it would cost
(counted: calls made, bytes sent upstream), while a well-behaved client is served normally,
and memory stays bounded."""

from __future__ import annotations

import asyncio
import os
import resource
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import graphql
import grpc
import httpx
import orjson
import pytest
import yaml
from websockets.asyncio.client import connect

from gateway.graphql.resolvers.operations import YAML_MAX_NODES
from gateway.grpc.gen.kubegateway.v1 import leases_pb2, leases_pb2_grpc
from gateway.settings import Settings
from kube_gateway_demo import DemoUpstream
from tests.support.calls import calls_to
from tests.support.graphql import ADMIN, NAMESPACE, Gateway, serve_app, serve_gateway, ws_client
from tests.support.tap import Tap

QUERY = '{ leases(namespace: "demo") { items { metadata { name } } } }'


async def _well_behaved(client: httpx.AsyncClient, stop: asyncio.Event) -> int:
    """A normal caller's queries while the attack runs; returns how many were served."""
    served = 0
    while not stop.is_set():
        response = await client.post("/graphql", json={"query": QUERY})
        assert response.status_code == 200 and "errors" not in response.json()
        served += 1
    return served


def _rss_mib() -> float:
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize(
    "document",
    [
        "{ " + "a " * 500_000 + "}",  # 1 MB of fields
        "{ leases { items { " * 20_000,  # braces nested far too deep
        "query { " + "x: __typename " * 60_000 + "}",  # aliases
    ],
    ids=["1MB-of-fields", "deep-nesting", "alias-flood"],
)
async def test_an_oversized_document_is_refused_unparsed_while_others_are_served(
    gateway: Gateway, document: str
) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    limit = gateway.graphql.limits.max_document_bytes
    assert len(document) > limit
    async with (
        httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=30) as attacker,
        httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=30) as client,
    ):
        # the normal caller's document is parsed once, then served from the cache: from here
        # on only the attacker's document could reach the parser
        assert "errors" not in (await client.post("/graphql", json={"query": QUERY})).json()
        stop = asyncio.Event()
        normal = asyncio.create_task(_well_behaved(client, stop))
        with calls_to(graphql.parse, graphql.validate) as calls:
            response = await attacker.post("/graphql", json={"query": document})
        stop.set()
        served = await normal
    assert response.status_code == 413, response.text
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "DOCUMENT_TOO_LARGE"
    assert error["message"] == f"the GraphQL document is larger than {limit} bytes"
    # refused on its size alone: never parsed, let alone validated
    assert calls == {graphql.parse: 0, graphql.validate: 0}
    assert served >= 1  # the other caller was served meanwhile


async def test_a_document_over_the_token_limit_is_refused_before_validation(
    gateway: Gateway,
) -> None:
    max_tokens = gateway.graphql.limits.max_tokens
    document = "{ " + "a " * 6_000 + "}"  # 12 KB: under the size limit
    assert len(document) < gateway.graphql.limits.max_document_bytes
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        with calls_to(graphql.parse, graphql.validate) as calls:
            response = await client.post(
                "/graphql", json={"query": document}, headers={"Authorization": f"Bearer {ADMIN}"}
            )
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "GRAPHQL_PARSE_FAILED"
    assert f"more than {max_tokens} tokens" in error["message"]
    # parsing stopped at the first token over the limit: "{" is the first, so the one over
    # it is the 5000th "a", at column 3 + 2 * 4999 of the 6000
    assert error["locations"] == [{"line": 1, "column": 3 + 2 * (max_tokens - 1)}]
    assert calls == {graphql.parse: 1, graphql.validate: 0}


async def test_self_spreading_fragments_are_refused(gateway: Gateway) -> None:
    document = "query { ...A } fragment A on Query { ...B } fragment B on Query { ...A }"
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        response = await client.post(
            "/graphql", json={"query": document}, headers={"Authorization": f"Bearer {ADMIN}"}
        )
    assert response.status_code == 400
    assert "within itself" in response.json()["errors"][0]["message"]


async def test_distinct_bad_documents_leave_memory_bounded(gateway: Gateway) -> None:
    engine = gateway.graphql.engine
    body = "{ " + "a " * 15_000 + "}"  # 30 KB each, each distinct, each invalid
    async with httpx.AsyncClient(
        base_url=gateway.url, timeout=30, headers={"Authorization": f"Bearer {ADMIN}"}
    ) as client:
        before = _rss_mib()
        for i in range(600):
            response = await client.post("/graphql", json={"query": body + f"# {i}"})
            assert response.status_code == 400
        grown = _rss_mib() - before
    assert len(engine._documents) <= 1  # failures are never cached
    assert engine._cached_bytes <= gateway.graphql.limits.cache_bytes
    assert grown < 64, f"RSS grew {grown:.0f} MiB over 600 bad documents"
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert peak_mib < 2048


async def test_the_parse_cache_is_bounded_in_bytes(gateway: Gateway) -> None:
    engine = gateway.graphql.engine
    engine.limits = engine.limits.__class__(cache_bytes=64 * 1024)
    padding = "#" + "x" * 20_000 + "\n"
    async with httpx.AsyncClient(
        base_url=gateway.url, timeout=30, headers={"Authorization": f"Bearer {ADMIN}"}
    ) as client:
        for i in range(10):
            document = f"{padding}query Q{i} {{ __typename }}"
            response = await client.post("/graphql", json={"query": document})
            assert response.status_code == 200, response.text
    assert engine._cached_bytes <= 64 * 1024
    assert len(engine._documents) == 3


YAML_BOMB = "\n".join(
    [
        "apiVersion: v1",
        "kind: Pod",
        "metadata: {name: bomb}",
        "a: &a [x, x, x, x, x, x, x, x, x]",
        *(
            f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]"
            for p, n in zip("abcdef", "bcdefg", strict=True)
        ),
    ]
)


@pytest.fixture
async def tap(demo: DemoUpstream) -> AsyncIterator[Tap]:
    """What reaches the demo upstream, on the wire."""
    async with Tap.before(demo.url) as tapped:
        yield tapped


@pytest.fixture
async def tapped_gateway(demo: DemoUpstream, tap: Tap) -> AsyncIterator[Gateway]:
    """The gateway calling the demo upstream through ``tap``."""
    async with serve_gateway(demo, server=tap.url) as gw:
        yield gw


async def test_a_yaml_alias_bomb_is_refused_before_any_upstream_call(
    tapped_gateway: Gateway, tap: Tap
) -> None:
    assert len(YAML_BOMB) < 512
    mutation = """mutation($m: JSON!) {
      createPodFromManifest(namespace: "demo", manifest: $m) { metadata { name } }
    }"""
    async with httpx.AsyncClient(
        base_url=tapped_gateway.url, timeout=10, headers={"Authorization": f"Bearer {ADMIN}"}
    ) as client:
        with calls_to(yaml.SafeLoader.construct_document) as calls:
            response = await client.post(
                "/graphql", json={"query": mutation, "variables": {"m": YAML_BOMB}}
            )
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "BAD_REQUEST"
    assert error["message"] == (
        f"the manifest expands past {YAML_MAX_NODES} YAML nodes (aliases followed) or into itself"
    )
    # sized from its nodes, never expanded into a document, never sent
    assert calls == {yaml.SafeLoader.construct_document: 0}
    assert tap.from_client == b""


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
async def test_a_post_a_web_page_could_send_cross_origin_is_refused(
    gateway: Gateway, content_type: str | None
) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    else:
        headers["Content-Type"] = ""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        response = await client.post(
            "/graphql",
            content=orjson.dumps(
                {"query": 'mutation { deletePod(namespace: "demo", name: "x") { kind } }'}
            ),
            headers=headers,
        )
    assert response.status_code == 415
    assert response.json()["errors"][0]["extensions"]["code"] == "UNSUPPORTED_MEDIA_TYPE"


BAD_AUTHORIZATION = [
    "Basic YWRtaW46YWRtaW4=",
    "Bearer",
    "Bearer admin token",
    "Bearer tökén",  # sent as UTF-8 bytes
]


@pytest.mark.parametrize("value", BAD_AUTHORIZATION)
async def test_a_malformed_authorization_is_401_over_http(gateway: Gateway, value: str) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        response = await client.post(
            "/graphql",
            json={"query": QUERY},
            headers={"Authorization": value.encode("utf-8")},  # type: ignore[dict-item]
        )
    assert response.status_code == 401
    error = response.json()["errors"][0]
    assert error["extensions"]["code"] == "UNAUTHENTICATED"
    assert "admin" not in error["message"] and "tök" not in error["message"]


@pytest.mark.parametrize(
    "payload",
    [
        {"authToken": "admin-token\nX-Injected: 1"},
        {"authToken": "tökén"},
        {"Authorization": "Basic x"},
    ],
)
async def test_a_malformed_websocket_credential_closes_the_connection(
    gateway: Gateway, payload: dict[str, Any]
) -> None:
    async with connect(gateway.ws_url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
        await ws.send(orjson.dumps({"type": "connection_init", "payload": payload}).decode())
        with pytest.raises(Exception) as closed:
            async with asyncio.timeout(10):
                await ws.recv()
        assert getattr(closed.value, "rcvd", None) is not None
        assert closed.value.rcvd.code == 4401  # type: ignore[attr-defined]
    # a well-formed client on the same gateway is served
    async with ws_client(gateway) as good:
        op = await good.subscribe(QUERY)
        assert "errors" not in await good.next(op)


@pytest.mark.parametrize("value", ["Bearer", "Bearer a b", "Token x"])
async def test_a_malformed_authorization_is_unauthenticated_over_grpc(
    gateway: Gateway, value: str
) -> None:
    port = gateway.app.state.runtime.grpc_port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = leases_pb2_grpc.LeaseServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.List(
                leases_pb2.ListLeasesRequest(namespace=NAMESPACE),
                metadata=(("authorization", value),),
            )
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def _ws_close_code(url: str, origin: str | None) -> int | None:
    """The close code a WebSocket upgrade from ``origin`` gets (None: it was served)."""
    headers = {"Origin": origin} if origin else {}
    try:
        async with connect(
            url,
            subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
            additional_headers=headers,
            origin=None,
        ) as ws:
            # the offered subprotocol is named even on a refusal: browsers require it
            assert ws.subprotocol == "graphql-transport-ws"
            await ws.send(orjson.dumps({"type": "connection_init", "payload": {}}).decode())
            async with asyncio.timeout(10):
                ack = orjson.loads(await ws.recv())
            assert ack["type"] == "connection_ack"
            return None
    except Exception as exc:  # refused before the upgrade, or closed right after it
        response = getattr(exc, "response", None)
        if response is not None:
            return int(response.status_code)
        rcvd = getattr(exc, "rcvd", None)
        if rcvd is not None and rcvd.code == 4403:
            # what a browser's close event shows: the flag that lets the page in
            assert rcvd.reason == (
                "Origin not allowed: start the gateway with --allowed-origins <origin>"
            )
        return int(rcvd.code) if rcvd is not None else -1


async def test_a_foreign_origin_websocket_is_refused_and_others_are_served(
    gateway: Gateway,
) -> None:
    own = gateway.url  # GraphiQL's origin: the gateway itself
    assert await _ws_close_code(gateway.ws_url, "https://evil.example") == 4403
    assert await _ws_close_code(gateway.ws_url, own) is None
    assert await _ws_close_code(gateway.ws_url, None) is None  # not a browser


async def test_allowed_origins_open_websockets_and_cors_to_those_sites_only(
    demo: Any,
) -> None:
    settings = Settings(
        host="127.0.0.1",
        http_port=0,
        grpc_port=0,
        server=demo.url,
        log_level="warning",
        allowed_origins="https://app.example, https://other.example",
    )
    async with serve_app(settings) as (url, _app):
        ws_url = url.replace("http://", "ws://") + "/graphql"
        assert await _ws_close_code(ws_url, "https://app.example") is None
        assert await _ws_close_code(ws_url, "https://evil.example") == 4403
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            preflight = {
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            }
            ok = await client.options(
                "/graphql", headers={"Origin": "https://app.example", **preflight}
            )
            assert ok.headers.get("access-control-allow-origin") == "https://app.example"
            bad = await client.options(
                "/graphql", headers={"Origin": "https://evil.example", **preflight}
            )
            assert "access-control-allow-origin" not in bad.headers
            _assert_preflight_refusal(bad, "https://evil.example")
            # the POST itself (served past the router, app.DirectPosts): the CORS grant to
            # the allowed origin only, the request id echoed to both
            posts = {}
            for origin in ("https://app.example", "https://evil.example"):
                posts[origin] = await client.post(
                    "/graphql",
                    json={"query": QUERY},
                    headers={
                        "Origin": origin,
                        "Authorization": f"Bearer {ADMIN}",
                        "X-Request-Id": "cors-post",
                    },
                )
            allowed, foreign = posts["https://app.example"], posts["https://evil.example"]
            assert allowed.status_code == 200 and "errors" not in allowed.json(), allowed.text
            assert allowed.headers.get("access-control-allow-origin") == "https://app.example"
            assert "access-control-allow-origin" not in foreign.headers
            assert allowed.headers["x-request-id"] == foreign.headers["x-request-id"] == "cors-post"


def _assert_preflight_refusal(response: httpx.Response, origin: str) -> None:
    """A refused preflight: 403, no CORS grant, a body naming the flag and the origin."""
    assert response.status_code == 403
    assert not any(h.startswith("access-control-allow-") for h in response.headers)
    assert response.headers["content-type"].startswith("text/plain")
    assert "--allowed-origins" in response.text and origin in response.text


async def test_a_foreign_preflight_without_allowed_origins_names_the_flag(
    gateway: Gateway,
) -> None:
    """No ``--allowed-origins``: a page of another site is told which flag lets it in
    (403), not a bare 405; an OPTIONS that is no preflight is routed as before."""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        for path in ("/graphql", "/healthz"):
            refused = await client.options(
                path,
                headers={
                    "Origin": "https://app.example",
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization, content-type",
                },
            )
            _assert_preflight_refusal(refused, "https://app.example")
        plain = await client.options("/graphql")
        assert plain.status_code == 405


async def test_graphiql_is_served_with_a_content_security_policy(gateway: Gateway) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as client:
        page = await client.get("/graphql", headers={"Accept": "text/html"})
        asset = await client.get("/graphql/static/graphiql.min.js")
    policy = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self' 'sha256-" in policy
    assert "unsafe-eval" not in policy
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert asset.status_code == 200 and asset.headers["x-content-type-options"] == "nosniff"


async def test_one_identity_past_its_request_limit_is_refused_and_others_are_served(
    tapped_gateway: Gateway, tap: Tap
) -> None:
    from gateway.core.upstream.budget import Budget, scope_of
    from gateway.core.upstream.credentials import Credential

    budget = Budget("requests", 1000, 2)
    tapped_gateway.app.state.runtime.cluster.adapter.requests = budget
    async with (
        httpx.AsyncClient(
            base_url=tapped_gateway.url, timeout=30, headers={"Authorization": f"Bearer {ADMIN}"}
        ) as admin,
        httpx.AsyncClient(
            base_url=tapped_gateway.url,
            timeout=30,
            headers={"Authorization": "Bearer alice-token"},
        ) as alice,
    ):
        assert "errors" not in (await admin.post("/graphql", json={"query": QUERY})).json()
        assert budget.used == 0  # every request gave its share back
        # two of admin's requests in flight (held here as the upstream would hold them)
        held = [budget.acquire(scope_of(Credential(ADMIN))) for _ in range(2)]
        asked = len(tap.from_client)
        refused = (await admin.post("/graphql", json={"query": QUERY})).json()
        (error,) = refused["errors"]
        assert error["extensions"]["code"] == "RESOURCE_EXHAUSTED"
        assert error["message"] == (
            "too many requests for this identity (at most 2 at once); "
            "close some before opening more"
        )
        # refused at once by the budget, not queued for a share: the shares held here are
        # given back only below; and refused before the upstream was asked
        assert budget.refused == 1
        assert len(tap.from_client) == asked
        other = (await alice.post("/graphql", json={"query": QUERY})).json()
        assert "errors" not in other  # another identity is not limited by admin's burst
        assert len(tap.from_client) > asked  # (which the upstream does see)
        for lease in held:
            lease.release()
        assert "errors" not in (await admin.post("/graphql", json={"query": QUERY})).json()


async def test_a_list_without_limit_past_the_cap_is_refused_not_buffered(
    gateway: Gateway,
) -> None:
    await gateway.demo.store.bulk_create(
        "leases",
        ({"metadata": {"name": f"many-{i}"}, "spec": {}} for i in range(30)),
        namespace="capped",
    )
    gateway.app.state.runtime.cluster.adapter.max_list_items = 20
    headers = {"Authorization": f"Bearer {ADMIN}"}
    query = """query($limit: Int) {
      leases(namespace: "capped", limit: $limit) {
        metadata { continue } items { metadata { name } }
      }
    }"""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10, headers=headers) as client:
        whole = (await client.post("/graphql", json={"query": query})).json()
        paged = (
            await client.post("/graphql", json={"query": query, "variables": {"limit": 20}})
        ).json()
    error = whole["errors"][0]
    assert error["extensions"]["code"] == "PAYLOAD_TOO_LARGE"
    assert "`limit`" in error["message"] and "`continue`" in error["message"]
    assert len(paged["data"]["leases"]["items"]) == 20
    assert paged["data"]["leases"]["metadata"]["continue"]


async def test_a_chunked_body_is_read_whole_and_an_oversized_one_refused_while_it_streams(
    gateway: Gateway,
) -> None:
    """A POST without ``Content-Length`` (chunked, many ASGI messages): a body under the limit
    in several chunks is served as one; one past the limit is refused with 413 (the body
    read stops at the first chunk past it), while another caller is served meanwhile."""
    limit = 64 * 1024
    gateway.graphql.admission = replace(
        gateway.graphql.admission, limits=replace(gateway.graphql.limits, max_body_bytes=limit)
    )
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    body = orjson.dumps({"query": QUERY}) + b" " * 20_000

    async def chunks(data: bytes, size: int, repeat: int = 1) -> AsyncIterator[bytes]:
        for _ in range(repeat):
            for start in range(0, len(data), size):
                yield data[start : start + size]

    async with (
        httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=30) as attacker,
        httpx.AsyncClient(base_url=gateway.url, headers=headers, timeout=30) as client,
    ):
        whole = await client.post("/graphql", content=chunks(body, 4096))
        assert whole.status_code == 200, whole.text
        assert whole.json()["data"]["leases"]["items"], whole.text
        stop = asyncio.Event()
        normal = asyncio.create_task(_well_behaved(client, stop))
        # 4 MiB in 16 KiB chunks: refused from the first bytes past 64 KiB
        refused = await attacker.post("/graphql", content=chunks(b" " * 16384, 16384, 256))
        stop.set()
        served = await normal
    assert refused.status_code == 413, refused.text
    (error,) = refused.json()["errors"]
    assert error["extensions"]["code"] == "PAYLOAD_TOO_LARGE"
    assert error["message"] == f"the request body is larger than {limit} bytes"
    assert served >= 1

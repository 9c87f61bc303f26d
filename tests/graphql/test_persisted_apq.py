"""Automatic Persisted Queries, as Apollo Client's persisted-queries link speaks them: a
hash alone first (GET with ``useGETForHashedQueries``), ``PersistedQueryNotFound``, the
text with its hash by POST, then the hash alone serves; over graphql-transport-ws too.  A
hash that is not its text's registers nothing; ``--no-persisted-queries`` answers
``PersistedQueryNotSupported``; a caller registering many large documents cannot grow
the cache while another caller is served."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import graphql
import httpx
import orjson
import pytest

from gateway.graphql.engine.persisted import APQ_CHARS, APQ_ENTRIES, Persisted, Registered
from kube_gateway_demo import DemoUpstream
from tests.support.calls import calls_to
from tests.support.graphql import ADMIN, NAMESPACE, Gateway, serve_gateway, ws_client

PODS = "query Pods($ns: String!) { pods(namespace: $ns) { items { metadata { name } } } }"
#: Apollo Client's HttpLink (3.8+ and 4) sends these.
APOLLO_HEADERS = {
    "accept": "application/graphql-response+json,application/json;q=0.9",
    "Authorization": f"Bearer {ADMIN}",
}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def hashed(text: str) -> dict[str, Any]:
    return {"persistedQuery": {"version": 1, "sha256Hash": sha256(text)}}


async def link_get(
    client: httpx.AsyncClient, text: str, name: str, variables: dict[str, Any]
) -> httpx.Response:
    """The link's first try with ``useGETForHashedQueries``: the hash, no text."""
    return await client.get(
        "/graphql",
        params={
            "operationName": name,
            "variables": orjson.dumps(variables).decode(),
            "extensions": orjson.dumps(hashed(text)).decode(),
        },
        headers=APOLLO_HEADERS,
    )


async def link_retry(
    client: httpx.AsyncClient, text: str, name: str, variables: dict[str, Any]
) -> httpx.Response:
    """The link's retry after ``PersistedQueryNotFound``: the text and its hash, by POST."""
    body = {
        "operationName": name,
        "variables": variables,
        "extensions": hashed(text),
        "query": text,
    }
    return await client.post("/graphql", json=body, headers=APOLLO_HEADERS)


def not_found(response: httpx.Response) -> None:
    """What the link retries on: message ``PersistedQueryNotFound`` (and its code)."""
    assert response.status_code == 404, response.text
    assert response.headers["cache-control"] == "no-store"  # a CDN must not keep a miss
    (error,) = response.json()["errors"]
    assert error["message"] == "PersistedQueryNotFound"
    assert error["extensions"]["code"] == "PERSISTED_QUERY_NOT_FOUND"


async def test_the_apollo_link_sequence_over_get(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    variables = {"ns": NAMESPACE}
    with calls_to(graphql.parse) as calls:
        not_found(await link_get(client, PODS, "Pods", variables))
        registered = await link_retry(client, PODS, "Pods", variables)
        assert registered.status_code == 200, registered.text
        items = registered.json()["data"]["pods"]["items"]
        assert items
        for _ in range(3):
            again = await link_get(client, PODS, "Pods", variables)
            assert again.status_code == 200, again.text
            assert again.json() == registered.json()
        # documentId names a registered document too.
        by_id = await client.post(
            "/graphql", json={"documentId": f"sha256:{sha256(PODS)}", "variables": variables}
        )
        assert by_id.json() == registered.json()
    assert calls == {graphql.parse: 1}


async def test_a_hash_that_is_not_the_texts_registers_nothing(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    text = "query Named { __typename }"
    wrong = {"persistedQuery": {"version": 1, "sha256Hash": sha256("something else")}}
    with calls_to(graphql.parse) as calls:
        response = await client.post("/graphql", json={"query": text, "extensions": wrong})
    assert calls == {graphql.parse: 0}
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "PERSISTED_QUERY_HASH_MISMATCH"
    assert error["message"] == (
        f"the document's SHA-256 is {sha256(text)}, not the hash sent "
        f"({sha256('something else')}): hash the exact text sent"
    )
    not_found(await client.post("/graphql", json={"extensions": wrong}))
    # A document that does not validate is not kept either.
    invalid = "query Invalid { nope }"
    refused = await client.post("/graphql", json={"query": invalid, "extensions": hashed(invalid)})
    assert refused.status_code == 400
    assert "Cannot query field 'nope'" in refused.json()["errors"][0]["message"]
    not_found(await client.post("/graphql", json={"extensions": hashed(invalid)}))
    for extensions, says in (
        ({"persistedQuery": {"version": 2, "sha256Hash": sha256(text)}}, "version 1"),
        ({"persistedQuery": {"version": 1, "sha256Hash": "abc"}}, "64 hex digits"),
    ):
        bad = await client.post("/graphql", json={"query": text, "extensions": extensions})
        assert bad.status_code == 400
        assert says in bad.json()["errors"][0]["message"]


async def test_over_graphql_transport_ws(gateway: Gateway) -> None:
    text = "query Ws { __typename }"
    async with ws_client(gateway) as ws:
        await ws.send({"id": "1", "type": "subscribe", "payload": {"extensions": hashed(text)}})
        error = await ws.recv()
        assert error["type"] == "error" and error["id"] == "1", error
        assert error["payload"][0]["message"] == "PersistedQueryNotFound"
        await ws.send(
            {"id": "2", "type": "subscribe", "payload": {"query": text, "extensions": hashed(text)}}
        )
        assert await ws.next("2") == {"data": {"__typename": "Query"}}
        assert (await ws.recv())["type"] == "complete"
        await ws.send({"id": "3", "type": "subscribe", "payload": {"extensions": hashed(text)}})
        assert await ws.next("3") == {"data": {"__typename": "Query"}}


@pytest.fixture
async def without_apq(demo: DemoUpstream) -> AsyncIterator[Gateway]:
    async with serve_gateway(demo, persisted_queries=False) as gw:
        yield gw


async def test_no_persisted_queries(without_apq: Gateway) -> None:
    text = "query Off { __typename }"
    async with httpx.AsyncClient(base_url=without_apq.url, timeout=10) as client:
        response = await link_get(client, text, "Off", {})
        assert response.status_code == 400
        (error,) = response.json()["errors"]
        # The link stops sending hashes on this.
        assert error["message"] == "PersistedQueryNotSupported"
        assert error["extensions"]["code"] == "PERSISTED_QUERY_NOT_SUPPORTED"
        # ... and its retry, the text with its hash, is served.
        retried = await link_retry(client, text, "Off", {})
        assert retried.json() == {"data": {"__typename": "Query"}}
        not_found_still = await link_get(client, text, "Off", {})
        assert not_found_still.json()["errors"][0]["message"] == "PersistedQueryNotSupported"


def big_document(n: int, size: int) -> str:
    """A distinct valid document of about ``size`` characters (a comment pads it)."""
    return f"query Big{n} {{ __typename }}\n# {'x' * size}"


#: The cache's bounds in this test (the defaults, APQ_ENTRIES and APQ_CHARS, hold 1,000
#: documents and 4 MiB: the same code with smaller numbers, so the test is quick).
ENTRIES = 16
CHARS = 300_000


async def test_many_large_documents_cannot_grow_the_cache(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    persisted: Persisted = gateway.graphql.persisted
    registered = persisted.registered = Registered(ENTRIES, CHARS)
    assert (APQ_ENTRIES, APQ_CHARS) == (1_000, 4 * 1024 * 1024)
    size = 30_000  # under the 32 KiB a document may have
    good = {"ns": NAMESPACE}
    served: list[int] = []
    peak = {"chars": 0, "entries": 0}

    async def attacker(sizes: list[int]) -> None:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
            for n, padding in enumerate(sizes):
                text = big_document(n, padding)
                response = await link_retry(http, text, f"Big{n}", {})
                assert response.json() == {"data": {"__typename": "Query"}}
                peak["chars"] = max(peak["chars"], registered.chars)
                peak["entries"] = max(peak["entries"], len(registered))
                assert registered.chars <= CHARS
                assert len(registered) <= ENTRIES

    async def well_behaved() -> None:
        # The link's own sequence, again and again: served every time, by the hash while
        # it is kept, else after registering the text again.
        while len(served) < 20 or not done.is_set():
            response = await link_get(client, PODS, "Pods", good)
            if response.status_code == 404:
                not_found(response)
                response = await link_retry(client, PODS, "Pods", good)
            assert response.status_code == 200, response.text
            assert response.json()["data"]["pods"]["items"]
            served.append(response.status_code)

    done = asyncio.Event()
    behaved = asyncio.create_task(well_behaved())
    # Large documents (twice the characters the cache holds), then many small ones (four
    # times its count).
    await attacker([size] * (2 * CHARS // size))
    assert CHARS - size - len(PODS) <= peak["chars"] <= CHARS
    await attacker([10] * (4 * ENTRIES))
    assert peak["entries"] == ENTRIES
    done.set()
    await behaved
    assert len(served) >= 20
    assert registered.chars == sum(len(registered.get(k) or "") for k in list(registered._texts))
    # The engine's parsed documents are bounded as well (4 MiB of text by default).
    engine = gateway.graphql.engine
    assert engine._cached_bytes <= engine.limits.cache_bytes

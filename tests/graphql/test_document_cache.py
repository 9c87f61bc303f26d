"""The parsed-document cache of the GraphQL engine, over HTTP.

A document is parsed and validated once and kept under its text (bounded in count and in
bytes); what it runs is still decided per request: the operation name and the variables
of each request choose the operation and the result, and a failing document is never
kept, so its errors are the same every time.  A caller sending many distinct documents
cannot grow the cache beyond its bounds.
"""

from __future__ import annotations

import gc
from typing import Any

import graphql
import httpx

from gateway.graphql.engine.execution import Engine
from gateway.graphql.engine.limits import Limits
from gateway.graphql.schemas.seed import gateway_schema
from tests.support.calls import calls_to
from tests.support.graphql import NAMESPACE, Gateway, data, error_of

TWO_OPERATIONS = """
query A($flag: Boolean!) { a: __typename @include(if: $flag) }
query B { b: __typename }
"""
GET_POD = """query Get($ns: String!, $name: String!) {
  pod(namespace: $ns, name: $name) { metadata { name namespace } }
}"""


async def _post(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = await client.post("/graphql", json=body)
    decoded: dict[str, Any] = response.json()
    return response.status_code, decoded


async def test_operation_name_and_variables_choose_what_a_cached_document_runs(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    expected: list[tuple[dict[str, Any], int, dict[str, Any]]] = [
        (
            {"query": TWO_OPERATIONS, "operationName": "A", "variables": {"flag": True}},
            200,
            {"data": {"a": "Query"}},
        ),
        (
            {"query": TWO_OPERATIONS, "operationName": "A", "variables": {"flag": False}},
            200,
            {"data": {}},
        ),
        ({"query": TWO_OPERATIONS, "operationName": "B"}, 200, {"data": {"b": "Query"}}),
    ]
    with calls_to(graphql.parse, graphql.validate) as calls:
        for _ in range(3):  # interleaved, so each request follows a different one
            for body, status, answer in expected:
                assert await _post(client, body) == (status, answer)
        status, no_name = await _post(client, {"query": TWO_OPERATIONS})
        assert status == 400
        assert error_of(no_name)["message"] == (
            "the document has several operations: give `operationName`"
        )
        status, unknown = await _post(client, {"query": TWO_OPERATIONS, "operationName": "C"})
        assert status == 400
        assert error_of(unknown)["message"] == "unknown operation named 'C'"
        status, missing = await _post(client, {"query": TWO_OPERATIONS, "operationName": "A"})
        assert status == 400
        assert error_of(missing)["message"] == (
            "Expected a value of non-null type 'Boolean!' to be provided."
        )
    # one parse and one validation for the 12 requests of the one document
    assert calls == {graphql.parse: 1, graphql.validate: 1}


async def test_variables_of_a_cached_document_reach_the_upstream_each_time(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    query = "query($ns: String!) { pods(namespace: $ns) { items { metadata { name } } } }"
    _, listed = await _post(client, {"query": query, "variables": {"ns": NAMESPACE}})
    names = [item["metadata"]["name"] for item in data(listed)["pods"]["items"]][:3]
    assert len(names) >= 2
    for name in [*names, *reversed(names)]:
        status, body = await _post(
            client, {"query": GET_POD, "variables": {"ns": NAMESPACE, "name": name}}
        )
        assert status == 200
        assert data(body)["pod"]["metadata"] == {"name": name, "namespace": NAMESPACE}
    status, body = await _post(
        client, {"query": GET_POD, "variables": {"ns": NAMESPACE, "name": "no-such-pod"}}
    )
    assert status == 200
    assert body["data"] == {"pod": None}
    assert error_of(body)["extensions"]["code"] == "NOT_FOUND"


async def test_failing_documents_are_never_cached_and_fail_the_same_way(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    engine = gateway.graphql.engine
    syntax = "query { pods(namespace: "
    invalid = "query { noSuchField }"
    bad_variable = {"query": GET_POD, "variables": {"ns": 1, "name": "x"}}
    with calls_to(graphql.parse, graphql.validate) as calls:
        first = [
            await _post(client, {"query": syntax}),
            await _post(client, {"query": invalid}),
            await _post(client, bad_variable),
        ]
        again = [
            await _post(client, {"query": syntax}),
            await _post(client, {"query": invalid}),
            await _post(client, bad_variable),
        ]
    assert first == again
    (s1, b1), (s2, b2), (s3, b3) = first
    assert (s1, error_of(b1)["extensions"]["code"]) == (400, "GRAPHQL_PARSE_FAILED")
    assert error_of(b1)["locations"] == [{"line": 1, "column": 25}]
    assert s2 == 400
    assert error_of(b2)["message"] == "Cannot query field 'noSuchField' on type 'Query'."
    assert s3 == 400 and "data" not in b3
    assert error_of(b3)["message"] == "String cannot represent a non string value: 1"
    # the syntax error parsed twice, the invalid document parsed and validated twice; the
    # valid document (variables are checked per request) once
    assert calls == {graphql.parse: 5, graphql.validate: 3}
    assert syntax not in engine._documents and invalid not in engine._documents
    assert GET_POD in engine._documents


async def test_many_distinct_documents_keep_the_cache_bounded(
    gateway: Gateway, client: httpx.AsyncClient
) -> None:
    engine = gateway.graphql.engine
    limit = engine._cache_size
    first = "query Q0 { __typename }"
    for i in range(limit + 200):
        status, body = await _post(client, {"query": f"query Q{i} {{ __typename }}"})
        assert (status, body) == (200, {"data": {"__typename": "Query"}})
        assert len(engine._documents) <= limit
        assert engine._cached_bytes <= gateway.graphql.limits.cache_bytes
    assert len(engine._documents) == limit
    assert engine._cached_bytes == sum(len(text) for text in engine._documents)
    # the oldest was evicted: served again, parsed again
    assert first not in engine._documents
    with calls_to(graphql.parse) as calls:
        assert await _post(client, {"query": first}) == (200, {"data": {"__typename": "Query"}})
    assert calls == {graphql.parse: 1}


def test_a_parsed_document_is_no_reference_cycle() -> None:
    """graphql-core links a document's tokens both ways; the engine keeps them linked
    forward only, so a document the cache drops is freed by reference counting at once (a
    cycle would wait for the cyclic collector, and one a schema build froze would never
    go: gateway/graphql/engine/collector.py)."""
    engine = Engine(gateway_schema(), Limits(), cache_size=1)
    query = "query First { a: __typename b: __typename }"
    token = engine.prepare(query).document.loc.start_token  # type: ignore[union-attr]
    tokens = set()
    while token is not None:
        tokens.add(id(token))
        token = token.next
    del token
    assert len(tokens) > 8
    gc.collect()  # the validation's own garbage (it held the document too)
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        engine.prepare("{ __typename }")  # evicts the first
        gc.collect()
        cyclic = [o for o in gc.garbage if id(o) in tokens]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert cyclic == [], "a dropped document's tokens wait for the cyclic collector"

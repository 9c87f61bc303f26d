"""Introspection is answered once per schema: the engine keeps the answers to operations
that read only the schema (GraphiQL and code generators ask the same large document again
and again, and the answer is the same for every caller)."""

from __future__ import annotations

import asyncio

from graphql import get_introspection_query

from gateway.graphql.engine.execution import INTROSPECTIONS_KEPT, Engine
from gateway.graphql.engine.limits import Limits
from gateway.graphql.schemas.schema import gateway_schema

TYPE = "query($n: String!) { __type(name: $n) { name fields { name } } }"


async def test_introspection_answers_are_kept_per_document_and_variables() -> None:
    engine = Engine(gateway_schema(), Limits())
    full = engine.prepare(get_introspection_query())
    # asked three times at once: computed once (in a worker thread), the same answer for all
    first, *others = await asyncio.gather(*(engine.execute(full, None, None) for _ in range(3)))
    assert all(other is first for other in others)
    assert first["data"]["__schema"]["queryType"]["name"] == "Query"
    assert await engine.execute(full, None, None) is first  # kept, not executed again

    pod = await engine.execute(engine.prepare(TYPE), {"n": "Pod"}, None)
    lease = await engine.execute(engine.prepare(TYPE), {"n": "Lease"}, None)
    assert (pod["data"]["__type"]["name"], lease["data"]["__type"]["name"]) == ("Pod", "Lease")
    assert await engine.execute(engine.prepare(TYPE), {"n": "Pod"}, None) is pod

    # A failing one is never kept.
    bad = engine.prepare("query($n: String!) { __type(name: $n) { name } }")
    failed = await engine.execute(bad, {}, None)
    assert "errors" in failed
    assert await engine.execute(bad, {}, None) is not failed
    for i in range(INTROSPECTIONS_KEPT + 2):  # bounded
        await engine.execute(engine.prepare(TYPE), {"n": f"Nothing{i}"}, None)
    assert len(engine._introspections) == INTROSPECTIONS_KEPT


async def test_graphiqls_introspection_is_the_one_warmed_in_advance() -> None:
    """GraphiQL (graphql-js) lays its introspection query out differently from graphql-core;
    the answer is kept by the document as parsed, so the warmed one serves both."""
    engine = Engine(gateway_schema(), Limits())
    await engine.warm_introspection()
    graphiql = "\n".join("    " + line for line in get_introspection_query().splitlines())
    assert graphiql != get_introspection_query()
    answer = await engine.execute(engine.prepare(graphiql), None, None)
    assert len(engine._introspections) == 1
    assert answer["data"]["__schema"]["queryType"]["name"] == "Query"


async def test_a_typename_ping_is_a_plain_query_not_an_introspection() -> None:
    """``{ __typename }`` alone (a client's ping; a group endpoint's first use) resolves to a
    name: answered as any query, it never sizes the introspection budget, which executes the
    schema's whole introspection (seconds of CPU for a large group's schema); a document that
    reads the schema does."""
    engine = Engine(gateway_schema(), Limits())
    pings = {
        "{ __typename }": {"__typename": "Query"},
        "query Ping { a: __typename b: __typename }": {"a": "Query", "b": "Query"},
    }
    for ping, data in pings.items():
        assert await engine.execute(engine.prepare(ping), None, None) == {"data": data}
    assert engine._standard_values == 0  # no introspection was executed
    assert not engine._introspections
    mixed = await engine.execute(
        engine.prepare("{ __typename __schema { queryType { name } } }"), None, None
    )
    assert mixed["data"]["__schema"]["queryType"]["name"] == "Query"
    assert engine._standard_values > 1000  # sized by the whole introspection
    assert len(engine._introspections) == 1

"""Error extensions for each error kind (one table), partial data, limits, and the N+1 test
for batched links."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest
from graphql import GraphQLError

from gateway.core import errors as core
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.credentials import Credential
from gateway.graphql.engine.execution import Engine
from gateway.graphql.engine.limits import Limits
from gateway.graphql.errors import CODES, format_exception
from gateway.graphql.resolvers.context import Context
from gateway.graphql.schemas.schema import gateway_schema
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.auth import ANONYMOUS, DEFAULT_TOKENS, TokenGrant
from tests.support.graphql import (
    ADMIN,
    ALICE,
    VIEWER,
    Gateway,
    data,
    error_of,
    gql,
    serve_gateway,
)

LEASES = '{ leases(namespace: "demo") { items { metadata { name } } } }'


@pytest.mark.parametrize(
    ("status", "code", "reason"),
    [
        (400, "BAD_REQUEST", "BadRequest"),
        (404, "NOT_FOUND", "NotFound"),
        (409, "CONFLICT", "Conflict"),
        (410, "GONE", "Expired"),
        (413, "PAYLOAD_TOO_LARGE", "RequestEntityTooLarge"),
        (415, "UNSUPPORTED_MEDIA_TYPE", "UnsupportedMediaType"),
        (422, "INVALID", "Invalid"),
        (429, "TOO_MANY_REQUESTS", "TooManyRequests"),
        (500, "INTERNAL", "InternalError"),
        (503, "SERVICE_UNAVAILABLE", "ServiceUnavailable"),
        (504, "TIMEOUT", "Timeout"),
    ],
)
async def test_upstream_status_errors(
    client: httpx.AsyncClient, demo: DemoUpstream, status: int, code: str, reason: str
) -> None:
    demo.faults.fail_requests(1, status=status, verb="list", resource="leases", retry_after=3)
    err = error_of(await gql(client, LEASES))
    ext = err["extensions"]
    assert (ext["code"], ext["httpStatus"]) == (code, status)
    assert ext["reason"] == reason
    assert err["path"] == ["leases"]
    if status == 429:
        assert ext["retryAfter"] == 3


async def test_no_credential_says_what_to_send(client: httpx.AsyncClient) -> None:
    """A caller who sent no Authorization is told which header to send and where a token
    comes from; a caller whose token is refused keeps the upstream's own message."""
    err = error_of(await gql(client, LEASES, token=None))
    assert err["extensions"]["code"] == "UNAUTHENTICATED"
    assert (err["extensions"]["httpStatus"], err["extensions"]["reason"]) == (401, "Unauthorized")
    assert "Authorization: Bearer <token>" in err["message"]
    assert "kubectl create token <serviceaccount>" in err["message"]
    assert "OIDC id-token" in err["message"]
    err = error_of(await gql(client, LEASES, token="not-a-token"))
    assert err["extensions"]["code"] == "UNAUTHENTICATED"
    assert "Bearer <token>" not in err["message"]
    assert "not-a-token" not in err["message"]


async def test_no_credential_on_a_cluster_open_to_anonymous_says_what_to_send() -> None:
    """A cluster that lets anonymous requests in refuses ``system:anonymous`` with a 403: its
    message stays, the hint is added; a caller with a token refused so gets no hint."""
    tokens = {**DEFAULT_TOKENS, ANONYMOUS: TokenGrant("system:anonymous", frozenset())}
    async with (
        DemoUpstream(tokens=tokens) as demo,
        serve_gateway(demo) as served,
        httpx.AsyncClient(base_url=served.url, timeout=10) as client,
    ):
        err = error_of(await gql(client, LEASES, token=None))
        assert (err["extensions"]["code"], err["extensions"]["httpStatus"]) == ("FORBIDDEN", 403)
        upstream, _, hint = err["message"].partition("; no credential was sent")
        assert upstream.startswith(
            'leases.coordination.k8s.io is forbidden: User "system:anonymous"'
        )
        assert "Authorization: Bearer <token>" in hint
        elsewhere = '{ leases(namespace: "kube-system") { items { metadata { name } } } }'
        err = error_of(await gql(client, elsewhere, token=ALICE))
        assert err["extensions"]["code"] == "FORBIDDEN"
        assert "Bearer <token>" not in err["message"]


async def test_identity_errors_and_causes(client: httpx.AsyncClient) -> None:
    err = error_of(await gql(client, LEASES, token="not-a-token"))
    assert err["extensions"]["code"] == "UNAUTHENTICATED"
    assert err["extensions"]["httpStatus"] == 401
    err = error_of(
        await gql(
            client,
            'mutation { createLease(namespace: "demo", object: {metadata: {name: "v"}}) '
            "{ metadata { name } } }",
            token=VIEWER,
        )
    )
    assert err["extensions"]["code"] == "FORBIDDEN"
    assert "viewer" in err["message"]
    err = error_of(
        await gql(
            client, '{ pods(namespace: "default") { items { metadata { name } } } }', token=ALICE
        )
    )
    assert err["extensions"]["code"] == "FORBIDDEN"
    name = "dup-lease"
    create = (
        f'mutation {{ createLease(namespace: "demo", object: {{metadata: {{name: "{name}"}}}}) '
        "{ metadata { name } } }"
    )
    data(await gql(client, create))
    err = error_of(await gql(client, create))
    assert err["extensions"]["code"] == "ALREADY_EXISTS"
    err = error_of(await gql(client, '{ pods(namespace: "demo", limit: -1) { kind } }'))
    assert err["extensions"]["code"] == "INVALID"
    assert err["extensions"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: -1: must be greater than or equal to 0",
            "field": "limit",
        }
    ]


async def test_partial_data(client: httpx.AsyncClient, demo: DemoUpstream) -> None:
    demo.faults.fail_requests(1, status=503, verb="list", resource="leases")
    body = await gql(client, LEASES.replace("{ leases", "{ images { kind } leases"))
    err = error_of(body)
    assert err["extensions"]["code"] == "SERVICE_UNAVAILABLE"
    assert body["data"]["images"]["kind"] == "ImageList"  # the sibling field still answers
    assert body["data"]["leases"] is None


def test_unknown_errors_are_generic_and_every_core_error_has_a_code() -> None:
    secret = "Bearer super-secret-token"
    out = format_exception(RuntimeError(f"boom with {secret}"))
    assert out["message"] == "internal error"
    assert out["extensions"]["code"] == "INTERNAL"
    assert "secret" not in str(out)
    wrapped = format_exception(GraphQLError("x", original_error=KeyError(secret)))
    assert "secret" not in str(wrapped)
    for cls in vars(core).values():
        if isinstance(cls, type) and issubclass(cls, core.GatewayError):
            assert any(issubclass(cls, known) for known in CODES), cls


async def test_request_errors(client: httpx.AsyncClient, gateway: Gateway) -> None:
    response = await client.post("/graphql", json={"query": "{ pods( }"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["code"] == "GRAPHQL_PARSE_FAILED"
    response = await client.post("/graphql", json={"query": "{ nope }"})
    assert response.status_code == 400
    assert "data" not in response.json()
    assert response.json()["errors"][0]["extensions"]["code"] == "GRAPHQL_VALIDATION_FAILED"
    response = await client.post(
        "/graphql", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    response = await client.post("/graphql", json={"query": "subscription { watchPods { type } }"})
    assert response.status_code == 400
    gateway.graphql.admission = replace(
        gateway.graphql.admission, limits=replace(gateway.graphql.limits, max_body_bytes=1000)
    )
    response = await client.post("/graphql", json={"query": "{ pods { kind } }" + " " * 2000})
    assert response.status_code == 413
    assert response.json()["errors"][0]["extensions"]["code"] == "PAYLOAD_TOO_LARGE"


async def test_limits(client: httpx.AsyncClient, gateway: Gateway) -> None:
    deep = (
        "{ pods { items { spec { affinity { nodeAffinity { "
        "requiredDuringSchedulingIgnoredDuringExecution { nodeSelectorTerms { "
        "matchExpressions { key } } } } } } } } }"
    )
    assert data(await gql(client, deep))  # 7 levels: fine
    too_deep = "{ pods { items { metadata { name } } } }"
    for _ in range(6):
        too_deep = too_deep.replace(
            "metadata { name }", "events { involvedObject { pod { metadata { name } } } }"
        )
    err = error_of(await gql(client, too_deep, expect=400))
    assert err["extensions"]["code"] == "QUERY_TOO_DEEP"
    aliases = "{ " + " ".join(f"a{i}: leases {{ kind }}" for i in range(31)) + " }"
    err = error_of(await gql(client, aliases, expect=400))
    assert err["extensions"]["code"] == "TOO_MANY_ALIASES"
    gateway.graphql.engine.limits = replace(gateway.graphql.engine.limits, max_fields=20)
    meta = "metadata { name namespace uid labels annotations resourceVersion generation }"
    wide = (
        "{ pods { items { ...A ...B } } } "
        f"fragment A on Pod {{ {meta} }} fragment B on Pod {{ status {{ phase podIP }} {meta} }}"
    )
    err = error_of(await gql(client, wide, expect=400))
    assert err["extensions"]["code"] == "QUERY_TOO_COMPLEX"


async def test_pod_events_are_batched(demo: DemoUpstream) -> None:
    """`pods { events }` over 50 pods costs a bounded number of upstream calls (no N+1).

    The operation runs on the gateway's engine with an adapter over an httpx client built
    here, whose request hook counts every call that reaches the demo upstream.
    """
    ns = "batch"
    await demo.store.ensure_namespace(ns)
    for i in range(50):
        await demo.store.create(
            "pods",
            {"metadata": {"name": f"p{i}"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
            namespace=ns,
        )
        await demo.store.create(
            "events",
            {
                "metadata": {"name": f"p{i}.e"},
                "involvedObject": {
                    "kind": "Pod",
                    "name": f"p{i}",
                    "namespace": ns,
                    "apiVersion": "v1",
                },
                "reason": "Tested",
                "message": f"event of p{i}",
                "type": "Normal",
            },
            namespace=ns,
        )
    calls: list[str] = []

    async def count(request: httpx.Request) -> None:
        calls.append(f"{request.method} {request.url.path}?{request.url.query.decode()}")

    engine = Engine(gateway_schema(), Limits())
    query = engine.prepare(
        """{ pods(namespace: "batch") { items { metadata { name }
             events { message involvedObject { pod { metadata { name } } } } } } }"""
    )
    async with httpx.AsyncClient(base_url=demo.url, event_hooks={"request": [count]}) as http:
        body = await engine.execute(query, None, Context(KubeAdapter(http), Credential(ADMIN)))
    items = data(body)["pods"]["items"]
    assert len(items) == 50
    for item in items:
        name = item["metadata"]["name"]
        assert [e["message"] for e in item["events"]] == [f"event of {name}"]
        assert item["events"][0]["involvedObject"]["pod"]["metadata"]["name"] == name
    # One list of pods, one list of the namespace's pod events, one list of pods for the
    # 50 references: 3 calls, not 1 + 50 + 50.
    assert len(calls) == 3, calls

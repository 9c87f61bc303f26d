"""Property-based fuzzing of every way in, against a real ``kube-gateway serve --demo``
process: random GraphQL documents, variables and bodies over HTTP, random WebSocket
messages, random bytes as gRPC requests.  Whatever comes in: a clear refusal (never a 500
or INTERNAL without cause), the process stays up, a well-behaved client is served, and no
token or stack trace reaches the log.  Bounded: a fixed number of examples per property."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.support.serve_process import Served, serve_process

SECRET = "fuzz-secret-token-7f3a"
#: Examples per property: 150 in `make test`; FUZZ_EXAMPLES=5000 for a longer run.
EXAMPLES = settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
GOOD = '{ leases(namespace: "demo") { items { metadata { name } } } }'


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("home")
    # debug: the most the log can say, and still no token, no trace
    with serve_process(home, "--demo", "--log-level", "debug") as served:
        yield served
        assert served.proc.poll() is None, "the gateway died"
    assert SECRET not in served.log
    assert "Traceback" not in served.log


def _healthy(gateway: Served) -> None:
    response = httpx.post(
        f"{gateway.http}/graphql",
        json={"query": GOOD},
        headers={"Authorization": "Bearer admin-token"},
        timeout=10,
    )
    assert response.status_code == 200 and "errors" not in response.json()


GRAPHQL_CHARS = st.text(
    alphabet=st.sampled_from(list('{}()[]:!$@.,=|&"# \n\tabcdefghijklmnopqrstuvwxyz_0123456789')),
    max_size=200,
)
FIELDS = st.sampled_from(
    ["pods", "pod", "leases", "lease", "events", "__schema", "__typename", "podLog", "images"]
)
STRUCTURED = st.builds(
    lambda op, field, args, sel: f"{op} {{ {field}{args} {{ {sel} }} }}",
    st.sampled_from(["", "query", "mutation", "subscription", "query Q($x: String)"]),
    FIELDS,
    st.sampled_from(["", '(namespace: "demo")', "(namespace: $x)", "(limit: -1)", '(name: "")']),
    st.sampled_from(["items { metadata { name } }", "metadata { name }", "__typename", "x y z"]),
)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@EXAMPLES
@given(
    query=GRAPHQL_CHARS | STRUCTURED | JSON_VALUES,
    variables=JSON_VALUES,
    extensions=JSON_VALUES,
    operation=st.none()
    | st.text(max_size=10)
    | st.integers(min_value=-(2**63), max_value=2**63 - 1),
)
def test_graphql_over_http_never_fails_without_cause(
    gateway: Served, query: Any, variables: Any, extensions: Any, operation: Any
) -> None:
    body = {"query": query, "variables": variables, "extensions": extensions}
    body["operationName"] = operation
    response = httpx.post(
        f"{gateway.http}/graphql",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {SECRET}", "Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code < 500, response.text
    decoded = response.json()
    assert isinstance(decoded, dict) and ("errors" in decoded or "data" in decoded)
    for error in decoded.get("errors") or []:
        assert error["extensions"]["code"] != "INTERNAL", error
        assert SECRET not in error["message"]


@EXAMPLES
@given(raw=st.binary(max_size=300))
def test_raw_bodies_are_refused_clearly(gateway: Served, raw: bytes) -> None:
    response = httpx.post(
        f"{gateway.http}/graphql",
        content=raw,
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert 400 <= response.status_code < 500 or response.status_code == 200
    assert "errors" in response.json() or "data" in response.json()


@settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "150")) // 2,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(messages=st.lists(JSON_VALUES | st.text(max_size=50), min_size=1, max_size=4))
def test_websocket_messages_never_break_the_gateway(gateway: Served, messages: list[Any]) -> None:
    url = gateway.http.replace("http://", "ws://") + "/graphql"
    with connect(url, subprotocols=["graphql-transport-ws"], open_timeout=10) as ws:  # type: ignore[list-item]
        ws.send(
            orjson.dumps({"type": "connection_init", "payload": {"authToken": SECRET}}).decode()
        )
        try:
            for message in messages:
                ws.send(message if isinstance(message, str) else orjson.dumps(message).decode())
            while True:  # read until the server closes or goes quiet
                reply = ws.recv(timeout=0.2)
                if isinstance(reply, str) and reply.startswith("{"):
                    decoded = orjson.loads(reply)
                    assert SECRET not in reply
                    if decoded.get("type") == "error":
                        payload = decoded["payload"]
                        errors = payload if isinstance(payload, list) else [payload]
                        assert all(e["extensions"]["code"] != "INTERNAL" for e in errors)
        except TimeoutError:
            pass
        except ConnectionClosed as closed:
            assert closed.rcvd is None or closed.rcvd.code in (1000, 4400, 4401, 4409, 4413, 4429)
    _healthy(gateway)


GRPC_METHODS = [
    "/kubegateway.v1.PodService/Get",
    "/kubegateway.v1.PodService/List",
    "/kubegateway.v1.PodService/Create",
    "/kubegateway.v1.PodService/Patch",
    "/kubegateway.v1.LeaseService/Delete",
    "/kubegateway.v1.EventService/DeleteCollection",
    "/kubegateway.v1.ResourceService/View",
    "/kubegateway.v1.ClusterService/ListClusters",
    "/grpc.health.v1.Health/Check",
]


@EXAMPLES
@given(method=st.sampled_from(GRPC_METHODS), payload=st.binary(max_size=200))
def test_random_grpc_requests_are_refused_with_a_precise_status(
    gateway: Served, method: str, payload: bytes
) -> None:
    with grpc.insecure_channel(gateway.grpc) as channel:
        call = channel.unary_unary(
            method, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        try:
            call(payload, metadata=(("authorization", f"Bearer {SECRET}"),), timeout=10)
        except grpc.RpcError as exc:
            assert exc.code() not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), (
                exc.code(),
                exc.details(),
            )
            assert SECRET not in (exc.details() or "")

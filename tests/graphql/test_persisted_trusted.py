"""Trusted documents (``--trusted-documents``): the gateway serves only the documents of a
manifest, named by id over every transport (POST, GET, SSE, multipart, graphql-transport-ws),
and refuses anything else before parsing it; a manifest whose hash keys are not their
texts' stops the start; a changed manifest (its file, or SIGHUP) serves at once."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import graphql
import httpx
import orjson
import pytest

from gateway.core.upstream.config import ConfigError
from gateway.graphql.engine.persisted import Persisted, parse_manifest, sha256_hex
from gateway.settings import load
from kube_gateway_demo import DemoUpstream
from tests.graphql.test_http_subscriptions import MULTIPART_ACCEPT, parts
from tests.support.calls import calls_to
from tests.support.graphql import (
    ADMIN,
    NAMESPACE,
    SSE,
    Gateway,
    TransportWS,
    serve_gateway,
    ws_client,
)
from tests.support.serve_process import clean_env, command, free_port

PODS = "query Pods($ns: String!) { pods(namespace: $ns) { items { metadata { name } } } }"
WATCH = "subscription Watch($ns: String) { watchPods(namespace: $ns) { type } }"
TYPENAME = "query Name { __typename }"
NOT_TRUSTED = "query Other { __typename nodes: __typename }"
AUTH = {"Authorization": f"Bearer {ADMIN}"}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def codegen_manifest(*documents: str) -> dict[str, str]:
    """graphql-codegen client preset's persisted-documents.json: SHA-256 hex to text."""
    return {sha256(d): d for d in documents}


def trusted_gateway(
    manifest: Path, demo: DemoUpstream, **settings: Any
) -> contextlib.AbstractAsyncContextManager[Gateway]:
    return serve_gateway(demo, trusted_documents=str(manifest), **settings)


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "persisted-documents.json"
    path.write_bytes(orjson.dumps(codegen_manifest(PODS, WATCH, TYPENAME)))
    return path


@pytest.fixture
async def trusted(manifest: Path, demo: DemoUpstream) -> AsyncIterator[Gateway]:
    async with trusted_gateway(manifest, demo) as gw:
        yield gw


@pytest.fixture
async def http(trusted: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=trusted.url, headers=AUTH, timeout=10) as c:
        yield c


def names(body: dict[str, Any]) -> list[str]:
    assert "errors" not in body, body
    return [i["metadata"]["name"] for i in body["data"]["pods"]["items"]]


def refusal(response: httpx.Response, status: int, code: str) -> str:
    """The message of a refusal with ``status`` and ``code``."""
    assert response.status_code == status, response.text
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == code, error
    assert "data" not in response.json()
    message: str = error["message"]
    return message


async def test_every_way_of_naming_a_document_serves_it(
    trusted: Gateway, http: httpx.AsyncClient
) -> None:
    variables = {"ns": NAMESPACE}
    digest = sha256(PODS)
    expected = names(
        (await http.post("/graphql", json={"query": PODS, "variables": variables})).json()
    )
    assert expected
    bodies: list[dict[str, Any]] = [
        {"documentId": f"sha256:{digest}"},  # GraphQL over HTTP's persisted documents
        {"documentId": digest},  # graphql-codegen's client preset
        {"documentId": f"sha256:{digest.upper()}"},
        {"doc_id": digest},  # Relay
        {"id": digest, "query": ""},  # Relay's older network layers
        {"extensions": {"persistedQuery": {"version": 1, "sha256Hash": digest}}},  # Apollo
        {"documentId": digest, "query": PODS},  # the text with its id: the same document
    ]
    with calls_to(graphql.parse) as calls:
        for body in bodies:
            response = await http.post("/graphql", json={**body, "variables": variables})
            assert response.status_code == 200, (body, response.text)
            assert names(response.json()) == expected
        got = await http.get(
            "/graphql",
            params={
                "documentId": f"sha256:{digest}",
                "variables": orjson.dumps(variables).decode(),
            },
        )
        assert names(got.json()) == expected
        apollo_get = await http.get(
            "/graphql",
            params={
                "operationName": "Pods",
                "variables": orjson.dumps(variables).decode(),
                "extensions": orjson.dumps(
                    {"persistedQuery": {"version": 1, "sha256Hash": digest}}
                ).decode(),
            },
        )
        assert names(apollo_get.json()) == expected
    assert calls[graphql.parse] == 0  # the first request above parsed it: cached since


async def test_other_documents_are_refused_before_they_are_parsed(
    trusted: Gateway, http: httpx.AsyncClient
) -> None:
    unknown = sha256(NOT_TRUSTED)
    huge = "query Big { __typename }" + " " * 100_000
    with calls_to(graphql.parse, sha256_hex) as calls:
        not_allowed = await http.post("/graphql", json={"query": NOT_TRUSTED})
        message = refusal(not_allowed, 403, "PERSISTED_QUERY_NOT_ALLOWED")
        assert "--trusted-documents" in message and "documentId" in message
        refusal(
            await http.post("/graphql", json={"query": huge}), 403, "PERSISTED_QUERY_NOT_ALLOWED"
        )
        refusal(
            await http.get("/graphql", params={"query": NOT_TRUSTED}),
            403,
            "PERSISTED_QUERY_NOT_ALLOWED",
        )
        not_found = await http.post("/graphql", json={"documentId": f"sha256:{unknown}"})
        assert unknown in refusal(not_found, 404, "PERSISTED_QUERY_NOT_FOUND")
        assert not_found.headers["cache-control"] == "no-store"
        got = await http.get("/graphql", params={"documentId": "x-app:nope"})
        assert "'x-app:nope'" in refusal(got, 404, "PERSISTED_QUERY_NOT_FOUND")
        # An id with another document's text: neither is run.
        mismatch = await http.post("/graphql", json={"documentId": sha256(TYPENAME), "query": PODS})
        refusal(mismatch, 400, "PERSISTED_QUERY_HASH_MISMATCH")
        # Apollo's link retries a miss with the text: refused as not trusted.
        retried = await http.post(
            "/graphql",
            json={
                "query": NOT_TRUSTED,
                "extensions": {"persistedQuery": {"version": 1, "sha256Hash": unknown}},
            },
        )
        refusal(retried, 403, "PERSISTED_QUERY_NOT_ALLOWED")
        nothing = await http.post("/graphql", json={"variables": {}})
        assert "documentId" in refusal(nothing, 400, "BAD_REQUEST")
    # Refused with dictionary look-ups: nothing parsed, nothing hashed.
    assert calls == {graphql.parse: 0, sha256_hex: 0}
    # The text of a trusted document is one of them.
    served = await http.post("/graphql", json={"query": TYPENAME})
    assert served.json() == {"data": {"__typename": "Query"}}


async def test_subscriptions_by_id_over_sse_multipart_and_websocket(trusted: Gateway) -> None:
    digest = sha256(WATCH)
    variables = orjson.dumps({"ns": NAMESPACE}).decode()
    async with httpx.AsyncClient(base_url=trusted.url, headers=AUTH, timeout=10) as client:
        async with client.stream(
            "GET",
            "/graphql",
            params={"documentId": f"sha256:{digest}", "variables": variables},
            headers={"Accept": "text/event-stream"},
        ) as response:
            name, payload = await SSE(response).event()
            assert (name, payload) == ("next", {"data": {"watchPods": {"type": "ADDED"}}})
        async with client.stream(
            "GET",
            "/graphql",
            params={"query": NOT_TRUSTED},
            headers={"Accept": "text/event-stream"},
        ) as response:
            name, payload = await SSE(response).event()
            assert name == "next"
            assert payload["errors"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_ALLOWED"
        async with client.stream(
            "POST",
            "/graphql",
            json={"documentId": digest, "variables": {"ns": NAMESPACE}},
            headers={"Accept": MULTIPART_ACCEPT},
        ) as response:
            part = await anext(parts(response))
            assert part == {"payload": {"data": {"watchPods": {"type": "ADDED"}}}}
    async with ws_client(trusted) as ws:
        await ws.send(
            {
                "id": "1",
                "type": "subscribe",
                "payload": {"documentId": f"sha256:{digest}", "variables": {"ns": NAMESPACE}},
            }
        )
        assert await ws.next("1") == {"data": {"watchPods": {"type": "ADDED"}}}
        await ws.send({"id": "2", "type": "subscribe", "payload": {"query": NOT_TRUSTED}})
        error = await answer(ws, "2")
        assert error["type"] == "error", error
        assert error["payload"][0]["extensions"]["code"] == "PERSISTED_QUERY_NOT_ALLOWED"
        await ws.send(
            {
                "id": "3",
                "type": "subscribe",
                "payload": {
                    "extensions": {"persistedQuery": {"version": 1, "sha256Hash": sha256(TYPENAME)}}
                },
            }
        )
        assert await answer(ws, "3") == {
            "id": "3",
            "type": "next",
            "payload": {"data": {"__typename": "Query"}},
        }


async def answer(ws: TransportWS, op_id: str) -> dict[str, Any]:
    """The next message of ``op_id`` (the watch's events of other operations skipped)."""
    while (message := await ws.recv())["id"] != op_id:
        pass
    return message


def test_manifest_formats(tmp_path: Path) -> None:
    md5 = hashlib.md5(PODS.encode()).hexdigest()
    relay = parse_manifest(orjson.dumps({md5: PODS, "custom-id": TYPENAME}), "relay")
    # Relay's ids are names; every document is also known by its SHA-256.
    assert relay.by_id == {
        md5: PODS,
        sha256(PODS): PODS,
        "custom-id": TYPENAME,
        sha256(TYPENAME): TYPENAME,
    }
    apollo = parse_manifest(
        orjson.dumps(
            {
                "format": "apollo-persisted-query-manifest",
                "version": 1,
                "operations": [{"id": sha256(PODS), "name": "Pods", "type": "query", "body": PODS}],
            }
        ),
        "apollo",
    )
    assert apollo.by_id == {sha256(PODS): PODS}
    prefixed = parse_manifest(orjson.dumps({f"sha256:{sha256(PODS)}": PODS}), "prefixed")
    assert prefixed.by_id == {sha256(PODS): PODS}
    for raw, says in (
        (orjson.dumps({sha256(PODS): TYPENAME}), f"the key {sha256(PODS)} is not the SHA-256"),
        (b"[]", "expected a JSON object of document id to document text"),
        (b"{", "not valid JSON"),
        (b"{}", "names no document"),
        (orjson.dumps({"a": 1}), "the entry 'a' is not an id with a document's text"),
    ):
        with pytest.raises(ConfigError, match=r"^bad\.json: ") as raised:
            parse_manifest(raw, "bad.json")
        assert says in str(raised.value)
    with pytest.raises(ConfigError, match="No such file"):
        Persisted(tmp_path / "missing.json")


def test_a_wrong_manifest_stops_the_start(tmp_path: Path) -> None:
    bad = tmp_path / "persisted-documents.json"
    bad.write_bytes(orjson.dumps({sha256(PODS): TYPENAME}))
    for manifest, says in (
        (
            bad,
            f"kube-gateway: cannot start: --trusted-documents {bad}: the key {sha256(PODS)} "
            f"is not the SHA-256 of its document (that is {sha256(TYPENAME)}); regenerate "
            "the manifest\n",
        ),
        (
            tmp_path / "none.json",
            f"kube-gateway: cannot start: --trusted-documents {tmp_path / 'none.json'}: "
            "No such file or directory\n",
        ),
    ):
        started = subprocess.run(
            command(free_port(), free_port(), "--demo", "--trusted-documents", str(manifest)),
            capture_output=True,
            text=True,
            env=clean_env(tmp_path),
            timeout=120,
            check=False,
        )
        assert (started.returncode, started.stderr) == (2, says)


async def _reloaded(gateway: Gateway, change: Any) -> None:
    persisted: Persisted = gateway.graphql.persisted
    generation = persisted.generation
    change()
    async with asyncio.timeout(10):
        await persisted.reloaded(generation)


async def test_a_changed_manifest_serves_at_once(
    manifest: Path, trusted: Gateway, http: httpx.AsyncClient
) -> None:
    new = manifest.with_suffix(".new")
    new.write_bytes(orjson.dumps(codegen_manifest(NOT_TRUSTED)))
    await _reloaded(trusted, lambda: os.replace(new, manifest))  # as an editor saves
    response = await http.post("/graphql", json={"documentId": sha256(NOT_TRUSTED)})
    assert response.json() == {"data": {"__typename": "Query", "nodes": "Query"}}
    refusal(
        await http.post("/graphql", json={"query": TYPENAME}), 403, "PERSISTED_QUERY_NOT_ALLOWED"
    )
    # SIGHUP reads it again too (the loop of this thread handles it).
    assert signal.getsignal(signal.SIGHUP) is not signal.SIG_DFL
    await asyncio.to_thread(manifest.write_bytes, orjson.dumps(codegen_manifest(TYPENAME)))
    await _reloaded(trusted, lambda: os.kill(os.getpid(), signal.SIGHUP))
    served = await http.post("/graphql", json={"query": TYPENAME})
    assert served.json() == {"data": {"__typename": "Query"}}
    # A broken file is not taken: the documents served so far still are.
    generation = trusted.graphql.persisted.generation
    await asyncio.to_thread(manifest.write_bytes, b"{ half written")
    assert trusted.graphql.persisted.reload() is False
    assert trusted.graphql.persisted.generation == generation
    served = await http.post("/graphql", json={"documentId": sha256(TYPENAME)})
    assert served.json() == {"data": {"__typename": "Query"}}


def test_the_settings_are_flags_and_env_vars(manifest: Path) -> None:
    assert load([], {}).trusted_documents is None
    assert load([], {}).persisted_queries is True
    assert load(["--trusted-documents", str(manifest)], {}).trusted_documents == str(manifest)
    env = {"KUBE_GATEWAY_TRUSTED_DOCUMENTS": str(manifest)}
    assert load([], env).trusted_documents == str(manifest)
    assert load(["--no-persisted-queries"], {}).persisted_queries is False
    assert load([], {"KUBE_GATEWAY_PERSISTED_QUERIES": "false"}).persisted_queries is False


async def test_every_endpoint_serves_the_same_trusted_documents(
    manifest: Path, demo: DemoUpstream, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    await asyncio.to_thread(token.write_text, ADMIN)
    async with (
        trusted_gateway(manifest, demo, discovery_token_file=str(token)) as gw,
        httpx.AsyncClient(base_url=gw.url, headers=AUTH, timeout=30) as http,
    ):
        await gw.app.state.runtime.live_schema.wait_ready()
        group = "/apis/demo.kube-gateway.dev/graphql"
        refused = await http.post(group, json={"query": NOT_TRUSTED})
        refusal(refused, 403, "PERSISTED_QUERY_NOT_ALLOWED")
        served = await http.post(group, json={"documentId": sha256(TYPENAME)})
        assert served.json() == {"data": {"__typename": "Query"}}

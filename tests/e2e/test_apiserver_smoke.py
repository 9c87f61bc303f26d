"""Smoke: the real kube-apiserver fixture is up and set up as the e2e suite expects.

These talk to the apiserver directly (no gateway), so a failure here is a fixture or
environment problem, not a gateway bug.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.e2e.apiserver import BIN_DIR, KubeAPIServer


@pytest.fixture
async def client(kube_apiserver: KubeAPIServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=kube_apiserver.url,
        verify=kube_apiserver.ssl_context(),
        timeout=30.0,
        trust_env=False,
    ) as c:
        yield c


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "smoke"}},
        "spec": {"containers": [{"name": "main", "image": "registry.invalid/smoke:1"}]},
    }


def _name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


async def test_version_is_the_pinned_release(
    kube_apiserver: KubeAPIServer, client: httpx.AsyncClient
) -> None:
    r = await client.get("/version", headers=kube_apiserver.headers("nobody"))
    assert r.status_code == 200, r.text
    pinned = (BIN_DIR / "VERSIONS").read_text().split()[1]  # "kube-apiserver vX.Y.Z"
    assert r.json()["gitVersion"] == pinned


async def test_admin_creates_gets_and_lists_a_pod(
    kube_apiserver: KubeAPIServer, client: httpx.AsyncClient
) -> None:
    admin = kube_apiserver.headers("admin")
    name = _name("smoke")
    base = "/api/v1/namespaces/team-a/pods"
    r = await client.post(base, json=_pod(name), headers=admin)
    assert r.status_code == 201, r.text
    try:
        r = await client.get(f"{base}/{name}", headers=admin)
        assert r.status_code == 200, r.text
        assert r.json()["metadata"]["namespace"] == "team-a"
        r = await client.get(base, headers=admin)
        assert r.status_code == 200, r.text
        assert name in {p["metadata"]["name"] for p in r.json()["items"]}
    finally:
        r = await client.delete(f"{base}/{name}", headers=admin)
        assert r.status_code == 200, r.text


async def test_alice_is_confined_to_team_a(
    kube_apiserver: KubeAPIServer, client: httpx.AsyncClient
) -> None:
    alice = kube_apiserver.headers("alice")
    r = await client.get("/api/v1/namespaces/team-a/pods", headers=alice)
    assert r.status_code == 200, r.text
    r = await client.get("/api/v1/namespaces/team-b/pods", headers=alice)
    assert r.status_code == 403, r.text
    assert r.json()["reason"] == "Forbidden"


async def test_nobody_is_forbidden(
    kube_apiserver: KubeAPIServer, client: httpx.AsyncClient
) -> None:
    nobody = kube_apiserver.headers("nobody")
    for path in ("/api/v1/namespaces/team-a/pods", "/apis/image.openshift.io/v1/images"):
        r = await client.get(path, headers=nobody)
        assert r.status_code == 403, (path, r.text)


async def test_unknown_token_is_unauthorized(client: httpx.AsyncClient) -> None:
    r = await client.get("/api/v1/namespaces/team-a/pods", headers={"Authorization": "Bearer x"})
    assert r.status_code == 401, r.text


async def test_image_crd_requires_docker_image_layers(
    kube_apiserver: KubeAPIServer, client: httpx.AsyncClient
) -> None:
    admin = kube_apiserver.headers("admin")
    base = "/apis/image.openshift.io/v1/images"
    # OpenShift names images "sha256:<hex>"; a CRD-backed kind only takes DNS-subdomain
    # names, so the real-apiserver stand-in uses "sha256-<hex>".
    digest = "sha256:" + secrets.token_hex(32)
    name = digest.replace(":", "-")
    image = {
        "apiVersion": "image.openshift.io/v1",
        "kind": "Image",
        "metadata": {"name": name},
        "dockerImageReference": f"registry.invalid/smoke@{digest}",
        "dockerImageMetadata": {"kind": "DockerImage", "Architecture": "amd64"},
        "dockerImageLayers": [
            {
                "name": "sha256:" + "0" * 64,
                "size": 1234,
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            }
        ],
    }
    r = await client.post(base, json=image, headers=admin)
    assert r.status_code == 201, r.text
    try:
        r = await client.get(f"{base}/{name}", headers=admin)
        assert r.status_code == 200, r.text
        assert r.json()["dockerImageLayers"][0]["size"] == 1234
        assert r.json()["dockerImageMetadata"]["Architecture"] == "amd64"

        missing = {k: v for k, v in image.items() if k != "dockerImageLayers"}
        missing["metadata"] = {"name": "sha256-" + secrets.token_hex(32)}
        r = await client.post(base, json=missing, headers=admin)
        assert r.status_code == 422, r.text
        assert "dockerImageLayers" in r.text
    finally:
        r = await client.delete(f"{base}/{name}", headers=admin)
        assert r.status_code == 200, r.text


async def test_watch_list_ends_initial_events_with_a_bookmark(
    kube_apiserver: KubeAPIServer, client: httpx.AsyncClient
) -> None:
    admin = kube_apiserver.headers("admin")
    base = "/api/v1/namespaces/team-a/pods"
    name = _name("watchlist")
    r = await client.post(base, json=_pod(name), headers=admin)
    assert r.status_code == 201, r.text
    params = {
        "watch": "true",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "30",
    }
    events: list[dict[str, Any]] = []
    try:
        async with client.stream("GET", base, params=params, headers=admin) as resp:
            assert resp.status_code == 200
            async for line in resp.aiter_lines():
                if not line:
                    continue
                event = json.loads(line)
                events.append(event)
                if event["type"] == "BOOKMARK":
                    break
    finally:
        r = await client.delete(f"{base}/{name}", headers=admin)
        assert r.status_code == 200, r.text

    assert events, "the watch ended without any event"
    *initial, bookmark = events
    assert bookmark["type"] == "BOOKMARK"
    annotations = bookmark["object"]["metadata"].get("annotations", {})
    assert annotations.get("k8s.io/initial-events-end") == "true"
    assert bookmark["object"]["metadata"]["resourceVersion"]
    assert {e["type"] for e in initial} == {"ADDED"}
    assert name in {e["object"]["metadata"]["name"] for e in initial}

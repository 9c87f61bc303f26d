"""Bearer-token authentication and RBAC-style authorisation, worded like the apiserver."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from kube_gateway_demo import DemoUpstream, TokenGrant

PODS = "/api/v1/namespaces/default/pods"


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_unauthenticated_requests_are_401(
    client_for: Callable[[str | None], httpx.AsyncClient], token: str | None
) -> None:
    c = client_for(token)
    for path in (PODS, "/api/v1/namespaces/default/widgets", "/version", "/apis"):
        r = await c.get(path)
        assert r.status_code == 401
        assert r.json() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "Unauthorized",
            "reason": "Unauthorized",
            "code": 401,
        }
    assert (await c.get("/healthz")).status_code == 200
    r = await client_for("admin-token").get(PODS, headers={"Authorization": "Basic YWJj"})
    assert r.status_code == 401


async def test_forbidden_messages(client_for: Callable[[str | None], httpx.AsyncClient]) -> None:
    alice = client_for("alice-token")
    r = await alice.get(PODS)
    assert r.status_code == 403
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods is forbidden: User "alice" cannot list resource "pods" in API group "" '
        'in the namespace "default"',
        "reason": "Forbidden",
        "details": {"kind": "pods"},
        "code": 403,
    }
    r = await alice.get("/api/v1/pods")
    assert r.json()["message"] == (
        'pods is forbidden: User "alice" cannot list resource "pods" in API group "" at the '
        "cluster scope"
    )
    r = await alice.get(f"{PODS}/nginx-7c5ddbdf54-x2x9p/log")
    assert r.json()["message"] == (
        'pods "nginx-7c5ddbdf54-x2x9p" is forbidden: User "alice" cannot get resource '
        '"pods/log" in API group "" in the namespace "default"'
    )
    assert r.json()["details"] == {"name": "nginx-7c5ddbdf54-x2x9p", "kind": "pods"}
    r = await alice.get(
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", params={"watch": "1"}
    )
    assert r.json()["message"] == (
        'leases.coordination.k8s.io is forbidden: User "alice" cannot watch resource "leases" in '
        'API group "coordination.k8s.io" in the namespace "kube-system"'
    )
    assert r.json()["details"] == {"group": "coordination.k8s.io", "kind": "leases"}
    r = await alice.get("/apis/image.openshift.io/v1/images")
    assert r.json()["message"] == (
        'images.image.openshift.io is forbidden: User "alice" cannot list resource "images" in '
        'API group "image.openshift.io" at the cluster scope'
    )
    # inside her namespace alice may do anything
    assert (await alice.get("/api/v1/namespaces/demo/pods")).status_code == 200
    r = await alice.delete("/api/v1/namespaces/demo/events/nope")
    assert r.status_code == 404


async def test_read_only_tokens(client_for: Callable[[str | None], httpx.AsyncClient]) -> None:
    viewer = client_for("viewer-token")
    assert (await viewer.get("/api/v1/pods")).status_code == 200
    assert (await viewer.get("/apis/image.openshift.io/v1/images")).status_code == 200
    r = await viewer.post(PODS, json={"metadata": {"name": "x"}})
    assert r.status_code == 403
    assert r.json()["message"] == (
        'pods is forbidden: User "viewer" cannot create resource "pods" in API group "" in the '
        'namespace "default"'
    )
    r = await viewer.delete(f"{PODS}/nginx-7c5ddbdf54-x2x9p")
    assert r.json()["message"].startswith(
        'pods "nginx-7c5ddbdf54-x2x9p" is forbidden: User "viewer" cannot delete resource'
    )
    r = await viewer.request("DELETE", PODS)
    assert "cannot deletecollection resource" in r.json()["message"]


async def test_custom_tokens() -> None:
    tokens = {"t1": TokenGrant("carol", frozenset({"default", "demo"}), read_only=True)}
    async with DemoUpstream(tokens, seed=False) as demo:
        async with httpx.AsyncClient(
            base_url=demo.url, headers={"Authorization": "Bearer t1"}, verify=False
        ) as c:
            assert (await c.get(PODS)).status_code == 200
            assert (await c.get("/api/v1/namespaces/kube-system/pods")).status_code == 403
        async with httpx.AsyncClient(
            base_url=demo.url, headers={"Authorization": "Bearer admin-token"}, verify=False
        ) as c:
            assert (await c.get(PODS)).status_code == 401

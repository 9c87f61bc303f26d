"""Impersonate mode against two demo clusters, with a tap in front of each.

Cluster ``default`` (A, the home cluster) knows alice (namespace ``demo``); cluster ``b``
has an administrator of its own and no alice at all.  In impersonate mode the gateway asks
A who a token is (a TokenReview with A's gateway credential), then calls each cluster with
that cluster's own credential plus ``Impersonate-*`` headers: alice reads A and is
refused by B, and the taps show on the wire that no caller token reached a cluster outside
A's TokenReview bodies, and that A's credential never reached B.  Callers' own
``Impersonate-*`` headers are refused in both modes, on every transport.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from gateway.core import errors
from gateway.core.fleet.fleet import Fleet
from gateway.core.upstream.budget import scope_of
from gateway.core.upstream.credentials import Credential, UserInfo
from gateway.core.upstream.identity import (
    Carrying,
    Impersonating,
    TokenReviews,
    refuse_impersonation,
    user_of_review,
)
from gateway.grpc.gen.kubegateway.v1 import leases_pb2, leases_pb2_grpc
from gateway.settings import load
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.auth import DEFAULT_TOKENS, TokenGrant
from tests.gateway.test_fleet import kubeconfig, lease, serves, until
from tests.support.graphql import Gateway, data, error_of, gql, serve_app
from tests.support.tap import Tap, requests_carrying

LEASES = '{ leases(namespace: "demo") { items { metadata { name } } } }'
WATCH = 'subscription { watchLeases(namespace: "demo") { type } }'
B_ADMIN = "bee-token"
#: A second token of alice's on A: the same user, so the same identity once reviewed.
ALICE_2 = "alice-second-token"
#: A's administrator in ``system:masters`` (a group that means something on every cluster).
ROOT = "root-token"
ROOT_GRANT = TokenGrant("root", "*", cluster_scoped=True, groups=("system:masters",))
#: A ServiceAccount of A's: a ``system:`` user, and its ``system:serviceaccounts`` groups.
ROBOT = "robot-token"
ROBOT_USER = "system:serviceaccount:demo:robot"
ROBOT_GROUPS = ("system:serviceaccounts", "system:serviceaccounts:demo")
ROBOT_GRANT = TokenGrant(ROBOT_USER, frozenset({"demo"}), groups=ROBOT_GROUPS)
TOKENS_A = {**DEFAULT_TOKENS, ALICE_2: DEFAULT_TOKENS["alice-token"], ROOT: ROOT_GRANT}
TOKENS_A[ROBOT] = ROBOT_GRANT
REVIEW_PATH = b"/apis/authentication.k8s.io/v1/tokenreviews"


@dataclass
class Fleet2:
    url: str
    app: Any
    fleet: Fleet
    client: httpx.AsyncClient
    tap_a: Tap
    tap_b: Tap
    home: DemoUpstream

    @property
    def reviews(self) -> TokenReviews:
        identity = self.app.state.runtime.identity
        assert isinstance(identity, Impersonating)
        # every cluster is handed the one strategy the composition root built
        assert all(c.adapter.identity is identity for _, c in self.fleet)
        return identity.reviews

    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.app.state.runtime.grpc_port}"


@contextlib.asynccontextmanager
async def impersonating(tmp_path: Path, *flags: str) -> AsyncIterator[Fleet2]:
    """Clusters A (default, home) and b, each behind a tap, served in impersonate mode."""
    tokens_b = {B_ADMIN: TokenGrant("admin", "*", cluster_scoped=True)}
    async with (
        DemoUpstream(TOKENS_A) as a,
        DemoUpstream(tokens_b) as b,
        Tap.before(a.url) as tap_a,
        Tap.before(b.url) as tap_b,
    ):
        await lease(a, "only-in-a")
        await lease(b, "only-in-b")
        token_file = tmp_path / "a-token"
        token_file.write_text("admin-token")
        config_b = kubeconfig(tmp_path / "b.yaml", tap_b.url, token=B_ADMIN)
        settings = load(
            [
                *("--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0"),
                *("--server", tap_a.url, "--token-file", str(token_file)),
                *("--cluster", f"b={config_b}", "--identity", "impersonate"),
                *("--log-level", "warning", *flags),
            ],
            {},
        )
        async with (
            serve_app(settings) as (url, app),
            httpx.AsyncClient(base_url=url, timeout=10) as client,
        ):
            fleet = app.state.runtime.fleet
            await until(fleet, serves("b"))
            yield Fleet2(url, app, fleet, client, tap_a, tap_b, a)


def names(body: dict[str, Any]) -> set[str]:
    return {item["metadata"]["name"] for item in data(body)["leases"]["items"]}


async def test_a_user_reads_where_its_rbac_allows_and_only_there(tmp_path: Path) -> None:
    async with impersonating(tmp_path) as gw:
        mine = names(await gql(gw.client, LEASES, token="alice-token"))
        assert mine == {"only-in-a"} or "only-in-a" in mine
        refused = error_of(
            await gql(gw.client, LEASES, token="alice-token", path="/clusters/b/graphql")
        )
        assert refused["extensions"]["code"] == "FORBIDDEN"
        assert 'User "alice" cannot list resource "leases"' in refused["message"]
        # The administrator of A is an administrator of b only because b says so: b's
        # RBAC is asked about the user "admin", and b grants that user everything.
        theirs = names(
            await gql(gw.client, LEASES, token="admin-token", path="/clusters/b/graphql")
        )
        assert "only-in-b" in theirs and "only-in-a" not in theirs

        # gRPC: x-kube-cluster picks the cluster, the same user is asked about on each.
        async with grpc.aio.insecure_channel(gw.grpc_target()) as channel:
            stub = leases_pb2_grpc.LeaseServiceStub(channel)
            auth = (("authorization", "Bearer alice-token"),)
            listed = await stub.List(leases_pb2.ListLeasesRequest(namespace="demo"), metadata=auth)
            assert "only-in-a" in {item.metadata.name for item in listed.items}
            with pytest.raises(grpc.aio.AioRpcError) as denied:
                await stub.List(
                    leases_pb2.ListLeasesRequest(namespace="demo"),
                    metadata=(*auth, ("x-kube-cluster", "b")),
                )
            assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED

        # On the wire: b saw alice impersonated by b's own administrator, never a token of
        # A's; A saw alice's token only inside its TokenReview bodies.
        wire_a, wire_b = bytes(gw.tap_a.from_client), bytes(gw.tap_b.from_client)
        assert b"impersonate-user: alice\r\n" in wire_b.lower()
        assert b"impersonate-group: demo:users\r\n" in wire_b.lower()
        assert b"impersonate-uid: demo-alice\r\n" in wire_b.lower()
        for secret in (b"alice-token", b"admin-token"):
            assert secret not in wire_b
        assert B_ADMIN.encode() not in wire_a
        assert b"bearer alice-token" not in wire_a.lower()
        carrying = requests_carrying(wire_a, b"alice-token")
        assert carrying and all(REVIEW_PATH in line for line in carrying)
        # Each request to b carries b's credential, plus the impersonated user.
        assert f"bearer {B_ADMIN}".encode() in wire_b.lower()


async def test_an_unauthenticated_caller_reaches_no_cluster(tmp_path: Path) -> None:
    async with impersonating(tmp_path) as gw:
        before_b = bytes(gw.tap_b.from_client).count(b"/leases")
        bad = error_of(
            await gql(gw.client, LEASES, token="no-such-token", path="/clusters/b/graphql")
        )
        assert bad["extensions"]["code"] == "UNAUTHENTICATED"
        assert bad["message"] == "Unauthorized"
        nobody = error_of(await gql(gw.client, LEASES, token=None, path="/clusters/b/graphql"))
        assert nobody["extensions"]["code"] == "UNAUTHENTICATED"
        assert "Authorization: Bearer <token>" in nobody["message"]
        assert bytes(gw.tap_b.from_client).count(b"/leases") == before_b
        assert b"no-such-token" not in bytes(gw.tap_b.from_client)
        # Asked once, then refused from the negative cache (no second review).
        reviews = gw.reviews.reviews
        await gql(gw.client, LEASES, token="no-such-token")
        assert gw.reviews.reviews == reviews

        async with grpc.aio.insecure_channel(gw.grpc_target()) as channel:
            stub = leases_pb2_grpc.LeaseServiceStub(channel)
            for metadata in ((("authorization", "Bearer no-such-token"),), ()):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.List(
                        leases_pb2.ListLeasesRequest(namespace="demo"),
                        metadata=(*metadata, ("x-kube-cluster", "b")),
                    )
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert bytes(gw.tap_b.from_client).count(b"/leases") == before_b


async def test_an_impersonated_caller_is_shown_the_clusters_its_impersonation_reaches(
    tmp_path: Path,
) -> None:
    """A cluster is shown to a caller when a SelfSubjectReview sent there as every call is
    (the cluster's gateway credential plus the caller's ``Impersonate-*`` headers)
    succeeds: alice, whom the home cluster authenticates, is shown both clusters; a token
    the home cluster refuses is shown none, and nothing of it reaches b."""
    clusters = "{ clusters { name } }"
    review = b"POST /apis/authentication.k8s.io/v1/selfsubjectreviews"
    async with impersonating(tmp_path) as gw:
        shown = data(await gql(gw.client, clusters, token="alice-token"))["clusters"]
        assert [c["name"] for c in shown] == ["default", "b"]
        wire_b = bytes(gw.tap_b.from_client)
        assert wire_b.count(review) == 1
        assert b"impersonate-user: alice" in wire_b.lower()
        assert b"alice-token" not in wire_b
        shown = data(await gql(gw.client, clusters, token="no-such-token"))["clusters"]
        assert shown == []
        assert bytes(gw.tap_b.from_client).count(review) == 1


async def test_one_user_is_one_identity_whatever_its_token(tmp_path: Path) -> None:
    async with impersonating(tmp_path) as gw:
        adapter = gw.fleet.get("b").adapter
        first = await adapter.identity.identified(Credential("alice-token"))
        second = await adapter.identity.identified(Credential(ALICE_2))
        assert first.token is None and first.user is not None
        assert first.user.username == "alice" and first.user.uid == "demo-alice"
        assert scope_of(first) == scope_of(second) != scope_of(Credential("alice-token"))
        viewer = await adapter.identity.identified(Credential("viewer-token"))
        assert scope_of(viewer) != scope_of(first)
        # A refused token stays what it was: the first upstream call refuses it.
        assert await adapter.identity.identified(Credential("nope")) == Credential("nope")

        # Two subscribers with two tokens of alice share one execution on A.
        graphql = Gateway(gw.url, gw.app, None).graphql  # type: ignore[arg-type]
        ws_url = gw.url.replace("http", "ws") + "/graphql"
        async with (
            connect(ws_url, subprotocols=["graphql-transport-ws"]) as one,  # type: ignore[list-item]
            connect(ws_url, subprotocols=["graphql-transport-ws"]) as two,  # type: ignore[list-item]
        ):
            for ws, token in ((one, "alice-token"), (two, ALICE_2)):
                await subscribed(ws, token)
            keys = {key[0] for key in graphql.subscriptions.executions}
            assert keys == {scope_of(first)}


async def subscribed(ws: Any, token: str) -> dict[str, Any]:
    """Initialise ``ws`` with ``token``, subscribe to :data:`WATCH`, return its first message."""
    await ws.send(json.dumps({"type": "connection_init", "payload": {"authToken": token}}))
    assert json.loads(await ws.recv())["type"] == "connection_ack"
    await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": WATCH}}))
    event: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), 10))
    return event


async def test_shared_watches_admit_the_impersonated_user_per_cluster(tmp_path: Path) -> None:
    async with impersonating(tmp_path, "--shared-watches") as gw:
        url = gw.url.replace("http", "ws")
        for path, allowed in (("/graphql", True), ("/clusters/b/graphql", False)):
            async with connect(url + path, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
                event = await subscribed(ws, "alice-token")
                if allowed:
                    assert event["type"] == "next", event
                else:
                    payload = event["payload"]
                    errors_ = payload if isinstance(payload, list) else payload["errors"]
                    assert errors_[0]["extensions"]["code"] == "FORBIDDEN", event
        # b's review asked about alice, with b's administrator's credential.
        wire_b = bytes(gw.tap_b.from_client)
        reviews = requests_carrying(wire_b, b"selfsubjectaccessreviews")
        assert reviews
        assert b"impersonate-user: alice" in wire_b.lower()


# -- callers can never choose the identity: refused in both modes, on every transport ------


@contextlib.asynccontextmanager
async def forward_gateway() -> AsyncIterator[tuple[str, Any, Tap]]:
    async with DemoUpstream() as demo, Tap.before(demo.url) as tap:
        settings = load(
            [
                *("--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0"),
                *("--server", tap.url, "--log-level", "warning"),
            ],
            {},
        )
        async with serve_app(settings) as (url, app):
            yield url, app, tap


@contextlib.asynccontextmanager
async def either_mode(mode: str, tmp_path: Path) -> AsyncIterator[tuple[str, Any, list[Tap]]]:
    if mode == "forward":
        async with forward_gateway() as (url, app, tap):
            yield url, app, [tap]
    else:
        async with impersonating(tmp_path) as gw:
            yield gw.url, gw.app, [gw.tap_a, gw.tap_b]


@pytest.mark.parametrize("mode", ["forward", "impersonate"])
async def test_callers_impersonation_headers_are_refused(mode: str, tmp_path: Path) -> None:
    async with either_mode(mode, tmp_path) as (url, app, taps):
        auth = {"Authorization": "Bearer admin-token"}
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            for header in ("Impersonate-User", "impersonate-group", "IMPERSONATE-EXTRA-scopes"):
                response = await client.post(
                    "/graphql", json={"query": LEASES}, headers={**auth, header: "system:admin"}
                )
                assert response.status_code == 403, response.text
                error = response.json()["errors"][0]
                assert error["extensions"]["code"] == "FORBIDDEN"
                assert "callers cannot choose the identity" in error["message"]
                assert f"'{header.lower()}'" in error["message"]

        ws_url = url.replace("http", "ws") + "/graphql"
        with pytest.raises(ConnectionClosed) as closed:
            async with connect(
                ws_url,
                subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
                additional_headers={"Impersonate-User": "system:admin"},
            ) as ws:
                await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403
        for payload in (
            {"authToken": "admin-token", "Impersonate-User": "system:admin"},
            {"headers": {"Authorization": "Bearer admin-token", "impersonate-group": "x"}},
        ):
            async with connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:  # type: ignore[list-item]
                await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.recv()
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403
                assert "callers cannot choose" in closed.value.rcvd.reason

        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.state.runtime.grpc_port}") as ch:
            stub = leases_pb2_grpc.LeaseServiceStub(ch)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.List(
                    leases_pb2.ListLeasesRequest(namespace="demo"),
                    metadata=(
                        ("authorization", "Bearer admin-token"),
                        ("impersonate-user", "system:admin"),
                    ),
                )
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "callers cannot choose the identity" in (refused.value.details() or "")
        # Nothing of any of these reached a cluster.
        for tap in taps:
            assert b"system:admin" not in tap.from_client


# -- the pieces ----------------------------------------------------------------------------


def test_impersonation_headers_of_a_user() -> None:
    user = UserInfo(
        "jane",
        uid="42",
        groups=("dev", "system:authenticated"),
        extra=(("example.com/team name", ("a", "b")), ("scopes", ("view",))),
    )
    assert user.headers() == [
        (b"Impersonate-User", b"jane"),
        (b"Impersonate-Group", b"dev"),
        (b"Impersonate-Group", b"system:authenticated"),
        (b"Impersonate-Uid", b"42"),
        (b"Impersonate-Extra-example.com%2Fteam%20name", b"a"),
        (b"Impersonate-Extra-example.com%2Fteam%20name", b"b"),
        (b"Impersonate-Extra-scopes", b"view"),
    ]
    assert Credential(user=user).headers() == user.headers()
    assert "jane" not in repr(Credential(user=user))
    # Keys cannot run into each other: a group named like a user and its uid differ.
    assert UserInfo("a", groups=("b",)).key() != UserInfo("a", uid="b").key()
    assert UserInfo("a,b").key() != UserInfo("a", groups=("b",)).key()


def test_a_review_status_becomes_a_user() -> None:
    status = {
        "authenticated": True,
        "user": {
            "username": "system:serviceaccount:team:app",
            "uid": "u-1",
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "extra": {"z": ["1"], "authentication.kubernetes.io/pod-name": ["p"]},
        },
    }
    user = user_of_review(status)
    assert user is not None
    assert user.extra == (("authentication.kubernetes.io/pod-name", ("p",)), ("z", ("1",)))
    assert user_of_review({"authenticated": False, "error": "x"}) is None
    assert user_of_review({"authenticated": True, "user": {"username": ""}}) is None


def test_refusal_names_the_header_and_ignores_others() -> None:
    refuse_impersonation(["authorization", "x-impersonate-user", "accept"], "header")
    with pytest.raises(errors.Forbidden) as refused:
        refuse_impersonation(["accept", "Impersonate-Uid"], "header")
    assert "'Impersonate-Uid'" in refused.value.message


def _jwt(exp: float) -> str:
    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part({'exp': exp})}.sig"


async def test_reviews_are_kept_coalesced_bounded_and_expire() -> None:
    now = [1000.0]
    tokens = {
        **DEFAULT_TOKENS,
        _jwt(1000.0 + 10): DEFAULT_TOKENS["viewer-token"],
    }
    async with DemoUpstream(tokens) as home, Tap.before(home.url) as tap:
        from gateway.core.fleet.cluster import Cluster
        from gateway.core.upstream.adapter import KubeAdapter
        from gateway.core.upstream.client import build_http_client
        from gateway.core.upstream.config import UpstreamConfig
        from gateway.core.watch.hub import WatchHub

        fleet = Fleet()  # first: the reviews find their home cluster in it
        reviews = TokenReviews(
            "home", fleet, max_entries=2, clock=lambda: now[0], wall=lambda: now[0]
        )
        identity = Impersonating(reviews)
        http = build_http_client(
            UpstreamConfig(server=tap.url, source="test", token="admin-token"),
            impersonate=identity.client_auth,
        )
        async with http:
            adapter = KubeAdapter(http, identity=identity)
            with pytest.raises(errors.Unavailable, match='home cluster "home"'):
                await reviews.user_of("alice-token")
            fleet.add("home", Cluster(adapter, WatchHub(adapter)))
            asked = reviews.reviews  # the refused one counts as asked

            users = await asyncio.gather(*(reviews.user_of("alice-token") for _ in range(20)))
            assert {u.username for u in users} == {"alice"} and reviews.reviews == asked + 1
            assert tap.from_client.count(REVIEW_PATH) == 1
            # Through the home cluster's KubeAdapter (the one I/O seam), which counted it.
            sent = adapter.metrics.registry.get_sample_value(
                "kube_gateway_upstream_request_duration_seconds_count",
                {"verb": "create", "resource": "tokenreviews", "code": "201"},
            )
            assert sent == 1
            # The review went as the gateway (A's admin), the token only in its body.
            assert b"bearer admin-token" in bytes(tap.from_client).lower()
            assert b"bearer alice-token" not in bytes(tap.from_client).lower()

            now[0] += 59
            await reviews.user_of("alice-token")
            assert reviews.reviews == asked + 1
            now[0] += 2  # past the 60 s cap: asked again
            await reviews.user_of("alice-token")
            assert reviews.reviews == asked + 2

            # A JWT that expires in 10 s is kept for no longer than that.
            jwt = _jwt(now[0] + 10)
            tokens_jwt = {**tokens, jwt: DEFAULT_TOKENS["viewer-token"]}
            home.app.tokens = tokens_jwt
            assert (await reviews.user_of(jwt)).username == "viewer"
            now[0] += 11
            await reviews.user_of(jwt)
            assert reviews.reviews == asked + 4

            # Refused tokens: kept 5 s, then asked again.
            for _ in range(2):
                with pytest.raises(errors.Unauthorized):
                    await reviews.user_of("wrong")
            assert reviews.reviews == asked + 5
            now[0] += 6
            with pytest.raises(errors.Unauthorized):
                await reviews.user_of("wrong")
            assert reviews.reviews == asked + 6
            # Bounded: at most two answers kept.
            assert len(reviews) <= 2


async def test_the_demo_clusters_serve_impersonate_mode() -> None:
    """``--demo-clusters=2 --identity impersonate`` (what docs/identity.md shows) works:
    the demo answers TokenReviews and honours its administrator's impersonation."""
    settings = load(
        [
            *("--host", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--demo"),
            *("--demo-clusters", "2", "--identity", "impersonate", "--log-level", "warning"),
        ],
        {},
    )
    async with (
        serve_app(settings) as (url, app),
        httpx.AsyncClient(base_url=url, timeout=10) as client,
    ):
        await until(app.state.runtime.fleet, serves("demo-2"))
        for path in ("/graphql", "/clusters/demo-2/graphql"):
            assert data(await gql(client, LEASES, token="alice-token", path=path))
            pods = error_of(
                await gql(
                    client,
                    '{ pods(namespace: "kube-system") { items { metadata { name } } } }',
                    token="alice-token",
                    path=path,
                )
            )
            assert pods["extensions"]["code"] == "FORBIDDEN"
            assert 'User "alice"' in pods["message"]


# -- a running subscription follows its token -------------------------------------------


async def until_ended(ws: Any, deadline: float = 30.0) -> dict[str, Any]:
    """The first error of ``ws``'s subscription (its events before it are skipped)."""
    async with asyncio.timeout(deadline):
        while True:
            frame = json.loads(await ws.recv())
            payload = frame.get("payload")
            if frame["type"] == "error":
                return payload[0]  # type: ignore[no-any-return]
            if frame["type"] == "next" and isinstance(payload, dict) and payload.get("errors"):
                return payload["errors"][0]  # type: ignore[no-any-return]
            assert frame["type"] == "next", frame


async def next_added(ws: Any, deadline: float = 20.0) -> None:
    async with asyncio.timeout(deadline):
        while True:
            frame = json.loads(await ws.recv())
            assert frame["type"] == "next" and not frame["payload"].get("errors"), frame
            if frame["payload"]["data"]["watchLeases"]["type"] == "ADDED":
                return


async def test_a_subscription_ends_when_its_token_is_revoked_and_its_neighbour_goes_on(
    tmp_path: Path,
) -> None:
    """alice's second token is revoked on the home cluster: its WebSocket subscription and
    its gRPC watch end ``UNAUTHENTICATED`` within a recheck or two, a new request with it
    is refused, and alice's subscription with her other token (the same user, the same
    identity) goes on and gets the next event."""
    async with (
        impersonating(tmp_path, "--token-recheck-seconds", "0.5") as gw,
        grpc.aio.insecure_channel(gw.grpc_target()) as channel,
    ):
        ws_url = gw.url.replace("http", "ws") + "/graphql"
        stub = leases_pb2_grpc.LeaseServiceStub(channel)
        async with (
            connect(ws_url, subprotocols=["graphql-transport-ws"]) as doomed,  # type: ignore[list-item]
            connect(ws_url, subprotocols=["graphql-transport-ws"]) as neighbour,  # type: ignore[list-item]
        ):
            assert (await subscribed(doomed, ALICE_2))["type"] == "next"
            assert (await subscribed(neighbour, "alice-token"))["type"] == "next"
            watch = stub.Watch(
                leases_pb2.WatchLeasesRequest(namespace="demo"),
                metadata=(("authorization", f"Bearer {ALICE_2}"),),
            )
            assert (await asyncio.wait_for(watch.read(), 10)).type
            assert gw.reviews.followed == 2  # one per token, whatever its streams

            gw.home.app.tokens = {k: v for k, v in TOKENS_A.items() if k != ALICE_2}
            revoked = time.monotonic()
            ended = await until_ended(doomed)
            took = time.monotonic() - revoked
            assert ended["extensions"]["code"] == "UNAUTHENTICATED", ended
            assert ended["message"] == "Unauthorized: the token is no longer valid"
            assert took < 10, took  # two rechecks of 0.5 s, on a loaded machine
            with pytest.raises(grpc.aio.AioRpcError) as cut:
                async with asyncio.timeout(10):
                    while True:
                        await watch.read()
            assert cut.value.code() == grpc.StatusCode.UNAUTHENTICATED
            refused = error_of(await gql(gw.client, LEASES, token=ALICE_2))
            assert refused["extensions"]["code"] == "UNAUTHENTICATED"
            assert gw.reviews.ended == 2

            started = time.monotonic()
            await lease(gw.home, "after-the-revocation")
            await next_added(neighbour)
            assert time.monotonic() - started < 5
            assert gw.reviews.followed == 1


async def test_a_subscription_ends_at_its_jwt_exp_without_asking_again(tmp_path: Path) -> None:
    """A JWT whose ``exp`` comes before the next recheck: its subscription ends then, with
    no review more (the ``exp`` only ever ends earlier), and the neighbour goes on."""
    async with impersonating(tmp_path) as gw:  # the default recheck: 30 s
        jwt = _jwt(time.time() + 3)
        gw.home.app.tokens = {**TOKENS_A, jwt: TOKENS_A["viewer-token"]}
        ws_url = gw.url.replace("http", "ws") + "/graphql"
        async with (
            connect(ws_url, subprotocols=["graphql-transport-ws"]) as doomed,  # type: ignore[list-item]
            connect(ws_url, subprotocols=["graphql-transport-ws"]) as neighbour,  # type: ignore[list-item]
        ):
            assert (await subscribed(doomed, jwt))["type"] == "next"
            assert (await subscribed(neighbour, "alice-token"))["type"] == "next"
            reviews = gw.reviews.reviews
            ended = await until_ended(doomed, deadline=20)
            assert ended["extensions"]["code"] == "UNAUTHENTICATED"
            assert ended["message"] == "Unauthorized: the token expired"
            assert gw.reviews.reviews == reviews
            await lease(gw.home, "after-the-exp")
            await next_added(neighbour)


async def test_system_names_are_not_carried_to_other_clusters(tmp_path: Path) -> None:
    """The home cluster sees the caller as its TokenReview said; cluster b gets
    ``system:authenticated`` of the ``system:`` groups only, and no ``system:`` user: a
    ServiceAccount of A is served by A and refused (before anything is sent) by b."""
    async with impersonating(tmp_path) as gw:
        assert "only-in-a" in names(await gql(gw.client, LEASES, token=ROBOT))
        refused = error_of(await gql(gw.client, LEASES, token=ROBOT, path="/clusters/b/graphql"))
        assert refused["extensions"]["code"] == "FORBIDDEN"
        assert f'the user "{ROBOT_USER}" is not carried to this cluster' in refused["message"]
        shown = data(await gql(gw.client, "{ clusters { name } }", token=ROBOT))["clusters"]
        assert [c["name"] for c in shown] == ["default"]

        await gql(gw.client, LEASES, token=ROOT)
        await gql(gw.client, LEASES, token=ROOT, path="/clusters/b/graphql")
        wire_a, wire_b = bytes(gw.tap_a.from_client).lower(), bytes(gw.tap_b.from_client).lower()
        assert b"impersonate-group: system:masters\r\n" in wire_a
        assert b"impersonate-group: system:serviceaccounts:demo\r\n" in wire_a
        assert b"impersonate-user: root\r\n" in wire_b
        assert b"impersonate-group: system:authenticated\r\n" in wire_b
        assert b"impersonate-group: demo:users\r\n" in wire_b
        assert b"system:masters" not in wire_b
        assert b"system:serviceaccount" not in wire_b


def test_carrying_maps_the_impersonation_headers() -> None:
    def mapped(carrying: Carrying, user: UserInfo) -> list[tuple[bytes, bytes]]:
        headers = httpx.Headers(user.headers())
        carrying.apply(headers)
        return [(k.lower(), v) for k, v in headers.raw]

    root = UserInfo("root", groups=("dev", "system:masters", "system:authenticated"))
    assert mapped(Carrying(), root) == [
        (b"impersonate-user", b"root"),
        (b"impersonate-group", b"dev"),
        (b"impersonate-group", b"system:authenticated"),
    ]
    assert mapped(Carrying(system_groups=frozenset({"*"})), root) == [
        (k.lower(), v) for k, v in root.headers()
    ]
    robot = UserInfo("system:serviceaccount:a:b", extra=(("k", ("v",)),))
    with pytest.raises(errors.Forbidden, match="not carried"):
        mapped(Carrying(), robot)
    assert (b"impersonate-extra-k", b"v") in mapped(Carrying(system_users=True), robot)


def test_a_review_for_other_audiences_is_refused() -> None:
    status = {"authenticated": True, "user": {"username": "u"}}
    assert user_of_review(status) is not None
    # Asked for audiences: a reviewer that names none (not audience-aware) is not believed.
    assert user_of_review(status, ("gw",)) is None
    assert user_of_review({**status, "audiences": ["other"]}, ("gw",)) is None
    assert user_of_review({**status, "audiences": ["other", "gw"]}, ("gw",)) is not None


async def test_a_flood_of_random_tokens_costs_a_bounded_number_of_token_reviews(
    tmp_path: Path,
) -> None:
    """Each token the gateway has not reviewed lately draws on the one budget of new
    callers' reviews (``--max-new-caller-reviews``): 300 random tokens send at most the
    budget's burst and rate of TokenReviews and are refused RESOURCE_EXHAUSTED past it,
    while a caller the gateway knows is served beside them."""
    async with impersonating(tmp_path, "--max-new-caller-reviews", "5") as gw:
        assert "only-in-a" in names(await gql(gw.client, LEASES, token="admin-token"))
        before = gw.tap_a.from_client.count(REVIEW_PATH)
        started = time.monotonic()

        async def stranger(i: int) -> str:
            body = await gql(gw.client, LEASES, token=f"random-{i}")
            return str(error_of(body)["extensions"]["code"])

        codes = await asyncio.gather(*(stranger(i) for i in range(300)))
        seconds = time.monotonic() - started
        sent = gw.tap_a.from_client.count(REVIEW_PATH) - before
        assert set(codes) <= {"UNAUTHENTICATED", "RESOURCE_EXHAUSTED"}
        assert codes.count("RESOURCE_EXHAUSTED") >= 200, codes.count("RESOURCE_EXHAUSTED")
        # burst (5 s of rate: 25) plus the rate over the flood's time
        assert sent <= 25 + 5 * seconds + 1, (sent, seconds)
        # the known caller passes free
        assert "only-in-a" in names(await gql(gw.client, LEASES, token="admin-token"))

"""DNS rebinding: with ``--gateway-identity`` a request without a token is served as the
gateway, so a page of ``evil.example`` whose name is made to resolve to the gateway (same
origin in the browser's eyes: no CORS, no preflight) must not be served.  Its ``Host`` says
``evil.example``: the gateway answers IP addresses, ``localhost`` and ``--allowed-hosts``
only, over HTTP and WebSocket; probes answer whatever the Host."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.graphql.transport.origins import host_allowed
from kube_gateway_demo import DemoUpstream
from tests.gateway.test_fleet import gateway
from tests.support.graphql import ADMIN

QUERY = {"query": '{ leases(namespace: "demo") { items { metadata { name } } } }'}


@pytest.mark.parametrize(
    ("host", "allowed", "answered"),
    [
        ("127.0.0.1:8080", frozenset(), True),
        ("[::1]:8080", frozenset(), True),
        ("localhost:8080", frozenset(), True),
        ("10.0.0.7", frozenset(), True),
        ("evil.example", frozenset(), False),
        ("evil.example:8080", frozenset(), False),
        ("gw.example.com:443", frozenset({"gw.example.com"}), True),
        ("a.gw.example.com", frozenset({"*.gw.example.com"}), True),
        ("gw.example.com.evil.example", frozenset({"*.gw.example.com"}), False),
        ("anything", frozenset({"*"}), True),
        (None, frozenset(), False),
    ],
)
def test_which_hosts_are_answered(
    host: str | None, allowed: frozenset[str], answered: bool
) -> None:
    assert host_allowed(host, allowed) is answered


async def test_a_rebound_name_is_not_served_as_the_gateway(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(ADMIN)
    async with (
        DemoUpstream() as demo,
        gateway(
            demo,
            "--gateway-identity",
            "--token-file",
            str(token),
            "--allowed-hosts",
            "gw.example.com",
        ) as (served, _, client),
    ):
        # Its own address, and a listed name: served as the gateway (no token sent).
        for host in (None, "gw.example.com"):
            headers = {"Host": host} if host else {}
            ok = await client.post("/graphql", json=QUERY, headers=headers)
            assert ok.status_code == 200, ok.text
            assert "errors" not in ok.json()
        evil = await client.post("/graphql", json=QUERY, headers={"Host": "evil.example:8080"})
        assert evil.status_code == 421
        assert "--allowed-hosts" in evil.text and "leases" not in evil.text
        assert (await client.get("/metrics", headers={"Host": "evil.example"})).status_code == 421
        probe = await client.get("/healthz", headers={"Host": "evil.example"})
        assert probe.status_code == 200
        # A WebSocket upgrade with that Host is refused before it is accepted (the
        # websockets client sets Host itself: the handshake is written by hand).
        port = int(served.url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"GET /graphql HTTP/1.1\r\nHost: evil.example\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n"
        )
        status = await asyncio.wait_for(reader.readline(), 10)
        writer.close()
        assert status.split()[1] == b"403", status


async def test_without_the_gateway_identity_any_host_is_answered() -> None:
    async with DemoUpstream() as demo, gateway(demo) as (_, _fleet, client):
        answered = await client.post(
            "/graphql",
            json=QUERY,
            headers={"Host": "evil.example", "Authorization": f"Bearer {ADMIN}"},
        )
        assert answered.status_code == 200, answered.text

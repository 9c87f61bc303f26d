"""What a GraphQL scenario needs: the gateway served over real sockets in front of some
upstream (the demo or a real kube-apiserver), callers by identity, and real clients.

The demo suite (``tests/scenarios/test_graphql_scenarios.py``) and the end-to-end suite
(``tests/e2e/test_graphql_e2e.py``) each build a :class:`GraphQLBackend` and import the
scenarios of ``tests/scenarios/graphql_api.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from websockets.asyncio.client import connect

from kube_gateway_demo import DemoUpstream
from tests.scenarios.backend import RESOURCES, sample
from tests.support.graphql import TransportWS

_counter = itertools.count()

#: The identities every backend has.  ``bad`` is no valid token; ``anonymous`` sends none.
IDENTITIES = ("admin", "alice", "nobody", "bad", "anonymous")


@dataclass(frozen=True, slots=True)
class Kind:
    """The GraphQL names of one served resource."""

    plural: str
    kind: str
    namespaced: bool
    api_version: str

    @property
    def single(self) -> str:
        return self.kind[:1].lower() + self.kind[1:]

    @property
    def list_field(self) -> str:
        return self.plural + "List" if self.plural == self.single else self.plural

    @property
    def watch_field(self) -> str:
        return "watch" + self.plural[:1].upper() + self.plural[1:]

    def doc(self, template: str) -> str:
        """A GraphQL document from a template.

        ``%Kind%`` (``Pod``), ``%kind%`` (``pod``), ``%list%`` (``pods``,
        ``endpointsList``), ``%watch%`` (``watchPods``), ``%NSDECL%`` (``$ns: String!,``
        or nothing) and ``%NS%`` (``namespace: $ns,`` or nothing) are substituted, so one
        template serves namespaced and cluster-scoped kinds.
        """
        return (
            template.replace("%Kind%", self.kind)
            .replace("%kind%", self.single)
            .replace("%list%", self.list_field)
            .replace("%watch%", self.watch_field)
            .replace("%NSDECL%", "$ns: String!," if self.namespaced else "")
            .replace("%NS%", "namespace: $ns," if self.namespaced else "")
        )


KINDS: Mapping[str, Kind] = {
    plural: Kind(plural, r.kind, r.namespaced, r.api_version) for plural, r in RESOURCES.items()
}


class GraphQLError(AssertionError):
    """A response that was expected to have no errors had some."""


@dataclass
class GraphQLBackend:
    """The gateway in front of one upstream, with three identities.

    ``admin`` may do everything; ``alice`` everything in ``namespace`` (and, on the real
    apiserver only, read images); ``nobody`` nothing.

    Attributes:
        name: ``demo`` or ``apiserver``.
        url: the gateway's base URL (``http://127.0.0.1:<port>``).
        app: the served Starlette app (for the GraphQL hub and limits).
        tokens: the bearer token of each identity.
        http: an HTTP client of the gateway (no default credentials).
        alice_reads_images: whether alice may list images (the demo's token grants cannot
            express "read-only on cluster-scoped resources only").
        demo: the demo upstream, when that is the upstream.
    """

    name: str
    url: str
    app: Starlette
    tokens: Mapping[str, str]
    http: httpx.AsyncClient
    alice_reads_images: bool
    demo: DemoUpstream | None = None
    namespace: str = "team-a"
    other_namespace: str = "team-b"
    _run: str = field(default_factory=lambda: f"{os.getpid() % 10000}")

    def unique(self, prefix: str) -> str:
        """A DNS-1123 name no other test (or earlier run against the same cluster) uses."""
        return f"{prefix}-{self._run}-{next(_counter)}"

    @property
    def graphql(self) -> Any:
        """The GraphQLApp mounted at /graphql."""
        for route in self.app.routes:
            if getattr(route, "path", None) == "/graphql":
                return route.app  # type: ignore[attr-defined]
        raise LookupError("no /graphql route")

    def headers(self, identity: str) -> dict[str, str]:
        if identity == "anonymous":
            return {}
        token = self.tokens.get(identity, "not-a-valid-token")
        return {"Authorization": f"Bearer {token}"}

    async def post(
        self, query: str, variables: Mapping[str, Any] | None = None, *, identity: str = "admin"
    ) -> dict[str, Any]:
        """POST one operation as ``identity``; the decoded body (any HTTP status)."""
        response = await self.http.post(
            "/graphql",
            json={"query": query, "variables": dict(variables or {})},
            headers=self.headers(identity),
        )
        body: dict[str, Any] = response.json()
        return body

    async def ok(
        self, query: str, variables: Mapping[str, Any] | None = None, *, identity: str = "admin"
    ) -> dict[str, Any]:
        """The data of an operation that must succeed."""
        body = await self.post(query, variables, identity=identity)
        if body.get("errors"):
            raise GraphQLError(body["errors"])
        result: dict[str, Any] = body["data"]
        return result

    async def error(
        self, query: str, variables: Mapping[str, Any] | None = None, *, identity: str = "admin"
    ) -> dict[str, Any]:
        """The only error of an operation that must fail."""
        body = await self.post(query, variables, identity=identity)
        errors = body.get("errors") or []
        assert len(errors) == 1, body
        error: dict[str, Any] = errors[0]
        return error

    @contextlib.asynccontextmanager
    async def ws(
        self,
        identity: str = "admin",
        *,
        protocol: str = "graphql-transport-ws",
        token_in: str = "header",
    ) -> AsyncIterator[TransportWS]:
        """A connected, acknowledged WebSocket client calling as ``identity``.

        ``token_in="header"`` sends the token in the upgrade request's Authorization
        header; ``"payload"`` in the ``connection_init`` payload.
        """
        headers = self.headers(identity)
        url = self.url.replace("http://", "ws://") + "/graphql"
        async with connect(
            url,
            subprotocols=[protocol],  # type: ignore[list-item]
            additional_headers=headers if token_in == "header" else None,
        ) as ws:
            client = TransportWS(ws)
            await client.send(
                {"type": "connection_init", "payload": headers if token_in == "payload" else {}}
            )
            ack = await client.recv()
            assert ack["type"] == "connection_ack", ack
            yield client


def sample_input(kind: str, name: str, namespace: str | None) -> dict[str, Any]:
    """A minimal valid object as the typed ``<Kind>Input`` (no apiVersion/kind)."""
    obj = sample(kind, name, namespace)
    obj.pop("apiVersion", None)
    obj.pop("kind", None)
    obj["metadata"].pop("namespace", None)
    return obj

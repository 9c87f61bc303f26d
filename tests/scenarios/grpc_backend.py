"""What a gRPC client scenario needs: the gateway's gRPC server in front of some upstream (the
demo or a real kube-apiserver), a real ``grpc.aio`` channel to it, and callers by identity.

The demo suite (``tests/scenarios/test_grpc_scenarios.py``) and the end-to-end suite
(``tests/e2e/test_grpc_e2e.py``) each build a :class:`GrpcBackend` with :func:`serve_backend`
and import the scenarios of ``tests/scenarios/grpc_api.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format

from gateway.core.catalog.catalog import CatalogHolder
from gateway.core.fleet.cluster import Cluster
from gateway.core.model.registry import Resource
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.upstream.client import build_http_client
from gateway.core.upstream.config import UpstreamConfig
from gateway.core.upstream.credentials import Credential
from gateway.core.watch.hub import WatchHub
from gateway.grpc.messages import message_class
from gateway.grpc.server import GrpcOptions
from kube_gateway_demo import DemoUpstream
from tests.scenarios.backend import RESOURCES
from tests.support.grpc import start_one

_counter = itertools.count()

#: The identities every backend has.  ``bad`` is no valid token; ``anonymous`` sends none.
IDENTITIES = ("admin", "alice", "nobody", "bad", "anonymous")
CLIENT_LIMIT = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Kind:
    """The gRPC names of one served resource."""

    plural: str
    module: Any
    stub: Callable[[grpc.aio.Channel], Any]
    kind: str
    plural_name: str  # as in ``List<plural_name>Request``
    member: str  # the WatchEvent ``object`` oneof member
    namespaced: bool

    def request(self, template: str, /, **fields: Any) -> Any:
        """``k.request("Get{kind}Request", namespace=..., name=...)``; a cluster-scoped
        kind's request has no namespace, so a ``namespace`` argument is dropped."""
        cls = getattr(self.module, template.format(kind=self.kind, plural=self.plural_name))
        if not self.namespaced:
            fields.pop("namespace", None)
        return cls(**fields)

    def message(self, obj: Mapping[str, Any]) -> Any:
        """A client-built object message (``json_format``: independent of the gateway's codec)."""
        return json_format.ParseDict(obj, message_class(self.kind)())


def _kind(r: Resource) -> Kind:
    """The contract's naming: ``kubegateway/v1/<plural>.proto``, service ``<Kind>Service``,
    ``List<Plural>Request``, the WatchEvent member named like the singular."""
    module = importlib.import_module(f"gateway.grpc.gen.kubegateway.v1.{r.plural}_pb2")
    services = importlib.import_module(f"gateway.grpc.gen.kubegateway.v1.{r.plural}_pb2_grpc")
    stub = getattr(services, f"{r.kind}ServiceStub")
    plural_name = r.plural[:1].upper() + r.plural[1:]
    return Kind(r.plural, module, stub, r.kind, plural_name, r.singular, r.namespaced)


KIND: Mapping[str, Kind] = {plural: _kind(r) for plural, r in RESOURCES.items()}
KINDS = tuple(KIND)


@dataclass
class GrpcBackend:
    """The gateway's gRPC server in front of one upstream, with three identities.

    ``admin`` may do everything; ``alice`` everything in ``namespace`` (and, on the real
    apiserver only, read images); ``nobody`` nothing.

    Attributes:
        name: ``demo`` or ``apiserver``.
        channel: a ``grpc.aio`` channel to the gateway (no default credentials).
        target: ``127.0.0.1:<port>`` of the gateway's gRPC server.
        adapter: the gateway's own adapter (for reading what the upstream holds).
        tokens: the bearer token of each identity.
        alice_reads_images: whether alice may list images (the demo's token grants cannot
            express "read-only on cluster-scoped resources only").
        demo: the demo upstream, when that is the upstream.
    """

    name: str
    channel: grpc.aio.Channel
    target: str
    adapter: KubeAdapter
    tokens: Mapping[str, str]
    alice_reads_images: bool
    demo: DemoUpstream | None = None
    namespace: str = "team-a"
    other_namespace: str = "team-b"
    _run: str = field(default_factory=lambda: f"{os.getpid() % 10000}")
    _stubs: dict[str, Any] = field(default_factory=dict)

    def unique(self, prefix: str) -> str:
        """A DNS-1123 name no other test (or earlier run against the same cluster) uses."""
        return f"{prefix}-{self._run}-{next(_counter)}"

    def stub(self, plural: str) -> Any:
        """The generated client stub of a resource's service."""
        found = self._stubs.get(plural)
        if found is None:
            found = self._stubs[plural] = KIND[plural].stub(self.channel)
        return found

    def token(self, identity: str) -> str:
        return self.tokens.get(identity, "not-a-valid-token")

    def auth(self, identity: str = "admin") -> tuple[tuple[str, str], ...]:
        """Call metadata carrying ``identity``'s token (none for ``anonymous``)."""
        if identity == "anonymous":
            return ()
        return (("authorization", f"Bearer {self.token(identity)}"),)

    def credential(self, identity: str = "admin") -> Credential:
        return Credential(self.token(identity))

    def ns(self, plural: str) -> str | None:
        return self.namespace if KIND[plural].namespaced else None


@contextlib.asynccontextmanager
async def serve_backend(
    name: str,
    upstream: UpstreamConfig,
    tokens: Mapping[str, str],
    *,
    alice_reads_images: bool,
    demo: DemoUpstream | None = None,
    options: GrpcOptions | None = None,
    catalog: CatalogHolder | None = None,
) -> AsyncIterator[GrpcBackend]:
    """The gateway's gRPC server (``start_grpc``) on a free loopback port over a
    :class:`KubeAdapter` on ``upstream``, and a channel to it, until the block exits
    (``catalog``: what the generic ``ResourceService`` serves; default the seed resources)."""
    async with build_http_client(upstream) as http:
        adapter = KubeAdapter(http)
        hub = WatchHub(adapter)
        cluster = Cluster(adapter, hub, catalog if catalog is not None else CatalogHolder())
        server, port = await start_one(cluster, options=options)
        target = f"127.0.0.1:{port}"
        channel = grpc.aio.insecure_channel(
            target,
            options=[
                ("grpc.max_receive_message_length", CLIENT_LIMIT),
                ("grpc.max_send_message_length", CLIENT_LIMIT),
            ],
        )
        try:
            yield GrpcBackend(
                name=name,
                channel=channel,
                target=target,
                adapter=adapter,
                tokens=tokens,
                alice_reads_images=alice_reads_images,
                demo=demo,
            )
        finally:
            await channel.close()
            await hub.aclose()
            await server.stop(None)

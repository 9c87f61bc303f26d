"""What a transport (:mod:`gateway.graphql.transport.http`,
:mod:`gateway.graphql.transport.websocket`) needs of
the endpoint it serves: a structural type, so the transports sit below
:class:`~gateway.graphql.endpoints.server.GraphQLApp`, which dispatches to them, and neither imports
the other's module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gateway.core import Credential, Drain
    from gateway.graphql.engine.admission import Admission
    from gateway.graphql.engine.execution import Engine, Prepared
    from gateway.graphql.engine.limits import Limits
    from gateway.graphql.engine.subscriptions import Subscriptions
    from gateway.graphql.resolvers.context import Context


class Endpoint(Protocol):
    """One GraphQL endpoint as its transports use it."""

    @property
    def admission(self) -> Admission: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def subscriptions(self) -> Subscriptions: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def drain(self) -> Drain: ...

    @property
    def allowed_origins(self) -> frozenset[str]: ...

    async def caller(self, prepared: Prepared, credential: Credential) -> Credential: ...

    def context(self, credential: Credential) -> Context: ...

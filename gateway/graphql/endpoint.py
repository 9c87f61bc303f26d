"""What a transport (:mod:`gateway.graphql.http`, :mod:`gateway.graphql.websocket`) needs of
the endpoint it serves: a structural type, so the transports sit below
:class:`~gateway.graphql.server.GraphQLApp`, which dispatches to them, and neither imports
the other's module."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gateway.core import Credential, Drain
    from gateway.graphql.admission import Admission
    from gateway.graphql.context import Context
    from gateway.graphql.execution import Engine, Prepared
    from gateway.graphql.limits import Limits
    from gateway.graphql.subscriptions import Subscriptions


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

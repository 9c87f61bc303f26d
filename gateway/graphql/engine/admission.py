"""What every GraphQL endpoint admits: one :class:`Admission` per gateway, shared by all.

``/graphql``, ``/apis/{group}/graphql``, ``/clusters/{name}/graphql``,
``/clusters/{name}/apis/{group}/graphql`` and ``/fleet/graphql`` are each a
:class:`~gateway.graphql.endpoints.server.GraphQLApp`, and a ``GraphQLApp`` cannot be built without
an
``Admission``: the composition root makes the gateway's one, and every endpoint made later
(a cluster added to the fleet, a group schema built on first use, the fleet endpoint) takes
its creator's.  So the document policy (trusted documents or Automatic Persisted Queries),
the limits (size, tokens, depth, aliases, fields, introspection's answer), the allowed
browser origins and the drain are the same on every way in, by construction: there is no
second copy to forget.

Every transport of an endpoint (POST, GET, SSE, multipart, both WebSocket protocols) turns
a request's parameters into an operation through :meth:`Admission.admit`, the one place
that checks ``variables`` and ``extensions``, finds the document (trusted, persisted or
sent), parses and limits it, and refuses variables the operation does not declare,
list variables longer than :data:`MAX_LIST_VARIABLE_ITEMS` and ``variables`` of more than
``Limits.max_variable_values`` values at any depth (before graphql-core reads them item by
item; what is admitted and large is coerced off the event loop, by the engine).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import strawberry
from graphql import GraphQLSchema, ListTypeNode, NonNullTypeNode

from gateway.core import Drain
from gateway.graphql.engine.execution import Coercions, Engine, Introspections, Prepared
from gateway.graphql.engine.limits import Limits, count_values
from gateway.graphql.engine.persisted import Persisted
from gateway.graphql.errors import ApiError

__all__ = ["Admission", "Admitted"]

#: Undeclared variable names a refusal names (the rest are counted).
_NAMED = 5


@dataclass(frozen=True, slots=True)
class Admitted:
    """An operation admitted to run, with the variables it declares."""

    prepared: Prepared
    variables: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Admission:
    """The admission rules of every GraphQL endpoint of a gateway.

    Attributes:
        persisted: which documents are served and how they are named (``--trusted-documents``,
            Automatic Persisted Queries or ``--no-persisted-queries``).
        limits: request, document, connection and subscriber limits.
        allowed_origins: origins of other sites whose pages may use the gateway from a
            browser (``*``: any); the gateway's own pages always may.
        drain: the application's drain (operations are counted in flight and refused while
            draining).
        introspections: where every endpoint's introspections run, bounded.
        coercions: where every endpoint coerces large ``variables``, bounded.
    """

    persisted: Persisted
    limits: Limits = field(default_factory=Limits)
    allowed_origins: frozenset[str] = frozenset()
    drain: Drain = field(default_factory=Drain)
    introspections: Introspections = field(default_factory=Introspections)
    coercions: Coercions = field(default_factory=Coercions)

    def engine(self, schema: strawberry.Schema | GraphQLSchema) -> Engine:
        """An engine for ``schema`` under these rules."""
        return Engine(
            schema, self.limits, introspections=self.introspections, coercions=self.coercions
        )

    def admit(self, engine: Engine, params: Mapping[str, Any]) -> Admitted:
        """The operation ``params`` asks ``engine`` for, parsed, validated and limited.

        Raises:
            ApiError: ``variables`` or ``extensions`` is not an object, or ``variables``
                holds names the operation does not declare.
            RequestError: the document is not allowed, unknown, too large, or does not
                parse, validate or fit the limits.
        """
        variables = params.get("variables")
        if variables is not None and not isinstance(variables, dict):
            raise ApiError("`variables` must be a JSON object", code="BAD_REQUEST")
        extensions = params.get("extensions")
        if extensions is not None and not isinstance(extensions, dict):
            raise ApiError("`extensions` must be a JSON object", code="BAD_REQUEST")
        prepared = self.persisted.prepare(engine, params)
        if variables:
            _declared_only(prepared, variables)
            _bounded_lists(prepared, variables)
            _bounded_values(variables, self.limits.max_variable_values)
        return Admitted(prepared, variables)


def _declared_only(prepared: Prepared, variables: Mapping[str, Any]) -> None:
    """Refuse variables the operation does not declare: GraphQL would ignore them, but a
    subscription would keep them (and their size) for as long as it lives."""
    declared = {d.variable.name.value for d in prepared.operation.variable_definitions or ()}
    extra = [name for name in variables if name not in declared]
    if not extra:
        return
    named = ", ".join(f"${str(name)[:64]}" for name in extra[:_NAMED])
    more = f" and {len(extra) - _NAMED} more" if len(extra) > _NAMED else ""
    raise ApiError(
        f"`variables` holds {named}{more}, which the operation does not declare: "
        "send only the variables the operation declares",
        code="BAD_REQUEST",
    )


#: Items a list-typed variable may hold, checked before graphql-core coerces it item by
#: item (seconds of the event loop for a 4 MB list); the fields bound their own lists
#: further (a fleet call's ``clusters``: :func:`gateway.core.fleet.fanout.check_listed`).
MAX_LIST_VARIABLE_ITEMS = 1_000


def _bounded_lists(prepared: Prepared, variables: Mapping[str, Any]) -> None:
    """Refuse a list-typed variable of more than :data:`MAX_LIST_VARIABLE_ITEMS` items,
    before anything reads it item by item."""
    for definition in prepared.operation.variable_definitions or ():
        type_node = definition.type
        if isinstance(type_node, NonNullTypeNode):
            type_node = type_node.type
        if not isinstance(type_node, ListTypeNode):
            continue
        name = definition.variable.name.value
        value = variables.get(name)
        if isinstance(value, list) and len(value) > MAX_LIST_VARIABLE_ITEMS:
            raise ApiError(
                f"variable ${name} holds {len(value)} items; a list variable holds at most "
                f"{MAX_LIST_VARIABLE_ITEMS}",
                code="BAD_REQUEST",
            )


def _bounded_values(variables: Mapping[str, Any], most: int) -> None:
    """Refuse ``variables`` holding more than ``most`` values at any depth (a walk of at
    most ``most + 1`` steps), before graphql-core coerces them one by one."""
    if count_values(variables, most) > most:
        raise ApiError(
            f"`variables` holds more than {most} values (objects, lists and scalars at any "
            "depth); send fewer",
            code="BAD_REQUEST",
        )

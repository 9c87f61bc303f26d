"""Request limits: depth, aliases, complexity, subscriptions per connection, body size.

The document checks run once per distinct document (their result is cached with the parsed
document), after fragment cycles are refused and before validation.  Introspection fields
(``__schema``, ``__type``, ``__typename``) are counted like any other selection: the
standard introspection queries (GraphiQL's, graphql-core's, codegen's) fit the limits with
room to spare, and aliases multiplied through fragments under ``__schema`` must not escape
them.  What an introspection may produce is bounded too, by the engine
(:class:`gateway.graphql.engine.execution.Introspections`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
)

from gateway.graphql.errors import ApiError


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request, connection or subscriber may use.

    Attributes:
        max_depth: nesting of fields in one operation.
        max_aliases: aliased fields in one document.
        max_fields: field selections in one operation, fragments expanded (complexity).
        max_subscriptions: concurrent subscriptions on one WebSocket connection.
        max_body_bytes: size of a request body (or a WebSocket message).
        max_document_bytes: size of a GraphQL document (the ``query`` text), checked
            before it is parsed.
        max_tokens: lexical tokens in one document, counted while parsing (parsing stops
            at the first one over).
        max_variable_values: values in one request's ``variables``, every object, list,
            string, number, boolean and null at any depth counted (graphql-core coerces
            them one by one: ~6 us each).
        cache_bytes: document text kept parsed and validated, in total.
        max_queue: events queued for one slow subscriber before it is ended.
        heartbeat_seconds: interval of keep-alives on idle subscription streams.
        connection_init_seconds: time a WebSocket client has to send ``connection_init``.
    """

    max_depth: int = 16
    max_aliases: int = 30
    max_fields: int = 1500
    max_subscriptions: int = 100
    max_body_bytes: int = 4 * 1024 * 1024
    max_document_bytes: int = 32 * 1024
    max_tokens: int = 5_000
    max_variable_values: int = 100_000
    cache_bytes: int = 4 * 1024 * 1024
    max_queue: int = 1024
    heartbeat_seconds: float = 15.0
    connection_init_seconds: float = 10.0


def count_values(value: Any, stop: int) -> int:
    """The values in ``value`` (itself, and every item and member at any depth), counted up
    to ``stop + 1`` at most (so the walk costs at most that many steps, whatever was sent)."""
    count = 0
    todo = [value]
    while todo:
        current = todo.pop()
        count += 1
        if count > stop:
            return count
        if current.__class__ is dict:
            todo.extend(current.values())
        elif current.__class__ is list:
            todo.extend(current)
    return count


#: The fields that read the schema itself (``__typename`` reads an object's type name only).
SCHEMA_FIELDS = frozenset(("__schema", "__type"))


def check_document(document: DocumentNode, limits: Limits) -> bool:
    """Refuse a document over the depth, alias or complexity limits; whether one of its
    operations reads the schema (``__schema`` or ``__type``, anywhere).

    Raises:
        ApiError: ``QUERY_TOO_DEEP``, ``TOO_MANY_ALIASES`` or ``QUERY_TOO_COMPLEX``.
    """
    fragments = {
        d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
    }
    aliases = 0
    for definition in document.definitions:
        aliases += _aliases(definition.selection_set) if hasattr(definition, "selection_set") else 0
    if aliases > limits.max_aliases:
        raise ApiError(
            f"the document uses {aliases} aliases; at most {limits.max_aliases} are allowed",
            code="TOO_MANY_ALIASES",
        )
    reads_schema = False
    for definition in document.definitions:
        if not isinstance(definition, OperationDefinitionNode):
            continue
        counter = _Counter(fragments, limits)
        counter.walk(definition.selection_set, 0)
        reads_schema = reads_schema or counter.reads_schema
    return reads_schema


def check_fragment_cycles(document: DocumentNode) -> None:
    """Refuse fragments that spread themselves (directly or not) before anything walks
    them; validation would say the same, later and at a higher price.

    Raises:
        ApiError: ``GRAPHQL_VALIDATION_FAILED`` naming the fragment.
    """
    spreads: dict[str, set[str]] = {}
    for d in document.definitions:
        if isinstance(d, FragmentDefinitionNode):
            spreads[d.name.value] = _spreads(d.selection_set)
    done: set[str] = set()
    for start in spreads:
        stack: list[tuple[str, list[str]]] = [(start, sorted(spreads.get(start, ())))]
        on_path = {start}
        while stack:
            name, todo = stack[-1]
            if not todo:
                stack.pop()
                on_path.discard(name)
                done.add(name)
                continue
            nxt = todo.pop()
            if nxt in on_path:
                raise ApiError(
                    f'Cannot spread fragment "{nxt}" within itself.',
                    code="GRAPHQL_VALIDATION_FAILED",
                )
            if nxt in done or nxt not in spreads:
                continue
            on_path.add(nxt)
            stack.append((nxt, sorted(spreads[nxt])))


def _spreads(selection_set: SelectionSetNode | None) -> set[str]:
    found: set[str] = set()
    todo = [selection_set]
    while todo:
        current = todo.pop()
        if current is None:
            continue
        for sel in current.selections:
            if isinstance(sel, FragmentSpreadNode):
                found.add(sel.name.value)
            elif isinstance(sel, FieldNode | InlineFragmentNode):
                todo.append(sel.selection_set)
    return found


def _aliases(selection_set: SelectionSetNode | None) -> int:
    if selection_set is None:
        return 0
    count = 0
    for sel in selection_set.selections:
        if isinstance(sel, FieldNode) and sel.alias is not None:
            count += 1
        if isinstance(sel, FieldNode | InlineFragmentNode):
            count += _aliases(sel.selection_set)
    return count


class _Counter:
    def __init__(self, fragments: dict[str, FragmentDefinitionNode], limits: Limits) -> None:
        self.fragments = fragments
        self.limits = limits
        self.fields = 0
        self.reads_schema = False

    def walk(self, selection_set: SelectionSetNode | None, depth: int) -> None:
        if selection_set is None:
            return
        for sel in selection_set.selections:
            if isinstance(sel, FieldNode):
                self.fields += 1
                if sel.name.value in SCHEMA_FIELDS:
                    self.reads_schema = True
                if self.fields > self.limits.max_fields:
                    raise ApiError(
                        f"the operation selects more than {self.limits.max_fields} fields",
                        code="QUERY_TOO_COMPLEX",
                    )
                if sel.selection_set is not None:
                    if depth + 1 > self.limits.max_depth:
                        raise ApiError(
                            f"the operation nests fields deeper than {self.limits.max_depth} "
                            "levels",
                            code="QUERY_TOO_DEEP",
                        )
                    self.walk(sel.selection_set, depth + 1)
            elif isinstance(sel, InlineFragmentNode):
                self.walk(sel.selection_set, depth)
            elif isinstance(sel, FragmentSpreadNode):
                fragment = self.fragments.get(sel.name.value)
                if fragment is not None:
                    self.walk(fragment.selection_set, depth)

"""What the gateway serves right now: the curated seed resources plus what discovery found.

A :class:`Catalog` is an immutable snapshot.  The lifespan owns one :class:`CatalogHolder`;
whoever learns that the cluster's set of resources or one of their schemas changed builds a
new catalog and :meth:`~CatalogHolder.swap`\\ s it in whole.  Readers take
:attr:`CatalogHolder.current` once per operation and keep using that snapshot to the end, so
an operation in flight never sees half of a reload.

The seed resources (:data:`gateway.core.model.registry.REGISTRY`) keep their curated records and
typed front ends; a discovered resource is addressed by group, version and plural.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from gateway.core.errors import UnknownResource
from gateway.core.model.registry import REGISTRY, Registry, Resource

GroupVersionKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class GroupVersion:
    """One served group/version: its resources and the name of its OpenAPI v3 document.

    Discovery names the document (hash and URL, from the ``/openapi/v3`` index) and leaves
    reading it to :func:`gateway.core.catalog.openapi_documents.load`, when a schema needs it.
    """

    group: str
    version: str
    resources: tuple[Resource, ...]
    #: The ``/openapi/v3/...`` document carried inline (``None``: not read; discovery never
    #: reads one, :attr:`Catalog.documents` does on demand).
    openapi: Mapping[str, Any] | None = None
    #: The hash the OpenAPI v3 index gave for that document; unchanged hash, unchanged document.
    openapi_hash: str = ""
    #: The document's server-relative URL in that index (``/openapi/v3/apis/g/v?hash=H``;
    #: empty: the index names none).
    openapi_url: str = ""


class DocumentSource(Protocol):
    """Reads OpenAPI v3 documents with the gateway's own identity (a catalog holds one:
    :class:`gateway.core.catalog.openapi_documents.Documents`)."""

    async def documents(
        self, gvs: Sequence[GroupVersion]
    ) -> dict[GroupVersionKey, Mapping[str, Any]]:
        """The document of each group/version it could read (others are left out)."""
        ...


@dataclass(frozen=True, slots=True)
class Catalog:
    """One consistent view of every served resource."""

    registry: Registry
    #: Discovered group/versions by ``(group, version)`` (empty when discovery is off).
    groups: Mapping[GroupVersionKey, GroupVersion] = field(
        default_factory=lambda: MappingProxyType({})
    )
    #: Bumped on every swap, so a cache keyed by it never outlives its catalog.
    generation: int = 0
    #: The API groups a CustomResourceDefinition defines (learnt from the CRD watch; empty
    #: when the gateway may not watch CRDs): custom, whatever their name.  ``None``: not
    #: known yet (the CRDs are still being listed).
    crd_groups: frozenset[str] | None = frozenset()
    #: Reads the OpenAPI documents the catalog names by hash but does not carry
    #: (:func:`gateway.core.catalog.openapi_documents.load`); ``None``: only inline documents exist.
    documents: DocumentSource | None = field(default=None, compare=False, repr=False)
    #: Values derived from this catalog, kept by whoever derives them (the catalog never
    #: changes, so they stay true for its lifetime and go with it).
    derived: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def resource(self, group: str, version: str, plural: str) -> Resource:
        """The served resource at ``group/version/plural``.

        Raises:
            UnknownResource: nothing served there (never served, denied by ``--resources``,
                or removed from the cluster).
        """
        found = self.registry.by_resource(group, version, plural)
        if found is None:
            gv = f"{group}/{version}" if group else version
            raise UnknownResource(
                f"the gateway does not serve {plural!r} in {gv!r}"
                + self._plural_hint(group, version, plural)
            )
        return found

    def _plural_hint(self, group: str, version: str, name: str) -> str:
        """``; did you mean "leases"?`` when ``name`` is the singular name or the kind of a
        served resource (or its plural in another group/version): callers used to kubectl
        write ``lease`` or ``Lease``, and only the plural names a resource here.  Prefers
        one in the group/version asked; elsewhere, names where it is served.  Empty when
        nothing matches."""
        wanted = name.lower()
        matches = [
            r
            for r in self.registry.records
            if wanted in (r.singular, r.kind.lower())
            or (r.plural == name and (r.group, r.version) != (group, version))
        ]
        if not matches:
            return ""
        here = [r for r in matches if (r.group, r.version) == (group, version)]
        if here:
            return f'; resources are named by their plural: did you mean "{here[0].plural}"?'
        r = matches[0]
        return f'; did you mean "{r.plural}" (group "{r.group}", version "{r.version}")?'

    def is_seed(self, resource: Resource) -> bool:
        """Is this one of the curated seed resources (typed services and types)?"""
        return REGISTRY.get(resource.key) == resource


SEED_CATALOG = Catalog(REGISTRY)

Listener = Callable[[Catalog, Catalog], None]


class CatalogHolder:
    """The current catalog, swapped whole; listeners hear ``(old, new)`` after each swap."""

    def __init__(self, initial: Catalog = SEED_CATALOG) -> None:
        self._current = initial
        self._listeners: list[Listener] = []

    @property
    def current(self) -> Catalog:
        return self._current

    def swap(self, new: Catalog) -> None:
        old, self._current = self._current, new
        for listener in tuple(self._listeners):
            listener(old, new)

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(old, new)`` after every swap; returns the function that stops it."""
        self._listeners.append(listener)

        def stop() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return stop

"""The OpenAPI v3 documents of a catalog's group/versions, read when a schema needs them.

A :class:`~gateway.core.catalog.Catalog` names each discovered group/version's document by
its hash; the document itself is read only when a front end builds the schema of a scope
that contains it (a GraphQL schema of the built-in API or of one API group), so what the
gateway holds grows with the scopes callers use, not with the number of CRDs a cluster has.

:func:`load` is the one entry point: it returns the documents of the asked group/versions
(a document carried inline by the catalog as it is, else the one the catalog's
:attr:`~gateway.core.catalog.Catalog.documents` source reads, cached by hash).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from gateway.core.catalog import Catalog, GroupVersion, GroupVersionKey


class DocumentSource(Protocol):
    """Reads OpenAPI v3 documents with the gateway's own identity."""

    async def documents(
        self, gvs: Sequence[GroupVersion]
    ) -> dict[GroupVersionKey, Mapping[str, Any]]:
        """The document of each group/version it could read (others are left out)."""
        ...


async def load(
    catalog: Catalog, keys: Iterable[GroupVersionKey]
) -> dict[GroupVersionKey, Mapping[str, Any]]:
    """The OpenAPI v3 document of each of ``keys`` that the catalog describes.

    A group/version without a document (the upstream serves none, or it could not be read)
    is left out; its kinds are then not typed in GraphQL (the generic gRPC service still
    serves them).
    """
    out: dict[GroupVersionKey, Mapping[str, Any]] = {}
    missing: list[GroupVersion] = []
    for key in keys:
        gv = catalog.groups.get(key)
        if gv is None:
            continue
        if gv.openapi is not None:
            out[key] = gv.openapi
        elif catalog.documents is not None and gv.openapi_hash:
            missing.append(gv)
    if missing and catalog.documents is not None:
        out.update(await catalog.documents.documents(missing))
    return out

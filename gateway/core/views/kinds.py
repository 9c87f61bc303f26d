"""The field model of a kind a view is asked of, for a front end that has no schema of its own.

GraphQL builds its types from the model (the seed schema extended with the cluster's
OpenAPI documents) and hands a view the kind's :class:`~gateway.core.model.schema.ObjectType`;
the gRPC ``ResourceService`` names a resource by group, version and plural and has no such
types.  :func:`kind_model` gives it the same ones: a seed kind's from the curated schema, a
discovered kind's from its group/version's OpenAPI document
(:func:`gateway.core.model.openapi.extend`, the builder GraphQL uses, so a path is accepted or
refused with the same message by both front ends).  Built once per catalog and
group/version (kept in :attr:`~gateway.core.catalog.catalog.Catalog.derived`, so a reload
builds anew), in a worker thread.
"""

from __future__ import annotations

import asyncio
from typing import Final

from gateway.core import errors
from gateway.core.catalog.catalog import Catalog
from gateway.core.catalog.openapi_documents import load
from gateway.core.model import openapi
from gateway.core.model.registry import REGISTRY, Resource
from gateway.core.model.schema import Model, ObjectType, SchemaError, seed_model
from gateway.core.views.spec import TypeLookup

_DERIVED: Final = "views-models"


def _undescribed(r: Resource) -> errors.InvalidView:
    return errors.InvalidView(
        f"{r.plural}{'.' + r.group if r.group else ''} has no schema the gateway could read "
        "(the cluster's OpenAPI does not describe it): views need one to type field paths"
    )


async def kind_model(catalog: Catalog, r: Resource) -> tuple[ObjectType, TypeLookup]:
    """The object type of ``r``'s kind and a lookup of the types it reaches.

    Raises:
        InvalidView: the cluster's OpenAPI does not describe the kind.
    """
    seed = seed_model()
    if r.key in REGISTRY or (r.group, r.version, r.kind) in seed.by_gvk:
        try:
            return seed.kind_type(r.group, r.version, r.kind), seed.object_type
        except SchemaError:
            raise _undescribed(r) from None
    # per group/version: the model once built, or the build callers wait for (a future
    # of the loop that started it; the model itself is kept once built)
    models: dict[tuple[str, str], Model | asyncio.Future[Model]] = catalog.derived.setdefault(
        _DERIVED, {}
    )
    key = (r.group, r.version)
    found = models.get(key)
    if isinstance(found, Model):
        model = found
    elif found is not None:
        model = await asyncio.shield(found)
    else:
        building: asyncio.Future[Model] = asyncio.get_running_loop().create_future()
        models[key] = building
        try:
            documents = await load(catalog, [key])
            resources = [
                x
                for x in catalog.registry.values()
                if (x.group, x.version) == key and "get" in x.verbs
            ]
            model = await asyncio.to_thread(
                openapi.extend, seed, list(documents.values()), resources
            )
        except BaseException as exc:
            models.pop(key, None)
            building.set_exception(exc)
            building.exception()  # retrieved: nobody else may be waiting
            raise
        models[key] = model
        building.set_result(model)
    try:
        return model.kind_type(r.group, r.version, r.kind), model.object_type
    except SchemaError:
        raise _undescribed(r) from None

"""The demo upstream's schema: the product's definitions plus the demo's own file.

The demo serves more kinds than the gateway (:mod:`kube_gateway_demo.catalog`), so it describes
them with a :class:`gateway.core.model.schema.Model` over both files, read once.  The
functions here are the ones of :mod:`gateway.core.model.schema` the demo uses, over that set.
"""

from __future__ import annotations

import functools

from gateway.core.model.schema import Model, ObjectType, model_of_files
from kube_gateway_demo.catalog import DEMO_SCHEMA_FILE, SCHEMA_DIR


@functools.cache
def definitions() -> Model:
    """The demo's schema model (the product's files and ``kubernetes-demo.json``)."""
    return model_of_files((SCHEMA_DIR / DEMO_SCHEMA_FILE,))


def object_type(name: str) -> ObjectType:
    """An object type by definition id or short name."""
    return definitions().object_type(name)


def kind_type(group: str, version: str, kind: str) -> ObjectType:
    """The definition served as ``group/version, Kind``."""
    return definitions().kind_type(group, version, kind)


def strategic_merge_keys(type_name: str) -> dict[str, str]:
    """The strategic-merge-patch keys of a type's list fields."""
    return definitions().strategic_merge_keys(type_name)

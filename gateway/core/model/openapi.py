"""The schema of discovered kinds, from the cluster's OpenAPI v3 documents.

The curated seed schema (:func:`gateway.core.model.schema.seed_model`) is OpenAPI v2 ``definitions``
extracted at build time.  A cluster publishes one OpenAPI v3 document per group/version
(``/openapi/v3/apis/apps/v1``); :func:`definitions` normalises one to the same form and
:func:`extend` adds the kinds of the discovered resources to the seed model, so GraphQL builds
their types with the same generator as the seed kinds.

Normalisation, in words:

* ``#/components/schemas/X`` references become ``#/definitions/X``; an ``allOf`` holding one
  reference (how the apiserver attaches a ``default`` or a description) becomes the reference.
* An inline object schema (every custom resource's ``openAPIV3Schema`` is one tree) is
  hoisted into a definition of its own named after its path: ``Widget.spec.size`` becomes
  ``<package>.WidgetSpecSize``, array items get ``Item`` and map values ``Value``.
* What the field model cannot say (``anyOf``, ``oneOf``, unknown types, cycles of aliases) is a
  ``JSON`` scalar; the object's ``raw`` field always carries the upstream object as sent.

Unlike the build-time extraction, nothing here refuses a schema: a cluster's document is
input, and an odd corner of one CRD must not keep every other kind from being served.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from gateway.core.model.registry import Resource
from gateway.core.model.schema import (
    WRAPPERS,
    Field,
    GroupVersionKind,
    MapType,
    Model,
    ObjectType,
    Scalar,
    SchemaError,
    TypeRef,
    _literal,
    _package,
    _post_order,
    _ref_names,
    _Resolver,
)

_V3_PREFIX: Final = "#/components/schemas/"
_V2_PREFIX: Final = "#/definitions/"
#: Schema keys that carry meaning for the field model: the build-time extraction of the
#: committed definitions files (``scripts/kube_definitions.py``) keeps these and no other.
KEPT_KEYS: Final = frozenset(
    {
        "$ref",
        "additionalProperties",
        "description",
        "enum",
        "format",
        "items",
        "properties",
        "required",
        "type",
        "x-kubernetes-group-version-kind",
        "x-kubernetes-int-or-string",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-list-type",
        "x-kubernetes-map-type",
        "x-kubernetes-patch-merge-key",
        "x-kubernetes-patch-strategy",
        "x-kubernetes-preserve-unknown-fields",
    }
)
#: Those besides the structural ones walked here (``properties``, ``items``,
#: ``additionalProperties``).  The rest (defaults, validations, examples, nullable, ...) are
#: dropped.
_KEPT: Final = KEPT_KEYS - {"properties", "items", "additionalProperties"}
_IDENTIFIER: Final = re.compile(r"[^0-9A-Za-z]+")


def _pascal(text: str) -> str:
    parts = [p for p in _IDENTIFIER.split(text) if p]
    return "".join(p[:1].upper() + p[1:] for p in parts)


class _Hoister:
    def __init__(self, schemas: Mapping[str, Any]) -> None:
        self.schemas = schemas
        self.out: dict[str, dict[str, Any]] = {}

    def _new_id(self, package: str, name: str) -> str:
        candidate, n = f"{package}.{name}", 2
        while candidate in self.out or candidate in self.schemas:
            candidate, n = f"{package}.{name}{n}", n + 1
        return candidate

    def top(self, def_id: str, node: Any) -> None:
        package, _, short = def_id.rpartition(".")
        self.out[def_id] = self._object(node, package, _pascal(short) or "Object")

    def _object(self, node: Mapping[str, Any], package: str, name: str) -> dict[str, Any]:
        out = {k: v for k, v in node.items() if k in _KEPT}
        props = node.get("properties")
        if isinstance(props, dict):
            out["properties"] = {
                key: self._value(value, package, name + _pascal(key))
                for key, value in props.items()
                if isinstance(key, str) and isinstance(value, dict)
            }
            required = node.get("required")
            if isinstance(required, list):
                out["required"] = [r for r in required if r in out["properties"]]
        self._nested(node, out, package, name)
        return out

    def _nested(
        self, node: Mapping[str, Any], out: dict[str, Any], package: str, name: str
    ) -> None:
        items = node.get("items")
        if isinstance(items, dict):
            out["items"] = self._value(items, package, name + "Item")
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            out["additionalProperties"] = self._value(extra, package, name + "Value")

    def _value(self, node: Mapping[str, Any], package: str, name: str) -> dict[str, Any]:
        ref = node.get("$ref")
        all_of = node.get("allOf")
        if ref is None and isinstance(all_of, list) and len(all_of) == 1:
            ref = all_of[0].get("$ref") if isinstance(all_of[0], dict) else None
        if isinstance(ref, str):
            target = ref[len(_V3_PREFIX) :] if ref.startswith(_V3_PREFIX) else ref
            described = {"description": node["description"]} if "description" in node else {}
            return {"$ref": _V2_PREFIX + target, **described}
        if isinstance(node.get("properties"), dict) and not node.get("x-kubernetes-int-or-string"):
            hoisted = self._new_id(package, name)
            self.out[hoisted] = {}  # reserve the name before descending
            self.out[hoisted] = self._object(node, package, name)
            described = {"description": node["description"]} if "description" in node else {}
            return {"$ref": _V2_PREFIX + hoisted, **described}
        out = {k: v for k, v in node.items() if k in _KEPT and k != "required"}
        self._nested(node, out, package, name)
        return out


def definitions(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``components.schemas`` of one OpenAPI v3 document as v2-style definitions."""
    components = document.get("components")
    schemas = components.get("schemas") if isinstance(components, dict) else None
    if not isinstance(schemas, dict):
        return {}
    hoister = _Hoister(schemas)
    for def_id, node in schemas.items():
        if isinstance(def_id, str) and isinstance(node, dict):
            hoister.top(def_id, node)
    return hoister.out


class _Lenient(_Resolver):
    """The seed resolver, but a field it cannot describe is ``JSON`` rather than an error,
    and an object without a field GraphQL can name is ``JSON`` too (an empty type is not a
    valid GraphQL type)."""

    def is_object(self, def_id: str) -> bool:
        props = self._defs[def_id].get("properties")
        return (
            def_id not in WRAPPERS
            and isinstance(props, dict)
            and any(_named(name) for name in props)
        )

    def resolve(self, node: Mapping[str, Any], where: str, depth: int = 0) -> TypeRef:
        try:
            return super().resolve(node, where, depth)
        except SchemaError:
            return Scalar("json")

    def fields(self, def_id: str) -> tuple[Field, ...]:
        schema = self._defs[def_id]
        props: Mapping[str, Mapping[str, Any]] = schema.get("properties", {})
        required = frozenset(schema.get("required", ())) & props.keys()
        return tuple(
            Field(
                json_name=name,
                type=self.resolve(prop, f"{def_id}.{name}"),
                description=str(prop.get("description", "")),
                required=name in required,
                patch_merge_key=_text(prop.get("x-kubernetes-patch-merge-key")),
                patch_strategy=_text(prop.get("x-kubernetes-patch-strategy")),
                list_type=_optional_literal("list", prop.get("x-kubernetes-list-type")),
                list_map_keys=tuple(
                    k for k in prop.get("x-kubernetes-list-map-keys", ()) if isinstance(k, str)
                ),
                map_type=_optional_literal("map", prop.get("x-kubernetes-map-type")),
                enum=tuple(e for e in prop.get("enum", ()) if isinstance(e, str)),
            )
            for name, prop in sorted(props.items())
            if _named(name)
        )


def _named(name: str) -> bool:
    """Can GraphQL (and Python) name this field?  Others travel in ``raw`` only."""
    return _IDENTIFIER.sub("", name) == name and name[:1].isalpha()


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _optional_literal(which: str, value: Any) -> Any:
    allowed = ("atomic", "set", "map") if which == "list" else ("atomic", "granular")
    return value if value in allowed else None


def _gvks(schema: Mapping[str, Any]) -> tuple[GroupVersionKind, ...]:
    found = []
    for g in schema.get("x-kubernetes-group-version-kind", ()):
        if isinstance(g, dict) and all(isinstance(g.get(k), str) for k in ("version", "kind")):
            found.append(GroupVersionKind(str(g.get("group", "")), g["version"], g["kind"]))
    return tuple(found)


#: Names a front end derives from a type's name (``PodInput``, ``PodWatchEvent``...): a new
#: type may neither take one of them nor be one whose derived names are taken.
DERIVED_SUFFIXES: Final = ("Input", "List", "WatchEvent", "DeleteResult", "DeleteCollectionResult")


def _free(candidate: str, taken: set[str]) -> bool:
    return (
        candidate not in taken
        and not candidate.endswith(DERIVED_SUFFIXES[:1] + DERIVED_SUFFIXES[2:])
        and all(candidate + suffix not in taken for suffix in DERIVED_SUFFIXES if suffix != "List")
    )


def _short_name(def_id: str, taken: set[str]) -> str:
    bare = _pascal(def_id.rsplit(".", 1)[-1]) or "Object"
    if not bare[:1].isalpha():
        bare = "T" + bare
    for candidate in (bare, _pascal(_package(def_id)) + bare):
        if _free(candidate, taken):
            return candidate
    n = 2
    while not _free(f"{bare}{n}", taken):
        n += 1
    return f"{bare}{n}"


def _take(name: str, taken: set[str]) -> None:
    taken.add(name)
    taken.update(name + suffix for suffix in DERIVED_SUFFIXES if suffix != "List")


def extend(
    seed: Model,
    documents: Iterable[Mapping[str, Any]],
    resources: Iterable[Resource],
    *,
    reserved: Iterable[str] = (),
) -> Model:
    """The seed model plus the kinds of ``resources``, described by ``documents``.

    Args:
        seed: the curated model; its types and names are kept as they are (a discovered
            definition with a seed type's id is the seed type).
        documents: the OpenAPI v3 documents of the discovered group/versions.
        resources: the discovered resources whose kind (and list kind) to add; only the
            types reachable from them are built.
        reserved: names the new types must not take (a front end's own types: ``Query``,
            ``Mutation``, ``LogLine``...).
    """
    defs: dict[str, dict[str, Any]] = {}
    for doc in documents:
        for def_id, node in definitions(doc).items():
            defs.setdefault(def_id, node)
    for def_id, t in seed.types.items():  # seed ids resolve to the seed types
        defs[def_id] = {"properties": {f.json_name: {} for f in t.fields} or {"_": {}}}
    for wrapper in WRAPPERS:
        defs.setdefault(wrapper, {"type": "string"})
    resolver = _Lenient(defs)

    by_gvk = {
        (g.group, g.version, g.kind): def_id
        for def_id, node in defs.items()
        if def_id not in seed.types
        for g in _gvks(node)
    }
    roots = []
    for r in resources:
        for kind in (r.kind, r.list_kind):
            found = by_gvk.get((r.group, r.version, kind))
            if found is not None and resolver.is_object(found):
                roots.append(found)

    # Build the new types reachable from the roots (seed types are already built).
    shells: dict[str, ObjectType] = dict(seed.types)
    pending = [root for root in roots if root not in shells]
    new_ids: list[str] = []
    while pending:
        def_id = pending.pop()
        if def_id in shells or def_id in new_ids:
            continue
        new_ids.append(def_id)
        for f in resolver.fields(def_id):
            for ref in _ref_names(f.type):
                if ref not in shells and ref not in new_ids:
                    pending.append(ref)

    taken = set(reserved)
    for name in seed.by_short:
        _take(name, taken)
    # Names are a function of the set of types alone (never of what an earlier build or
    # another process saw first): in the order of :func:`_priority`, each type takes its
    # bare name if free, else its package-prefixed one.
    names: dict[str, str] = {}
    for def_id in sorted(new_ids, key=_priority):
        names[def_id] = _short_name(def_id, taken)
        _take(names[def_id], taken)

    types = dict(seed.types)
    for def_id in new_ids:
        node = defs[def_id]
        types[def_id] = ObjectType(
            name=def_id,
            short_name=names[def_id],
            description=str(node.get("description", "")),
            fields=resolver.fields(def_id),
            gvks=_gvks(node),
            map_type=_map_type(node.get("x-kubernetes-map-type"), def_id),
        )
    model = Model(types)
    for root in roots:  # fail here, not in a front end, if a root cannot be walked
        _post_order(model.types, root)
    return model


def _map_type(value: Any, where: str) -> MapType | None:
    try:
        return _literal(MapType, value, where)  # type: ignore[no-any-return]
    except SchemaError:
        return None


def _priority(def_id: str) -> tuple[int, str]:
    # Kubernetes' own API types claim bare names before custom resources do.
    return (0 if def_id.startswith("io.k8s.") else 1, def_id)

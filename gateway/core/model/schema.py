"""The field-level schema of the served kinds: one source for GraphQL, gRPC and the SDL.

The model is read once (cached) from the definitions files in ``gateway/core/model/schemas/``:

* ``kubernetes-v1.36.json``: generated from the Kubernetes OpenAPI by
  ``scripts/extract_schemas.py`` (see ``scripts/kube_definitions.py``); never edited by hand.
* ``image.openshift.io-v1.json``: OpenShift's ``Image``, hand-written in the same OpenAPI v2
  ``definitions`` form from the OpenShift API reference ("Image [image.openshift.io/v1]")
  and the Go types of github.com/openshift/api (``image/v1``).

Every definition with ``properties`` becomes an :class:`ObjectType`.  The apimachinery wrapper
definitions (``Quantity``, ``IntOrString``, ``Time``, ``MicroTime``, ``RawExtension``,
``FieldsV1``, ``Duration``) are not object types: a reference to one resolves to a
:class:`Scalar`.  Field types are a small closed union (:data:`TypeRef`); a reference to an
object type is a :class:`Ref` by definition id, so recursive schemas cannot make the model loop.

Typical use by a generator::

    for kind, obj in schema.kinds().items():
        for t in schema.reachable(obj.name):       # dependencies first
            for f in t.fields:
                ...f.json_name, f.type, f.required...

Names: :attr:`ObjectType.name` is the definition id (``io.k8s.api.core.v1.PodSpec``);
:attr:`ObjectType.short_name` (``PodSpec``) is unique across the whole set and is what the
generated GraphQL types and proto messages are called.  Field names keep the Kubernetes JSON
spelling (all are plain ``[A-Za-z][A-Za-z0-9]*`` identifiers in this set; a few are keywords
in Python, e.g. ``continue``, and need an alias there).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias, get_args

from gateway.core.model.registry import REGISTRY, Registry

__all__ = [
    "WRAPPERS",
    "Field",
    "GroupVersionKind",
    "ListOf",
    "MapOf",
    "Model",
    "ObjectType",
    "Ref",
    "Scalar",
    "ScalarKind",
    "SchemaError",
    "TypeRef",
    "all_types",
    "kind_type",
    "kinds",
    "list_type",
    "model_of_files",
    "object_type",
    "reachable",
    "seed_model",
    "strategic_merge_keys",
]

SCHEMA_DIR: Final = Path(__file__).resolve().parent / "schemas"
#: The definitions files, in load order.  A definition id may appear in only one of them.
SCHEMA_FILES: Final = ("kubernetes-v1.36.json", "image.openshift.io-v1.json")

ScalarKind: TypeAlias = Literal[
    "string",
    "int32",
    "int64",
    "double",
    "boolean",
    "bytes",
    "quantity",
    "int-or-string",
    "time",
    "microtime",
    "json",
]
"""What a scalar is on the wire.

``bytes`` is a base64 string in JSON (OpenAPI ``format: byte``).  ``quantity`` is a string
(``"500m"``, ``"1Gi"``).  ``int-or-string`` is a JSON number or string (``8080``, ``"http"``).
``time`` is RFC 3339 with second precision, ``microtime`` with microseconds.  ``json`` is any
JSON value (``RawExtension``, ``FieldsV1``, preserve-unknown-fields, free-form objects).
"""

ListType: TypeAlias = Literal["atomic", "set", "map"]
MapType: TypeAlias = Literal["atomic", "granular"]

#: The apimachinery wrapper definitions and the scalar each one stands for.
WRAPPERS: Final[Mapping[str, ScalarKind]] = MappingProxyType(
    {
        "io.k8s.apimachinery.pkg.api.resource.Quantity": "quantity",
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "int-or-string",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Time": "time",
        "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": "microtime",
        "io.k8s.apimachinery.pkg.apis.meta.v1.Duration": "string",
        "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": "json",
        "io.k8s.apimachinery.pkg.runtime.RawExtension": "json",
    }
)

_REF_PREFIX: Final = "#/definitions/"


class SchemaError(Exception):
    """A definitions file is inconsistent, or a name is not in the schema."""


@dataclass(frozen=True, slots=True)
class Scalar:
    """A leaf value; see :data:`ScalarKind`."""

    kind: ScalarKind


@dataclass(frozen=True, slots=True)
class ListOf:
    """A JSON array of ``item``."""

    item: TypeRef


@dataclass(frozen=True, slots=True)
class MapOf:
    """A JSON object with string keys and ``value`` values (OpenAPI ``additionalProperties``)."""

    value: TypeRef


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to an :class:`ObjectType` by definition id (see :func:`object_type`)."""

    type_name: str


TypeRef: TypeAlias = Scalar | ListOf | MapOf | Ref


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    """An API group, version and kind (``x-kubernetes-group-version-kind``)."""

    group: str
    version: str
    kind: str

    @property
    def api_version(self) -> str:
        """``v1`` for the core group, ``group/version`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(frozen=True, slots=True)
class Field:
    """One property of an object type.

    Attributes:
        json_name: the Kubernetes JSON name (``livenessProbe``); also the proto field name.
        type: what the value is.
        description: the upstream documentation ('' when there is none).
        required: listed in the definition's ``required``.
        patch_merge_key: ``x-kubernetes-patch-merge-key`` (strategic merge patch of a list).
        patch_strategy: ``x-kubernetes-patch-strategy`` (``merge``, ``retainKeys``, ...).
        list_type: ``x-kubernetes-list-type`` (server-side apply semantics of a list).
        list_map_keys: ``x-kubernetes-list-map-keys`` for ``list_type == "map"``.
        map_type: ``x-kubernetes-map-type`` of a map field.
        enum: the allowed values, when the schema lists them (``apiVersion`` and ``kind``).
    """

    json_name: str
    type: TypeRef
    description: str = ""
    required: bool = False
    patch_merge_key: str | None = None
    patch_strategy: str | None = None
    list_type: ListType | None = None
    list_map_keys: tuple[str, ...] = ()
    map_type: MapType | None = None
    enum: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ObjectType:
    """A definition with properties, e.g. ``io.k8s.api.core.v1.PodSpec``.

    Attributes:
        name: the definition id.
        short_name: a name unique across the schema (``PodSpec``); see :func:`all_types`.
        description: the upstream documentation.
        fields: the properties, sorted by JSON name.
        gvks: the kinds this definition is served as (empty for nested types).
        map_type: ``x-kubernetes-map-type`` of the struct (``atomic`` for selectors).
    """

    name: str
    short_name: str
    description: str
    fields: tuple[Field, ...]
    gvks: tuple[GroupVersionKind, ...] = ()
    map_type: MapType | None = None

    def field(self, json_name: str) -> Field:
        """The field with this JSON name.

        Raises:
            KeyError: the type has no such field.
        """
        for f in self.fields:
            if f.json_name == json_name:
                return f
        raise KeyError(f"{self.short_name} has no field {json_name!r}")

    def refs(self) -> Iterator[str]:
        """The definition ids this type's fields refer to, in field order (may repeat)."""
        for f in self.fields:
            yield from _ref_names(f.type)


def _ref_names(t: TypeRef) -> Iterator[str]:
    while isinstance(t, ListOf | MapOf):
        t = t.item if isinstance(t, ListOf) else t.value
    if isinstance(t, Ref):
        yield t.type_name


# -- loading ---------------------------------------------------------------------------------


class Model:
    """A set of object types by definition id, with lookups by short name and kind.

    The gateway's curated schema is :func:`seed_model` (read from ``schemas/``); a model of
    the cluster's discovered kinds extends it (:func:`extend`), keeping every seed type and
    its name.
    """

    def __init__(self, types: Mapping[str, ObjectType]) -> None:
        self.types: Mapping[str, ObjectType] = MappingProxyType(dict(sorted(types.items())))
        self.by_short: Mapping[str, ObjectType] = MappingProxyType(
            {t.short_name: t for t in self.types.values()}
        )
        by_gvk: dict[tuple[str, str, str], ObjectType] = {}
        for t in self.types.values():
            for gvk in t.gvks:
                by_gvk.setdefault((gvk.group, gvk.version, gvk.kind), t)
        self.by_gvk: Mapping[tuple[str, str, str], ObjectType] = MappingProxyType(by_gvk)
        self._reachable: dict[str, tuple[ObjectType, ...]] = {}

    def all_types(self) -> tuple[ObjectType, ...]:
        """Every object type, sorted by definition id."""
        return tuple(self.types.values())

    def object_type(self, name: str) -> ObjectType:
        """Look up an object type by definition id or short name (see :func:`object_type`)."""
        found = self.types.get(name) if "." in name else self.by_short.get(name)
        if found is None:
            raise SchemaError(f"no object type {name!r} in the schema")
        return found

    def kind_type(self, group: str, version: str, kind: str) -> ObjectType:
        """The definition served as ``group/version, Kind`` (see :func:`kind_type`)."""
        found = self.by_gvk.get((group, version, kind))
        if found is None:
            api_version = f"{group}/{version}" if group else version
            raise SchemaError(f"no definition for {api_version} {kind}")
        return found

    def kinds(self, registry: Registry = REGISTRY) -> Mapping[str, ObjectType]:
        """The object type of every resource of ``registry``, by kind (see :func:`kinds`)."""
        found: dict[str, ObjectType] = {}
        for r in registry.values():
            if r.kind in found:
                raise SchemaError(f"two served resources are called {r.kind}")
            found[r.kind] = self.kind_type(r.group, r.version, r.kind)
        return MappingProxyType(found)

    def list_type(self, kind: str, registry: Registry = REGISTRY) -> ObjectType:
        """The list kind of a served kind (see :func:`list_type`)."""
        r = next((r for r in registry.values() if r.kind == kind), None)
        if r is None:
            raise SchemaError(f"{kind} is not a served kind")
        return self.kind_type(r.group, r.version, r.list_kind)

    def strategic_merge_keys(self, type_name: str) -> dict[str, str]:
        """The strategic-merge-patch keys of a type's list fields (see
        :func:`strategic_merge_keys`)."""
        return {
            f.json_name: f.patch_merge_key
            for f in self.object_type(type_name).fields
            if f.patch_merge_key is not None
        }

    def reachable(self, root: str) -> tuple[ObjectType, ...]:
        """The object types reachable from ``root`` (see :func:`reachable`)."""
        name = self.object_type(root).name
        found = self._reachable.get(name)
        if found is None:
            found = self._reachable[name] = _post_order(self.types, name)
        return found


def _read(schema_dir: Path, files: Sequence[str]) -> dict[str, dict[str, Any]]:
    defs: dict[str, dict[str, Any]] = {}
    for name in files:
        doc = json.loads((schema_dir / name).read_text("utf-8"))
        for def_id, schema in doc["definitions"].items():
            if def_id in defs:
                raise SchemaError(f"{def_id} is defined twice ({name})")
            defs[def_id] = schema
    return defs


class _Resolver:
    def __init__(self, defs: Mapping[str, Mapping[str, Any]]) -> None:
        self._defs = defs

    def is_object(self, def_id: str) -> bool:
        return def_id not in WRAPPERS and "properties" in self._defs[def_id]

    def resolve(self, node: Mapping[str, Any], where: str, depth: int = 0) -> TypeRef:
        ref = node.get("$ref")
        if ref is not None:
            if not ref.startswith(_REF_PREFIX):
                raise SchemaError(f"{where}: unsupported $ref {ref!r}")
            target = ref[len(_REF_PREFIX) :]
            if target not in self._defs:
                raise SchemaError(f"{where}: dangling $ref to {target}")
            if target in WRAPPERS:
                return Scalar(WRAPPERS[target])
            if self.is_object(target):
                return Ref(target)
            if depth > 8:  # a chain of property-less aliases that never ends
                raise SchemaError(f"{where}: $ref cycle through {target}")
            return self.resolve(self._defs[target], where, depth + 1)
        if node.get("x-kubernetes-int-or-string"):
            return Scalar("int-or-string")
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return Scalar("json")
        kind = node.get("type")
        fmt = node.get("format")
        if kind == "string":
            if fmt == "byte":
                return Scalar("bytes")
            if fmt == "date-time":
                return Scalar("time")
            if fmt == "int-or-string":
                return Scalar("int-or-string")
            return Scalar("string")
        if kind == "integer":
            return Scalar("int32" if fmt == "int32" else "int64")
        if kind == "number":
            return Scalar("double")
        if kind == "boolean":
            return Scalar("boolean")
        if kind == "array":
            items = node.get("items")
            return ListOf(self.resolve(items, f"{where}[]") if items else Scalar("json"))
        if kind in ("object", None):
            if "properties" in node:
                raise SchemaError(f"{where}: inline object schemas are not supported")
            extra = node.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                return MapOf(self.resolve(extra, f"{where}{{}}"))
            return Scalar("json")
        raise SchemaError(f"{where}: unsupported type {kind!r}")

    def object_fields(self, def_id: str) -> tuple[Field, ...]:
        schema = self._defs[def_id]
        required = frozenset(schema.get("required", ()))
        props: Mapping[str, Mapping[str, Any]] = schema["properties"]
        missing = required - props.keys()
        if missing:
            raise SchemaError(f"{def_id}: required but not defined: {sorted(missing)}")
        return tuple(
            Field(
                json_name=name,
                type=self.resolve(prop, f"{def_id}.{name}"),
                description=prop.get("description", ""),
                required=name in required,
                patch_merge_key=prop.get("x-kubernetes-patch-merge-key"),
                patch_strategy=prop.get("x-kubernetes-patch-strategy"),
                list_type=_literal(ListType, prop.get("x-kubernetes-list-type"), def_id),
                list_map_keys=tuple(prop.get("x-kubernetes-list-map-keys", ())),
                map_type=_literal(MapType, prop.get("x-kubernetes-map-type"), def_id),
                enum=tuple(prop.get("enum", ())),
            )
            for name, prop in sorted(props.items())
        )


def _literal(allowed: Any, value: Any, where: str) -> Any:
    if value is not None and value not in get_args(allowed):
        raise SchemaError(f"{where}: unexpected value {value!r}")
    return value


def _package(def_id: str) -> str:
    # io.k8s.api.core.v1.Pod -> CoreV1; io.k8s.apimachinery.pkg.apis.meta.v1.Status -> MetaV1;
    # com.github.openshift.api.image.v1.Image -> ImageV1
    parts = def_id.split(".")
    return "".join(p[:1].upper() + p[1:] for p in parts[-3:-1])


def _priority(def_id: str) -> tuple[int, str]:
    # Who keeps the bare name when short names collide: meta, then core, then the rest.  A
    # type added later never renames one that is already published.
    if def_id.startswith("io.k8s.apimachinery."):
        return (0, def_id)
    if def_id.startswith("io.k8s.api.core."):
        return (1, def_id)
    return (2, def_id)


def _short_names(ids: list[str]) -> dict[str, str]:
    groups: dict[str, list[str]] = {}
    for def_id in ids:
        groups.setdefault(def_id.rsplit(".", 1)[-1], []).append(def_id)
    names: dict[str, str] = {}
    for short, members in groups.items():
        first, *rest = sorted(members, key=_priority)
        names[first] = short
        for def_id in rest:
            names[def_id] = _package(def_id) + short
    if len(set(names.values())) != len(names):
        raise SchemaError("short names are not unique after prefixing")
    return names


def _build(schema_dir: Path = SCHEMA_DIR, files: Sequence[str] = SCHEMA_FILES) -> Model:
    defs = _read(schema_dir, files)
    resolver = _Resolver(defs)
    ids = sorted(d for d in defs if resolver.is_object(d))
    short = _short_names(ids)
    types: dict[str, ObjectType] = {}
    for def_id in ids:
        schema = defs[def_id]
        gvks = tuple(
            GroupVersionKind(g["group"], g["version"], g["kind"])
            for g in schema.get("x-kubernetes-group-version-kind", ())
        )
        obj = ObjectType(
            name=def_id,
            short_name=short[def_id],
            description=schema.get("description", ""),
            fields=resolver.object_fields(def_id),
            gvks=gvks,
            map_type=_literal(MapType, schema.get("x-kubernetes-map-type"), def_id),
        )
        types[def_id] = obj
    return Model(types)


@functools.cache
def seed_model() -> Model:
    """The curated schema of the seed resources, read once from ``schemas/``."""
    return _build()


def _model() -> Model:
    return seed_model()


# -- public API ------------------------------------------------------------------------------


def all_types() -> tuple[ObjectType, ...]:
    """Every object type in the schema, sorted by definition id."""
    return _model().all_types()


def object_type(name: str) -> ObjectType:
    """Look up an object type by definition id or short name.

    Args:
        name: ``io.k8s.api.core.v1.PodSpec`` or ``PodSpec`` (ids contain dots, short names
            do not, so the two never clash).

    Raises:
        SchemaError: no such object type (wrapper definitions such as ``Time`` are scalars,
            not object types).
    """
    return _model().object_type(name)


def kind_type(group: str, version: str, kind: str) -> ObjectType:
    """The definition served as ``group/version, Kind`` (the core group is ``""``).

    Raises:
        SchemaError: no definition carries that group-version-kind.
    """
    return _model().kind_type(group, version, kind)


def kinds(registry: Registry = REGISTRY) -> Mapping[str, ObjectType]:
    """The object type of every served resource, by kind name (``Pod``, ``Lease``, ...).

    Args:
        registry: the resources to describe; the gateway's registry by default.

    Raises:
        SchemaError: a resource has no schema, or two served kinds share a name.
    """
    return _model().kinds(registry)


def list_type(kind: str, registry: Registry = REGISTRY) -> ObjectType:
    """The list kind of a served kind: ``list_type("Pod")`` is ``PodList``.

    Raises:
        SchemaError: the kind is not served, or has no list definition.
    """
    return _model().list_type(kind, registry)


def reachable(root: str) -> tuple[ObjectType, ...]:
    """The object types reachable from ``root`` (itself included), dependencies first.

    The order is a depth-first post-order over fields in JSON-name order, so it is
    deterministic and, for an acyclic schema, topological: every type comes after the types
    its fields refer to.  A cycle is cut where it closes (a :class:`Ref` is a name, not a
    pointer), so a recursive schema yields each type once and never loops.

    Args:
        root: a definition id or short name.
    """
    return _model().reachable(root)


def _post_order(types: Mapping[str, ObjectType], root: str) -> tuple[ObjectType, ...]:
    order: list[ObjectType] = []
    seen = {root}
    # Iterative, so a deep schema cannot hit the recursion limit: (type, its pending refs).
    stack: list[tuple[ObjectType, Iterator[str]]] = [(types[root], types[root].refs())]
    while stack:
        current, pending = stack[-1]
        for ref in pending:
            if ref not in seen:
                seen.add(ref)
                stack.append((types[ref], types[ref].refs()))
                break
        else:
            stack.pop()
            order.append(current)
    return tuple(order)


def strategic_merge_keys(type_name: str) -> dict[str, str]:
    """The strategic-merge-patch keys of a type's list fields.

    Args:
        type_name: a definition id or short name.

    Returns:
        ``{field json name: merge key}`` for every field with ``x-kubernetes-patch-merge-key``,
        e.g. ``{"containers": "name", "volumes": "name", ...}`` for ``PodSpec``.
    """
    return _model().strategic_merge_keys(type_name)


def model_of_files(extra_files: Sequence[Path]) -> Model:
    """A model over the product's definitions files plus others (absolute paths), e.g. the
    demo upstream's wider set of kinds.  A definition id may appear only once across all of
    them; short names are computed over the whole set, so they can differ from the
    product's for colliding names."""
    return _build(SCHEMA_DIR, (*SCHEMA_FILES, *(str(p) for p in extra_files)))

"""Strawberry object and input types generated from :mod:`gateway.core.model.schema`.

Nothing here is typed by hand: every served kind, its list kind and every nested type they
reach become a strawberry ``@type`` (outputs: every field nullable, named with the Kubernetes
JSON name, plus ``raw: JSON``) and a strawberry ``@input`` (``PodInput``, ``PodSpecInput``...;
every field optional, unset fields are left out of the JSON sent upstream).

Output values are the upstream JSON dicts themselves: the schema's default resolver
(:func:`dict_resolver`) reads a field by its JSON name, so no object is ever converted into
Python classes on the way out.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import strawberry
from strawberry.types.base import get_object_definition
from strawberry.types.field import StrawberryField
from strawberry.types.unset import UNSET

from gateway.core import REGISTRY, Registry, Resource, schema
from gateway.graphql.resolvers.scalars import JSON, SCALAR_TYPES

#: Definition ids generated besides the served kinds (results of deletes).
EXTRA_ROOTS = ("io.k8s.apimachinery.pkg.apis.meta.v1.Status",)


#: Extra output fields per type short name: ``{field name: strawberry field}``; built by a
#: hook that sees every generated class (links such as ``Pod.events`` refer to them).
ExtraFields = Callable[["GeneratedTypes"], Mapping[str, Mapping[str, StrawberryField]]]


def python_name(json_name: str) -> str:
    """The Python attribute for a JSON name (``continue`` is a keyword: ``continue_``)."""
    return json_name + "_" if keyword.iskeyword(json_name) else json_name


def resolve_raw(root: Any) -> Any:
    """The resolver of every output type's ``raw`` field: the upstream object itself (the
    projection, :mod:`gateway.graphql.engine.projection`, recognises the field by it)."""
    return root


@dataclass(frozen=True, slots=True)
class GeneratedTypes:
    """The generated classes.

    Attributes:
        outputs: output type by short name (``Pod``, ``PodSpec``, ``ObjectMeta``...).
        inputs: input type by short name of the object type it mirrors (``Pod`` -> ``PodInput``).
        kinds: output type of each served kind, by its GraphQL name (:meth:`name`).
        lists: output list type of each served kind, by name (``Pod`` -> ``PodList``).
        kind_inputs: input type of each served kind, by name (``Pod`` -> ``PodInput``).
        names: the GraphQL name of each served resource, by registry key: the short name of
            its kind's type, which is the kind itself unless another served kind took it
            (``Event`` of ``events.k8s.io`` is ``EventsV1Event``: the core one is ``Event``).
    """

    outputs: Mapping[str, type]
    inputs: Mapping[str, type]
    kinds: Mapping[str, type]
    lists: Mapping[str, type]
    kind_inputs: Mapping[str, type]
    names: Mapping[str, str]
    #: The served resources, by registry key.
    resources: Mapping[str, Resource]
    #: The schema type of each served kind, by GraphQL name (its fields, for links).
    kind_types: Mapping[str, schema.ObjectType]
    #: The classes of every generated type, by definition id (the next build reuses them).
    built: Mapping[str, Built]

    def name(self, r: Resource) -> str:
        """The GraphQL type name of a served resource's kind."""
        return self.names[r.key]

    def output(self, short_name: str) -> type:
        return self.outputs[short_name]

    def input(self, short_name: str) -> type:
        return self.inputs[short_name]


def _kinds(
    registry: Registry, model: schema.Model
) -> dict[str, tuple[schema.ObjectType, schema.ObjectType]]:
    """``{registry key: (kind type, list kind type)}``."""
    return {
        r.key: (
            model.kind_type(r.group, r.version, r.kind),
            model.kind_type(r.group, r.version, r.list_kind),
        )
        for r in registry.values()
    }


def _closure(roots: Iterable[str], model: schema.Model) -> list[schema.ObjectType]:
    seen: dict[str, schema.ObjectType] = {}
    for root in roots:
        for t in model.reachable(root):
            seen.setdefault(t.name, t)
    return sorted(seen.values(), key=lambda t: t.short_name)


def _annotation(
    ref: schema.TypeRef, classes: Mapping[str, type], model: schema.Model, *, output: bool
) -> Any:
    if isinstance(ref, schema.Scalar):
        return SCALAR_TYPES[ref.kind]
    if isinstance(ref, schema.MapOf):
        return JSON
    if isinstance(ref, schema.ListOf):
        item = _annotation(ref.item, classes, model, output=output)
        # Outputs tolerate a null inside an upstream array; inputs do not send one.
        return list[Optional[item]] if output else list[item]  # type: ignore[valid-type]  # noqa: UP045
    return classes[model.object_type(ref.type_name).short_name]


def _describe(text: str) -> str | None:
    return text or None


@dataclass(frozen=True, slots=True)
class Built:
    """The classes generated for one object type, kept for the next build to reuse."""

    object_type: schema.ObjectType
    output_class: type
    input_class: type


def _reusable(
    types: list[schema.ObjectType],
    model: schema.Model,
    previous: Mapping[str, Built],
    fixed: set[str],
) -> set[str]:
    """Definition ids whose classes a previous build made and this one may take as they are:
    the same type, no extra fields (kinds, lists and linked types are always made anew), and
    every type it refers to reusable too (a class names its field types' classes)."""
    ok: dict[str, bool] = {}

    def check(def_id: str, path: set[str]) -> bool:
        if def_id in ok:
            return ok[def_id]
        t = model.types[def_id]
        before = previous.get(def_id)
        result = before is not None and before.object_type == t and def_id not in fixed
        if result:
            path.add(def_id)
            # a cycle is not reused (conservative): its members are made anew
            result = all(ref not in path and check(ref, path) for ref in set(t.refs()))
            path.discard(def_id)
        ok[def_id] = result
        return result

    return {t.name for t in types if check(t.name, set())}


def generate(
    registry: Registry = REGISTRY,
    extra: ExtraFields | None = None,
    model: schema.Model | None = None,
    previous: Mapping[str, Built] | None = None,
) -> GeneratedTypes:
    """Generate the output and input types of every served kind from the schema source.

    Args:
        registry: the served resources.
        extra: a hook returning additional output fields per type (cross-resource links).
        model: the schema the kinds are described by (the curated seed schema by default; a
            model extended with discovered kinds, :func:`gateway.core.model.openapi.extend`).
        previous: the classes of an earlier build (:attr:`GeneratedTypes.built`): a nested
            type that did not change is taken as it is rather than made again, which is most
            of the work when the schema is rebuilt after one CRD changed.
    """
    model = model or schema.seed_model()
    served = _kinds(registry, model)
    roots = [t.name for pair in served.values() for t in pair]
    types = _closure([*roots, *EXTRA_ROOTS], model)
    previous = previous or {}
    fixed = {*roots, *(b.object_type.name for b in previous.values() if _extended(b.output_class))}
    reused = _reusable(types, model, previous, fixed)
    outputs: dict[str, type] = {}
    inputs: dict[str, type] = {}
    for t in types:
        if t.name in reused:
            outputs[t.short_name] = previous[t.name].output_class
            inputs[t.short_name] = previous[t.name].input_class
            continue
        outputs[t.short_name] = type(t.short_name, (), {"__module__": __name__})
        inputs[t.short_name] = type(f"{t.short_name}Input", (), {"__module__": __name__})
    names = {key: kind.short_name for key, (kind, _) in served.items()}
    generated = GeneratedTypes(
        outputs=outputs,
        inputs=inputs,
        kinds={kind.short_name: outputs[kind.short_name] for kind, _ in served.values()},
        lists={kind.short_name: outputs[lst.short_name] for kind, lst in served.values()},
        kind_inputs={kind.short_name: inputs[kind.short_name] for kind, _ in served.values()},
        names=names,
        resources=dict(registry.items()),
        kind_types={kind.short_name: kind for kind, _ in served.values()},
        built={t.name: Built(t, outputs[t.short_name], inputs[t.short_name]) for t in types},
    )
    extra_fields = extra(generated) if extra is not None else {}
    for t in types:
        if t.name in reused and extra_fields.get(t.short_name):
            # A type that gains links now: rebuild without reuse (never half-linked).
            return generate(registry, extra, model)

    for t in types:
        if t.name in reused:
            continue
        _fill(outputs[t.short_name], t, outputs, model, output=True)
        out_cls = outputs[t.short_name]
        out_cls.raw = strawberry.field(  # type: ignore[attr-defined]
            resolver=resolve_raw,
            name="raw",
            graphql_type=Optional[JSON],  # noqa: UP045
            description="The object exactly as the upstream sent it (fields newer than "
            "this schema included).",
        )
        for name, fld in extra_fields.get(t.short_name, {}).items():
            setattr(out_cls, name, fld)
        out_cls.__kg_extended__ = bool(extra_fields.get(t.short_name))  # type: ignore[attr-defined]
        strawberry.type(out_cls, name=t.short_name, description=_describe(t.description))

        _fill(inputs[t.short_name], t, inputs, model, output=False)
        strawberry.input(
            inputs[t.short_name], name=f"{t.short_name}Input", description=_describe(t.description)
        )
    return generated


def _extended(cls: type) -> bool:
    """Did a build add extra (link) fields to this output class?"""
    return bool(getattr(cls, "__kg_extended__", False))


def _fill(
    cls: type,
    t: schema.ObjectType,
    classes: Mapping[str, type],
    model: schema.Model,
    *,
    output: bool,
) -> None:
    annotations: dict[str, Any] = {}
    for f in t.fields:
        py = python_name(f.json_name)
        annotations[py] = Optional[_annotation(f.type, classes, model, output=output)]  # noqa: UP045
        setattr(
            cls,
            py,
            strawberry.field(
                name=f.json_name,
                description=_describe(f.description),
                default=None if output else UNSET,
            ),
        )
    cls.__annotations__ = annotations


def to_json(value: Any) -> Any:
    """An input object (or list / scalar) as the Kubernetes JSON it stands for.

    Unset fields are left out; an explicit ``null`` is kept (a merge patch deletes with it,
    create and replace ignore it).
    """
    definition = get_object_definition(value)
    if definition is not None:
        out: dict[str, Any] = {}
        for f in definition.fields:
            v = getattr(value, f.python_name, UNSET)
            if v is UNSET:
                continue
            out[f.graphql_name or f.python_name] = to_json(v)
        return out
    if isinstance(value, list):
        return [to_json(v) for v in value]
    return value

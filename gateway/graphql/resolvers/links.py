"""Links across resources, resolved in batches through the operation's DataLoaders.

* ``Pod.events``: the events whose ``involvedObject`` is the pod;
* ``ObjectReference.pod``: the referenced pod when ``kind`` is ``Pod``, which makes
  ``Event.involvedObject.pod`` and ``EndpointAddress.targetRef.pod`` work;
* every relation of :data:`gateway.core.model.relations.RELATIONS` whose two kinds are served
  (``Deployment.replicaSets``, ``ReplicaSet.pods``, ``Pod.node``, ``Service.endpoints``,
  ``events`` on every kind...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import strawberry
from strawberry import Info
from strawberry.types.field import StrawberryField

from gateway.core import RELATIONS, Relation, Resource
from gateway.graphql.resolvers.context import Context
from gateway.graphql.resolvers.objects import GeneratedTypes

Resolver = Any


async def _pod_events(root: Any, info: Info[Context, None]) -> Any:
    meta = root.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    if not namespace or not name:
        return None
    loaders = info.context.at(info).loaders
    return await loaders.pod_events.load((namespace, name, meta.get("uid") or ""))


async def _referenced_pod(root: Any, info: Info[Context, None]) -> Any:
    if root.get("kind") != "Pod" or root.get("apiVersion", "v1") != "v1":
        return None
    namespace, name = root.get("namespace"), root.get("name")
    if not namespace or not name:
        return None
    pod = await info.context.at(info).loaders.pods.load((namespace, name))
    if (
        pod is not None
        and root.get("uid")
        and (pod.get("metadata") or {}).get("uid") != root.get("uid")
    ):
        return None  # the name is reused by a newer pod: not the referenced one
    return pod


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _meta(root: Any) -> dict[str, Any]:
    meta = root.get("metadata") if isinstance(root, dict) else None
    return meta if isinstance(meta, dict) else {}


def _owner_refs(obj: Any) -> list[dict[str, Any]]:
    refs = _meta(obj).get("ownerReferences")
    return [r for r in refs if isinstance(r, dict)] if isinstance(refs, list) else []


def _group_of(api_version: Any) -> str:
    return api_version.rpartition("/")[0] if isinstance(api_version, str) else ""


def relation_resolver(rel: Relation, source: Resource, target: Resource) -> Resolver:
    """The batched resolver of one relation (see :data:`gateway.core.model.relations.Rule`)."""

    def namespace_of(root: Any) -> str:
        return str(_meta(root).get("namespace") or "") if target.namespaced else ""

    async def owner(root: Any, info: Info[Context, None]) -> Any:
        for ref in _owner_refs(root):
            if ref.get("kind") == target.kind and _group_of(ref.get("apiVersion")) == target.group:
                found = (
                    await info.context.at(info)
                    .loaders.named(target)
                    .load((namespace_of(root), str(ref.get("name") or "")))
                )
                if found is not None and _meta(found).get("uid") == ref.get("uid"):
                    return found
        return None

    async def owned(root: Any, info: Info[Context, None]) -> Any:
        uid = _meta(root).get("uid")
        if not uid:
            return []
        items = await info.context.at(info).loaders.listing(target, _meta(root).get("namespace"))
        return [i for i in items if any(r.get("uid") == uid for r in _owner_refs(i))]

    async def by_name(root: Any, info: Info[Context, None]) -> Any:
        name = _dig(root, rel.path)
        if not isinstance(name, str) or not name:
            return None
        return await info.context.at(info).loaders.named(target).load((namespace_of(root), name))

    async def names_me(root: Any, info: Info[Context, None]) -> Any:
        name = _meta(root).get("name")
        if not name:
            return []
        namespace = _meta(root).get("namespace") if source.namespaced else None
        items = await info.context.at(info).loaders.listing(target, namespace)
        return [i for i in items if _dig(i, rel.path) == name]

    async def same_name(root: Any, info: Info[Context, None]) -> Any:
        name = _meta(root).get("name")
        if not name:
            return None
        loaders = info.context.at(info).loaders
        return await loaders.named(target).load((namespace_of(root), str(name)))

    async def involved(root: Any, info: Info[Context, None]) -> Any:
        meta = _meta(root)
        uid, name = meta.get("uid"), meta.get("name")
        if not uid and not name:
            return []
        # Events about a cluster-scoped object are recorded in `default` (client-go's rule).
        namespace = meta.get("namespace") or "default"
        items = await info.context.at(info).loaders.listing(target, namespace)
        out = []
        for event in items:
            ref = event.get("involvedObject") or event.get("regarding") or {}
            if uid and ref.get("uid"):
                if ref.get("uid") == uid:
                    out.append(event)
            elif ref.get("kind") == source.kind and ref.get("name") == name:
                out.append(event)
        return out

    rules: dict[str, Resolver] = {
        "owner": owner,
        "owned": owned,
        "by-name": by_name,
        "names-me": names_me,
        "same-name": same_name,
        "involved": involved,
    }
    return rules[rel.rule]


def relation_fields(types: GeneratedTypes) -> dict[str, dict[str, StrawberryField]]:
    """The fields of :data:`RELATIONS` whose source and target kinds are both served."""
    out: dict[str, dict[str, StrawberryField]] = {}
    for rel in RELATIONS:
        target = types.resources.get(rel.target)
        if target is None:
            continue
        sources = (
            [r for r in types.resources.values() if r.key != rel.target]
            if rel.source == "*"
            else [types.resources[rel.source]]
            if rel.source in types.resources
            else []
        )
        target_cls = types.kinds[types.name(target)]
        for source in sources:
            type_name = types.name(source)
            taken = {f.json_name for f in types.kind_types[type_name].fields}
            fields = out.setdefault(type_name, {})
            if rel.name in taken or rel.name in fields:
                continue
            graphql_type = (
                Optional[list[target_cls]]  # type: ignore[valid-type]  # noqa: UP045
                if rel.many
                else Optional[target_cls]  # noqa: UP045
            )
            fields[rel.name] = strawberry.field(
                resolver=relation_resolver(rel, source, target),
                name=rel.name,
                graphql_type=graphql_type,
                description=rel.description,
            )
    return out


def link_fields(types: GeneratedTypes) -> Mapping[str, Mapping[str, StrawberryField]]:
    """The link fields to add to the generated output types, by type name."""
    pod, event = types.kinds["Pod"], types.kinds["Event"]
    links: dict[str, dict[str, StrawberryField]] = {
        "Pod": {
            "events": strawberry.field(
                resolver=_pod_events,
                name="events",
                graphql_type=Optional[list[event]],  # type: ignore[valid-type]  # noqa: UP045
                description="Events whose involvedObject is this pod (batched per request).",
            )
        },
        "ObjectReference": {
            "pod": strawberry.field(
                resolver=_referenced_pod,
                name="pod",
                graphql_type=Optional[pod],  # noqa: UP045
                description="The referenced Pod, when `kind` is `Pod` and it still exists "
                "with the referenced uid (batched per request).",
            )
        },
    }
    for type_name, fields in relation_fields(types).items():
        for name, fld in fields.items():
            links.setdefault(type_name, {}).setdefault(name, fld)
    return links

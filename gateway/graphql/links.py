"""Links across resources, resolved in batches through the operation's DataLoaders.

* ``Pod.events``: the events whose ``involvedObject`` is the pod;
* ``ObjectReference.pod``: the referenced pod when ``kind`` is ``Pod``, which makes
  ``Event.involvedObject.pod`` and ``EndpointAddress.targetRef.pod`` work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import strawberry
from strawberry import Info
from strawberry.types.field import StrawberryField

from gateway.graphql.context import Context
from gateway.graphql.objects import GeneratedTypes


async def _pod_events(root: Any, info: Info[Context, None]) -> Any:
    meta = root.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    if not namespace or not name:
        return None
    return await info.context.loaders.pod_events.load((namespace, name, meta.get("uid") or ""))


async def _referenced_pod(root: Any, info: Info[Context, None]) -> Any:
    if root.get("kind") != "Pod" or root.get("apiVersion", "v1") != "v1":
        return None
    namespace, name = root.get("namespace"), root.get("name")
    if not namespace or not name:
        return None
    pod = await info.context.loaders.pods.load((namespace, name))
    if (
        pod is not None
        and root.get("uid")
        and (pod.get("metadata") or {}).get("uid") != root.get("uid")
    ):
        return None  # the name is reused by a newer pod: not the referenced one
    return pod


def link_fields(types: GeneratedTypes) -> Mapping[str, Mapping[str, StrawberryField]]:
    """The link fields to add to the generated output types, by type name."""
    pod, event = types.kinds["Pod"], types.kinds["Event"]
    return {
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

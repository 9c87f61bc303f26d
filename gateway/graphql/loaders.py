"""DataLoaders for links across resources: N parents cost O(namespaces) upstream calls.

One :class:`Loaders` exists per operation (one HTTP request, or one event of a shared
subscription) and per credential, so a cached result is never shown to another caller.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Coroutine, Sequence
from typing import Any

from strawberry.dataloader import DataLoader

from gateway.core import errors
from gateway.core.adapter import Credential, KubeAdapter
from gateway.core.options import ListOptions

#: Up to this many names of one namespace are read one by one; more cost one list.
GET_THRESHOLD = 3

PodKey = tuple[str, str]  # namespace, name
PodEventsKey = tuple[str, str, str]  # namespace, name, uid ('' when unknown)


class Loaders:
    """The loaders of one operation.

    Attributes:
        pod_events: events whose ``involvedObject`` is the pod ``(namespace, name, uid)``.
        pods: a pod by ``(namespace, name)`` (``None`` when it does not exist).
    """

    def __init__(self, adapter: KubeAdapter, credential: Credential) -> None:
        self.adapter = adapter
        self.credential = credential
        self.pod_events: DataLoader[PodEventsKey, list[dict[str, Any]]] = DataLoader(
            load_fn=self._load_pod_events
        )
        self.pods: DataLoader[PodKey, dict[str, Any] | None] = DataLoader(load_fn=self._load_pods)

    async def _load_pod_events(
        self, keys: Sequence[PodEventsKey]
    ) -> list[list[dict[str, Any]] | BaseException]:
        namespaces = sorted({ns for ns, _, _ in keys})
        listed = await asyncio.gather(
            *(
                self.adapter.list_all(
                    "events",
                    namespace=ns,
                    options=ListOptions(field_selector="involvedObject.kind=Pod"),
                    credential=self.credential,
                )
                for ns in namespaces
            ),
            return_exceptions=True,
        )
        by_pod: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        failed: dict[str, BaseException] = {}
        for ns, result in zip(namespaces, listed, strict=True):
            if isinstance(result, BaseException):
                failed[ns] = result
                continue
            for item in result.get("items") or []:
                ref = item.get("involvedObject") or {}
                if ref.get("kind") == "Pod":
                    by_pod[(ref.get("namespace") or ns, ref.get("name") or "")].append(item)
        out: list[list[dict[str, Any]] | BaseException] = []
        for ns, name, uid in keys:
            if ns in failed:
                out.append(failed[ns])
                continue
            events = by_pod.get((ns, name), [])
            if uid:
                # An event for an earlier pod of the same name is not this pod's.
                events = [
                    e for e in events if (e.get("involvedObject") or {}).get("uid") in (None, uid)
                ]
            out.append(events)
        return out

    async def _load_pods(
        self, keys: Sequence[PodKey]
    ) -> list[dict[str, Any] | BaseException | None]:
        by_ns: dict[str, list[str]] = defaultdict(list)
        for ns, name in keys:
            by_ns[ns].append(name)
        found: dict[PodKey, dict[str, Any] | BaseException | None] = {}

        async def one(ns: str, name: str) -> None:
            try:
                found[(ns, name)] = await self.adapter.get(
                    "pods", name, namespace=ns, credential=self.credential
                )
            except errors.NotFound:
                found[(ns, name)] = None
            except errors.GatewayError as exc:
                found[(ns, name)] = exc

        async def namespace(ns: str, names: list[str]) -> None:
            try:
                listed = await self.adapter.list_all(
                    "pods", namespace=ns, credential=self.credential
                )
            except errors.GatewayError as exc:
                for name in names:
                    found[(ns, name)] = exc
                return
            items = {(i.get("metadata") or {}).get("name"): i for i in listed.get("items") or []}
            for name in names:
                item = items.get(name)
                if item is not None:
                    item = {"apiVersion": "v1", "kind": "Pod", **item}
                found[(ns, name)] = item

        jobs: list[Coroutine[Any, Any, None]] = []
        for ns, names in by_ns.items():
            if len(names) <= GET_THRESHOLD:
                jobs.extend(one(ns, name) for name in names)
            else:
                jobs.append(namespace(ns, names))
        await asyncio.gather(*jobs)
        return [found[key] for key in keys]

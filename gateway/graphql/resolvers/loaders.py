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

from gateway.core import POD, Credential, KubeAdapter, ListOptions, Resource, errors

#: Up to this many names of one namespace are read one by one; more cost one list.
GET_THRESHOLD = 3

NamedKey = tuple[str, str]  # namespace ('' for cluster-scoped), name
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
        self._named: dict[str, DataLoader[NamedKey, dict[str, Any] | None]] = {}
        self._listings: dict[tuple[str, str | None], asyncio.Task[list[dict[str, Any]]]] = {}
        self.pods = self.named(POD)

    def named(self, resource: Resource) -> DataLoader[NamedKey, dict[str, Any] | None]:
        """Objects of ``resource`` by ``(namespace, name)`` (``None``: no such object); a few
        names of one namespace are read one by one, more cost one list."""
        loader = self._named.get(resource.key)
        if loader is None:

            async def load(keys: Sequence[NamedKey]) -> list[dict[str, Any] | BaseException | None]:
                return await self._load_named(resource, keys)

            loader = self._named[resource.key] = DataLoader(load_fn=load)
        return loader

    async def listing(self, resource: Resource, namespace: str | None) -> list[dict[str, Any]]:
        """Every object of ``resource`` in ``namespace`` (``None``: all), listed once per
        operation however many fields ask."""
        key = (resource.key, namespace if resource.namespaced else None)
        task = self._listings.get(key)
        if task is None:

            async def run() -> list[dict[str, Any]]:
                listed = await self.adapter.list_all(
                    resource, namespace=key[1], credential=self.credential
                )
                return list(listed.get("items") or [])

            task = self._listings[key] = asyncio.ensure_future(run())
        return await asyncio.shield(task)

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

    async def _load_named(
        self, resource: Resource, keys: Sequence[NamedKey]
    ) -> list[dict[str, Any] | BaseException | None]:
        by_ns: dict[str, list[str]] = defaultdict(list)
        for ns, name in keys:
            by_ns[ns].append(name)
        found: dict[NamedKey, dict[str, Any] | BaseException | None] = {}
        kind = {"apiVersion": resource.api_version, "kind": resource.kind}

        async def one(ns: str, name: str) -> None:
            try:
                found[(ns, name)] = await self.adapter.get(
                    resource, name, namespace=ns or None, credential=self.credential
                )
            except errors.NotFound:
                found[(ns, name)] = None
            except errors.GatewayError as exc:
                found[(ns, name)] = exc

        async def namespace(ns: str, names: list[str]) -> None:
            try:
                listed = await self.listing(resource, ns or None)
            except errors.GatewayError as exc:
                for name in names:
                    found[(ns, name)] = exc
                return
            items = {(i.get("metadata") or {}).get("name"): i for i in listed}
            for name in names:
                item = items.get(name)
                found[(ns, name)] = None if item is None else {**kind, **item}

        jobs: list[Coroutine[Any, Any, None]] = []
        for ns, names in by_ns.items():
            if len(names) <= GET_THRESHOLD:
                jobs.extend(one(ns, name) for name in names)
            else:
                jobs.append(namespace(ns, names))
        await asyncio.gather(*jobs)
        return [found[key] for key in keys]

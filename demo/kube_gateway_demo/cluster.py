"""The demo cluster's shared state: what it serves (the registry, a strategy per resource),
the versioned objects, the containers' logs, the clock and the namespaces that exist.

Every part of the store (:mod:`.reads`, :mod:`.writes`, :mod:`.deletion`, :mod:`.watches`,
:mod:`.kubelet`) works on one :class:`Cluster`, and looks its attributes up when it needs
them, so a test that sets ``store.clock`` sets every part's clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from gateway.core.model.registry import Registry, Resource
from kube_gateway_demo.catalog import NAMESPACE
from kube_gateway_demo.logs import LogStore
from kube_gateway_demo.options import ListQuery
from kube_gateway_demo.storage import Change, Storage, object_key
from kube_gateway_demo.strategy import Strategy
from kube_gateway_demo.times import rfc3339

SYSTEM_NAMESPACES: Final = ("default", "kube-system", "kube-public", "kube-node-lease")


class Cluster:
    """What the demo cluster holds.

    Args:
        registry: the served resources.
        strategies: what each of them does beyond the generic, by registry key.
        storage: their versioned objects.
        clock: the wall clock (seconds), for timestamps.
    """

    def __init__(
        self,
        registry: Registry,
        strategies: Mapping[str, Strategy],
        storage: Storage,
        clock: Callable[[], float],
    ) -> None:
        self.registry = registry
        self.resources: tuple[Resource, ...] = tuple(registry.values())
        self._static = registry
        self._defined: dict[str, tuple[Resource, ...]] = {}
        self.categories: dict[str, list[str]] = {}
        """Discovery categories of the resources CRDs define, by registry key."""
        self.generation = 0
        """Counts changes of what is served (a CRD created, changed or deleted)."""
        self.storage_teardown = 1.0
        """Seconds after a CRD's change or deletion that the watches of its old
        definition end (kube-apiserver's storage teardown waits one second)."""
        self.strategies = dict(strategies)
        self.storage = storage
        self.logs = LogStore()
        self.clock = clock
        self.too_large_wait = 3.0
        """Seconds a read at a future resourceVersion waits before answering 504."""
        self.namespaces: set[str] = set()
        """The namespaces that exist (objects may only be created in one of them); when
        Namespaces are served, the names of the Namespace objects."""
        if self.serves(NAMESPACE):
            self.storage.hook(NAMESPACE, self._namespace_changed)

    def install(
        self,
        key: str,
        records: Sequence[Resource],
        strategy: Strategy | None,
        *,
        categories: list[str],
        restart_watches: bool,
    ) -> None:
        """Serve the records of a resource a CRD defines (replacing what it defined before;
        no records: not served, its objects kept).  ``restart_watches`` ends the watches of
        its old definition, as the apiserver's storage teardown does."""
        if restart_watches:
            self.storage.end_watches(key, after=self.storage_teardown)
        if not records or strategy is None:
            self._defined.pop(key, None)
        else:
            self._defined[key] = tuple(records)
            self.strategies[key] = strategy
            self.storage.add_collection(records[0])
        self.categories[key] = categories
        self._republish()

    def uninstall(self, key: str) -> None:
        """Stop serving a resource a CRD defined: its watches end, its objects go."""
        self._defined.pop(key, None)
        self.categories.pop(key, None)
        self.storage.drop_collection(key, after=self.storage_teardown)
        self.strategies.pop(key, None)
        self._republish()

    def _republish(self) -> None:
        defined = [r for records in self._defined.values() for r in records]
        self.registry = Registry((*self._static.records, *defined))
        self.resources = (*self._static.values(), *defined)
        self.generation += 1

    def serves(self, res: Resource) -> bool:
        """Whether ``res`` (that very record) is a served resource."""
        return self.registry.get(res.key) == res

    def resource(self, name: str | Resource) -> Resource:
        """Resolve a resource by registry key, plural, kind or short name."""
        if isinstance(name, Resource):
            return name
        return self.registry.lookup(name)

    @property
    def resource_version(self) -> str:
        """The current resourceVersion of the whole store."""
        return str(self.storage.rv)

    def now(self) -> str:
        """The current time as ``metav1.Time``."""
        return rfc3339(self.clock())

    def strategy(self, res: Resource) -> Strategy:
        """What ``res`` does beyond the generic (:mod:`.strategy`)."""
        return self.strategies[res.key]

    def key(self, res: Resource, namespace: str | None, name: str) -> str:
        """The storage key of an object of ``res``."""
        return object_key(namespace or "" if res.namespaced else "", name)

    def namespace_exists(self, namespace: str) -> bool:
        """Whether the namespace exists."""
        return namespace in self.namespaces

    def list_query(
        self, res: Resource, namespace: str | None, label_selector: str, field_selector: str
    ) -> ListQuery:
        """The selectors of a list or watch of ``res``.

        Raises:
            DemoApiError: 400 for a bad selector.
        """
        labels = self.strategy(res).field_labels
        return ListQuery.parse(namespace, label_selector, field_selector, labels)

    def _namespace_changed(self, change: Change) -> None:
        name = str(change.obj["metadata"]["name"])
        if change.type == "DELETED":
            self.namespaces.discard(name)
        else:
            self.namespaces.add(name)

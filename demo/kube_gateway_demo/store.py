"""The demo cluster's state with the apiserver's semantics, as the HTTP layer serves it and
as tests drive it in-process, put together from one part per job:

* :class:`~.cluster.Cluster` - what is served, the versioned objects (:mod:`.storage`), the
  logs, the clock, the namespaces that exist;
* :class:`~.reads.Reads` - get, and lists with resourceVersion, limit and continue;
* :class:`~.writes.Writes` - create, update, patch and apply, each through the apiserver's
  steps (:mod:`.decoding` turns request bodies into objects);
* :class:`~.deletion.Deletion` - preconditions, graceful deletion, finalizers;
* :class:`~.watches.Watches` - watches from initial events or history, bookmarks;
* :class:`~.kubelet.Kubelet` - containers' logs, in step with their pods.

What a particular kind does differently is its strategy's (:mod:`.strategy`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from gateway.core.model.registry import Registry
from kube_gateway_demo import definitions as schema
from kube_gateway_demo.apiextensions import Definitions
from kube_gateway_demo.catalog import CRD, DEMO_REGISTRY, NAMESPACE, crd_of
from kube_gateway_demo.cluster import SYSTEM_NAMESPACES, Cluster
from kube_gateway_demo.deletion import Deletion
from kube_gateway_demo.jsonutil import clone
from kube_gateway_demo.kubelet import Kubelet
from kube_gateway_demo.options import DemoWriteOptions
from kube_gateway_demo.reads import Reads
from kube_gateway_demo.storage import Storage
from kube_gateway_demo.strategy import strategy_for
from kube_gateway_demo.watches import Watches
from kube_gateway_demo.writes import Writes


class Store(Cluster):
    """The state of the demo cluster and its parts (the synchronous API the HTTP layer
    calls; :class:`~.inprocess.DemoStore` adds the async in-process API on top).

    The system namespaces exist from the start, and so does the CustomResourceDefinition of
    every custom resource served.

    Args:
        registry: the served resources.
        schema_types: the schema definition of a resource's objects, by registry key, where
            it is not the one :func:`gateway.core.model.schema.kind_type` finds for its kind.
        history: how many changes per resource are kept for watch resumption and
            consistent pagination (older resourceVersions answer 410).
        clock: the wall clock (seconds), for timestamps.
    """

    def __init__(
        self,
        registry: Registry = DEMO_REGISTRY,
        *,
        schema_types: Mapping[str, str] | None = None,
        history: int = 1000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        types = dict(schema_types or {})
        strategies = {
            r.key: strategy_for(
                r, types.get(r.key) or schema.kind_type(r.group, r.version, r.kind).name
            )
            for r in registry.values()
        }
        storage = Storage(registry.values(), history=history)
        super().__init__(registry, strategies, storage, clock)
        self.reads = Reads(self)
        self.writes = Writes(self)
        self.deletion = Deletion(self, self.reads)
        self.watches = Watches(self)
        self.kubelet = Kubelet(self)
        for ns in SYSTEM_NAMESPACES:
            self.add_namespace(ns)
        if self.serves(CRD):
            #: the CRD controller: CRDs created at run time are served
            self.definitions = Definitions(self, frozenset(registry.keys()))
            # a served custom resource exists because its definition does
            for res in self.resources:
                crd = crd_of(res)
                if crd is not None:
                    self.writes.create(
                        CRD,
                        clone(crd),
                        namespace=None,
                        opts=DemoWriteOptions(field_manager="kubectl-client-side-apply"),
                        origin="internal",
                    )

    def add_namespace(self, name: str) -> None:
        """Make the namespace exist (as a Namespace object, when those are served)."""
        if name in self.namespaces:
            return
        if not self.serves(NAMESPACE):
            self.namespaces.add(name)
            return
        self.writes.create(
            NAMESPACE,
            {"metadata": {"name": name}},
            namespace=None,
            opts=DemoWriteOptions(field_manager="kube-apiserver"),
            origin="internal",
        )

    def close(self) -> None:
        """End every watch and log follow (server shutdown)."""
        self.storage.close()
        self.logs.close()

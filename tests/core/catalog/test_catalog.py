"""The catalog: lookup by group/version/plural and whole swaps heard by listeners."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.core.catalog.catalog import SEED_CATALOG, Catalog, CatalogHolder
from gateway.core.errors import UnknownResource
from gateway.core.model.registry import LEASE, POD, Registry
from gateway.core.watch.hub import WatchTarget


def test_seed_catalog_finds_resources_by_group_version_plural() -> None:
    assert SEED_CATALOG.resource("", "v1", "pods") is POD
    assert SEED_CATALOG.resource("coordination.k8s.io", "v1", "leases") is LEASE
    assert SEED_CATALOG.is_seed(POD)
    with pytest.raises(UnknownResource, match="'deployments' in 'apps/v1'"):
        SEED_CATALOG.resource("apps", "v1", "deployments")
    with pytest.raises(UnknownResource, match="'leases' in 'v1'"):
        SEED_CATALOG.resource("", "v1", "leases")


def test_swap_is_whole_and_heard_until_stopped() -> None:
    holder = CatalogHolder()
    heard: list[tuple[int, int]] = []
    stop = holder.listen(lambda old, new: heard.append((old.generation, new.generation)))
    smaller = Catalog(Registry((POD,)), generation=1)
    holder.swap(smaller)
    assert holder.current is smaller
    with pytest.raises(UnknownResource):
        holder.current.resource("coordination.k8s.io", "v1", "leases")
    stop()
    holder.swap(Catalog(Registry((POD, LEASE)), generation=2))
    assert heard == [(0, 1)]
    assert holder.current.resource("coordination.k8s.io", "v1", "leases") is LEASE


def test_two_versions_of_one_resource_are_two_watches_in_the_hub() -> None:
    """The hub shares an upstream watch per target key: the version is part of it, so a
    v1beta1 subscriber never receives objects of a v1 watch (discovery serves both through
    the generic gRPC service)."""
    beta = dataclasses.replace(LEASE, version="v1beta1")
    assert beta.key == LEASE.key  # one registry key for both versions
    assert WatchTarget(LEASE, "ns").key != WatchTarget(beta, "ns").key
    assert WatchTarget(LEASE, "ns").key == WatchTarget(LEASE, "ns").key

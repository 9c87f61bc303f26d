"""OpenAPI documents read on demand (:class:`gateway.core.catalog.openapi_documents.Documents`):
by hash,
once, shared by concurrent readers, a bounded number kept; and the reloader's expectations,
which wait for the index to name a new group/version's document, never for the document.

The upstream is the scripted cluster of ``test_discovery`` (a real HTTP server on loopback
counting every request).
"""

from __future__ import annotations

import asyncio
import hashlib
import weakref

import pytest

from gateway.core.catalog import openapi_documents as documents
from gateway.core.catalog.catalog import SEED_CATALOG
from gateway.core.catalog.discovery import Discovery, DiscoveryLimits
from gateway.core.catalog.openapi_documents import Documents
from gateway.core.catalog.reload import Expectations
from tests.core.catalog.test_discovery import Cluster, scripted, serving

APPS = ("apps", "v1")
V1 = ("stable.example.com", "v1")
V2 = ("stable.example.com", "v2")


def _reads(cluster: Cluster, key: str) -> int:
    return sum(n for p, n in cluster.requests.items() if p.startswith(f"/openapi/v3/{key}?"))


async def test_concurrent_loads_share_one_read_and_a_cancelled_caller_does_not_end_it() -> None:
    cluster = scripted()
    async with serving(cluster) as http:
        discovery = Discovery(http)
        catalog = await discovery.read(SEED_CATALOG)
        first, second, third = await asyncio.gather(
            documents.load(catalog, [APPS]),
            documents.load(catalog, [APPS, V1]),
            documents.load(catalog, [V1]),
        )
        assert first[APPS] is second[APPS]
        assert second[V1] is third[V1]
        assert _reads(cluster, "apis/apps/v1") == 1
        assert _reads(cluster, "apis/stable.example.com/v1") == 1
        assert discovery.documents.fetches == 2

        leaving = asyncio.create_task(documents.load(catalog, [V2]))
        staying = asyncio.create_task(documents.load(catalog, [V2]))
        await asyncio.sleep(0)  # both are waiting for the one read now
        leaving.cancel()
        assert V2 in await staying
        with pytest.raises(asyncio.CancelledError):
            await leaving
    assert _reads(cluster, "apis/stable.example.com/v2") == 1


async def test_the_cache_is_bounded_least_recently_used_first() -> None:
    cluster = scripted()
    async with serving(cluster) as http:
        discovery = Discovery(http, limits=DiscoveryLimits(cached_documents=2))
        catalog = await discovery.read(SEED_CATALOG)
        for key in (APPS, V1, APPS, V2):  # APPS used again: V1 is the least recent
            await documents.load(catalog, [key])
        assert len(discovery.documents) == 2
        assert _reads(cluster, "apis/apps/v1") == 1
        await documents.load(catalog, [APPS, V2])  # both still kept
        assert discovery.documents.fetches == 3
        await documents.load(catalog, [V1])  # evicted: read again
    assert _reads(cluster, "apis/stable.example.com/v1") == 2
    assert len(discovery.documents) == 2


async def test_a_document_without_a_hash_is_read_on_every_load_and_never_kept() -> None:
    cluster = scripted()
    url = "/openapi/v3/apis/apps/v1"
    cluster.bodies["/openapi/v3"]["paths"]["apis/apps/v1"] = {"serverRelativeURL": url}
    cluster.bodies[url] = {"openapi": "3.0.0", "info": {"title": "no hash"}}
    async with serving(cluster) as http:
        discovery = Discovery(http)
        catalog = await discovery.read(SEED_CATALOG)
        assert catalog.groups[APPS].openapi_url == url
        assert catalog.groups[APPS].openapi_hash == ""
        one = await documents.load(catalog, [APPS])
        two = await documents.load(catalog, [APPS])
    assert one == two == {APPS: {"openapi": "3.0.0", "info": {"title": "no hash"}}}
    assert cluster.requests[url] == 2
    assert len(discovery.documents) == 0


async def test_a_hash_that_changed_since_the_index_was_read_is_followed_to_the_current(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The apiserver answers a document's stale hash with a 301 to the current one (the
    document changed between the index read and the document read, as when CRDs are being
    installed): the document is read there, not left out; a redirect off the upstream is
    not followed."""
    cluster = scripted()
    current = {"openapi": "3.0.0", "info": {"title": "current"}}
    cluster.set_hash("apis/apps/v1", "OLD", {})
    async with serving(cluster) as http:
        discovery = Discovery(http)
        catalog = await discovery.read(SEED_CATALOG)
        cluster.bodies["/openapi/v3/apis/apps/v1?hash=NEW"] = current
        cluster.redirects["/openapi/v3/apis/apps/v1?hash=OLD"] = "/openapi/v3/apis/apps/v1?hash=NEW"
        cluster.redirects["/openapi/v3/apis/stable.example.com/v1?hash=H1"] = "//elsewhere/x"
        loaded = await documents.load(catalog, [APPS, V1])
    assert loaded == {APPS: current}
    assert cluster.requests["/openapi/v3/apis/apps/v1?hash=NEW"] == 1
    assert "cannot read /openapi/v3/apis/stable.example.com/v1" in caplog.text


async def test_a_document_that_is_not_an_object_is_left_out_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = scripted()
    cluster.set_hash("apis/apps/v1", "H5", [])  # type: ignore[arg-type]
    async with serving(cluster) as http:
        discovery = Discovery(http)
        catalog = await discovery.read(SEED_CATALOG)
        assert await documents.load(catalog, [APPS, V1]) == {
            V1: {"openapi": "3.0.0", "info": {"title": "apis/stable.example.com/v1"}}
        }
    assert "openapi: /openapi/v3/apis/apps/v1 is not an object" in caplog.text
    assert isinstance(catalog.documents, Documents)


async def test_a_new_group_versions_expectation_is_met_once_its_document_describes_it() -> None:
    """The apiserver names a new CRD's group/version in its OpenAPI index before the document
    holds the CRD's schema: the expectation holds until the document describes the kind
    (read once per hash, so the schema build that follows takes the same document)."""
    cluster = scripted()
    index = cluster.bodies["/openapi/v3"]["paths"]
    named = index.pop("apis/stable.example.com/v1")
    async with serving(cluster) as http:
        discovery = Discovery(http)
        expect = Expectations(openapi={V1})
        first = await discovery.read(SEED_CATALOG)
        await expect.settle(discovery, first)
        assert expect.openapi == {V1}  # served, but the index does not name it yet
        assert _reads(cluster, "apis/stable.example.com/v1") == 0
        index["apis/stable.example.com/v1"] = named
        second = await discovery.read(first)
        await expect.settle(discovery, second)
        assert expect.openapi == {V1}  # named, but the document does not describe Widget yet
        gvk = {"group": "stable.example.com", "version": "v1", "kind": "Widget"}
        schemas = {"com.example.stable.v1.Widget": {"x-kubernetes-group-version-kind": [gvk]}}
        cluster.set_hash("apis/stable.example.com/v1", "H2", {"components": {"schemas": schemas}})
        third = await discovery.read(second)
        await expect.settle(discovery, third)
        assert not expect
        assert _reads(cluster, "apis/stable.example.com/v1") == 2  # H1 once, H2 once
        loaded = await documents.load(third, [V1])  # the schema build: no read again
        assert _reads(cluster, "apis/stable.example.com/v1") == 2
        assert V1 in loaded
        # a changed schema: met by a new hash in the index, without reading a document
        expect.hash_not[APPS] = "H1"
        cluster.set_hash("apis/apps/v1", "H2", {})
        await expect.settle(discovery, await discovery.read(third))
    assert not expect
    assert _reads(cluster, "apis/apps/v1") == 0


async def test_a_new_group_versions_document_is_awaited_until_discovery_lists_it() -> None:
    """A CRD's event comes before discovery lists its group/version: the document is still
    awaited then (dropping it would let the next read serve the kind untyped)."""
    cluster = scripted()
    new = ("new.example.com", "v1")
    async with serving(cluster) as http:
        discovery = Discovery(http)
        catalog = await discovery.read(SEED_CATALOG)
        expect = Expectations(openapi={new}, present={(*new, "things")})
        await expect.settle(discovery, catalog)
        assert expect.openapi == {new}  # discovery does not list it yet: still awaited
        gone = Expectations(openapi={new})  # nothing says discovery will list it
        await gone.settle(discovery, catalog)
        assert not gone.openapi


async def test_two_clusters_serving_the_same_document_hold_one_parse_of_it() -> None:
    """Each cluster reads its own documents (with its own identity), but a document whose
    bytes another cluster's discovery holds is that one object: a fleet of one Kubernetes
    version keeps one ``api/v1``, not one per cluster.  Different bytes, different
    objects, whatever hash a cluster advertises."""
    one, other = scripted(), scripted()
    async with serving(one) as http_one, serving(other) as http_other:
        first = await documents.load(await Discovery(http_one).read(SEED_CATALOG), [APPS, V1])
        second = await documents.load(await Discovery(http_other).read(SEED_CATALOG), [APPS, V1])
        assert _reads(one, "apis/apps/v1") == _reads(other, "apis/apps/v1") == 1
        assert dict(first[APPS]) == dict(second[APPS])
        inner = [k for k, v in first[APPS].items() if isinstance(v, dict)]
        assert inner  # a nested part to compare by identity
        for key in inner:
            assert first[APPS][key] is second[APPS][key]  # one parse, shared
        assert all(first[APPS][k] is not first[V1].get(k) for k in inner)


def test_a_shared_parse_lives_as_long_as_a_holder() -> None:
    body = b'{"openapi": "3.0.0", "paths": {"/x": {}}}'
    held = documents.shared_document(body)
    assert documents.shared_document(body) is held
    assert documents.shared_document(body.replace(b"/x", b"/y")) is not held
    assert documents.shared_document(b"[1]") == [1]  # not an object: not shared
    gone = weakref.ref(held)
    del held
    assert gone() is None  # nothing keeps a parse no cluster holds
    assert hashlib.sha256(body).digest() not in documents._PARSED

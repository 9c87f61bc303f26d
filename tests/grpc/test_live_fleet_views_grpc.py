"""Live fleet views over gRPC (``WatchView`` with ``view.clusters``), on two demo clusters
with real gRPC clients: the first message is ``View``'s merged answer, an update when one
cluster changes what the caller is sent and none when it does not, one live fleet view
shared with GraphQL's subscribers of the same merged view, and a cluster that refuses the
caller as its own ``ClusterView.error`` while the other stays live.

Synchronisation is on the gateway's own state (the live views' evaluated versions, the
fleet's counters), never on sleeps.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import orjson

from gateway.core import POD, FleetLiveViews
from kube_gateway_demo import DemoUpstream
from tests.graphql import test_live_fleet_views as fleet_live
from tests.grpc.test_live_views_grpc import READ, Rpc, _watch, rpc_of
from tests.grpc.test_views_grpc import request
from tests.support.graphql import NAMESPACE, ws_client

two = fleet_live.two
__all__ = ["two"]  # fixtures
ALICE = fleet_live.ALICE
BY_NAME = fleet_live.BY_NAME


def _merged(first: int = 6) -> Any:
    view = request(ns=NAMESPACE, filter=fleet_live.LABEL, sort=BY_NAME, first=first)
    view.read_mask.paths.extend(["metadata.name", "metadata.namespace", "metadata.labels"])
    view.clusters.append("*")
    return view


def _tags(update: Any) -> list[str]:
    return [f"{e.cluster}:{orjson.loads(e.object.json)['metadata']['name']}" for e in update.edges]


async def _read(call: Any) -> Any:
    async with asyncio.timeout(READ):
        update = await call.read()
    assert update is not grpc.aio.EOF
    return update


def _shown(update: Any) -> Any:
    """The message short of each cluster's resource_version."""
    copy = update.__class__()
    copy.CopyFrom(update)
    for c in copy.clusters:
        c.resource_version = ""
    return copy


async def test_watch_view_with_clusters_is_the_merged_view_kept_live(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    async with (
        fleet_live.fleet_gateway(a, b, tmp_path) as (served, fleet, _client),
        rpc_of(served) as rpc,
        ws_client(served, path=fleet_live.FLEET) as ws,
    ):
        call = rpc.watch(_watch(_merged()))
        first = await _read(call)
        expected = [f"{'default' if i % 2 == 0 else 'b'}:p-{i:02d}" for i in range(6)]
        assert _tags(first) == expected
        assert first.total == 10 and first.page_info.has_next_page
        assert [(c.cluster, c.total) for c in first.clusters] == [("default", 5), ("b", 5)]
        assert all(c.resource_version and not c.HasField("error") for c in first.clusters)
        # the first message is View's merged answer (at the same versions)
        assert await Rpc.view(rpc, _merged()) == first
        # a GraphQL subscriber of the same merged view shares its live fleet view
        op = await ws.subscribe(
            fleet_live.LIVE,
            {"ns": NAMESPACE, "filter": fleet_live.LABEL, "sort": BY_NAME, "first": 6},
        )
        assert (await ws.next(op))["data"]["podsView"]["total"] == 10
        shared = FleetLiveViews.of(fleet)
        assert shared.stats.views == 1 and shared.stats.subscribers == 2

        # invisible: a field the read mask leaves out, on an item of the page, in b
        merges = shared.stats.merges
        await b.store.patch(
            POD, "p-01", {"metadata": {"annotations": {"n": "1"}}}, namespace=NAMESPACE
        )
        await fleet_live._until(lambda: shared.stats.merges > merges)
        # visible: a label (kept by the mask) of an item of the page, in the default cluster
        await a.store.patch(
            POD, "p-02", {"metadata": {"labels": {"color": "red"}}}, namespace=NAMESPACE
        )
        update = await _read(call)
        assert _tags(update) == expected
        labels = orjson.loads(update.edges[2].object.json)["metadata"]["labels"]
        assert labels == {"app": "livefleet", "color": "red"}
        assert _shown(update) != _shown(first)
        call.cancel()


async def test_a_refusing_cluster_is_its_own_error_and_the_call_goes_on(
    two: tuple[DemoUpstream, DemoUpstream], tmp_path: Path
) -> None:
    a, b = two
    async with (
        fleet_live.fleet_gateway(a, b, tmp_path) as (served, _fleet, _client),
        rpc_of(served) as rpc,
    ):
        call = rpc.watch(_watch(_merged(first=20)), token=ALICE)
        first = await _read(call)
        assert _tags(first) == [f"default:p-{i:02d}" for i in range(0, 10, 2)]
        assert first.total == 5
        default, other = first.clusters
        assert not default.HasField("error") and default.total == 5
        assert other.cluster == "b"
        assert other.error.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
        assert ALICE not in str(first)
        # the default cluster stays live
        await a.store.create(POD, fleet_live._pod("p-00a", NAMESPACE))
        update = await _read(call)
        assert "default:p-00a" in _tags(update) and update.total == 6
        assert update.clusters[1].HasField("error")
        call.cancel()

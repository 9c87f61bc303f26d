"""The ``clusters`` query every endpoint's ``Query`` type has: the clusters the caller may see.

A front end reaching many clusters through one gateway needs to know which it may address
(``/clusters/{name}/graphql``) and whether each answers, without asking each one.  The
listing shows what the gateway knows of each cluster, never a credential: its name, API
server URL, version (its ``/version``, asked with the gateway's identity where it has one;
null until it answers), readiness and how many resources its catalog serves.  It lists the
clusters that authenticate the caller (:mod:`gateway.core.fleet.visibility`), not the whole
fleet: a caller of one cluster does not learn the others' names and servers.

The type is ``GatewayCluster``, not ``Cluster``: Cluster API's ``Cluster`` kind would take
that name in a group schema.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import strawberry
from strawberry.types import Info
from strawberry.types.field import StrawberryField

from gateway.core import Cluster
from gateway.graphql.resolvers.context import Context

__all__ = ["GatewayCluster", "clusters_field"]


@strawberry.type(description="A cluster this gateway serves (at /clusters/{name}/graphql).")
class GatewayCluster:
    name: str = strawberry.field(description="The name it is addressed by (`default`: /graphql).")
    server: str = strawberry.field(description="The URL of its API server.")
    version: str | None = strawberry.field(
        description="Its API server's gitVersion (null while it has not answered)."
    )
    ready: bool = strawberry.field(description="Does its API server answer (its /readyz)?")
    served_resources: int = strawberry.field(
        description="Resources (group, version, plural) the gateway serves from it now."
    )


async def _describe(cluster: Cluster) -> GatewayCluster:
    version, ready = await asyncio.gather(cluster.version.get(), cluster.readiness.ready())
    return GatewayCluster(
        name=cluster.name,
        server=cluster.server,
        version=version,
        ready=ready,
        served_resources=len(cluster.catalog.current.registry.records),
    )


async def _clusters(info: Info[Context, None]) -> list[GatewayCluster]:
    ctx = info.context
    clusters = ctx.clusters
    if ctx.visibility is not None:
        clusters = [c for _, c in await ctx.visibility.visible(ctx.credential)]
    return list(await asyncio.gather(*(_describe(c) for c in clusters)))


def clusters_field() -> StrawberryField:
    """The ``clusters`` root field (a fresh field per schema build)."""
    field: Any = strawberry.field(
        resolver=_clusters,
        description="The clusters this gateway serves that the caller may see (by default "
        "those that authenticate it), the default first.",
    )
    return cast(StrawberryField, field)

"""The gRPC client scenarios (tests/scenarios/grpc_api.py) against the real kube-apiserver:
the gateway's gRPC server (``start_grpc``) on a loopback port over a :class:`KubeAdapter`
whose client (``build_http_client``) trusts the session apiserver's CA, called by a real
``grpc.aio`` client with each identity's token in ``authorization`` metadata."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.core.upstream.config import UpstreamConfig
from gateway.grpc.gen.kubegateway.v1 import common_pb2, meta_pb2, pods_pb2
from tests.e2e.apiserver import KubeAPIServer
from tests.grpc.test_go_client import go_client, read_line, start_client
from tests.scenarios.backend import sample
from tests.scenarios.grpc_api import *  # noqa: F403  (the shared scenarios are collected here)
from tests.scenarios.grpc_backend import GrpcBackend, serve_backend

__all__ = ["go_client"]  # fixture


@pytest.fixture
async def grpc_backend(kube_apiserver: KubeAPIServer) -> AsyncIterator[GrpcBackend]:
    cfg = UpstreamConfig(
        server=kube_apiserver.url, source="e2e", ca_file=Path(kube_apiserver.ca_file)
    )
    async with serve_backend(
        "apiserver", cfg, dict(kube_apiserver.tokens), alice_reads_images=True
    ) as backend:
        yield backend


async def test_the_go_client_lists_and_follows_a_watch(
    go_client: Path, grpc_backend: GrpcBackend
) -> None:
    """The Go client of tests/go-client through the gateway to the real apiserver."""
    gw, pods, ns = grpc_backend, grpc_backend.stub("pods"), grpc_backend.namespace
    label = gw.unique("go")
    first, second, third = (f"{label}-{i}" for i in range(3))

    async def create(name: str) -> Any:
        body = sample("pods", name, ns)
        body["metadata"]["labels"] = {"go": label}
        return await pods.Create(
            pods_pb2.CreatePodRequest(namespace=ns, raw_json=orjson.dumps(body)),
            metadata=gw.auth(),
        )

    for name in (first, second):
        await create(name)
    proc = await start_client(
        go_client,
        "-addr", gw.target,
        "-token", gw.token("admin"),
        "-namespace", ns,
        "-selector", f"go={label}",
        "-events", "3",
    )  # fmt: skip
    try:
        listed = [await read_line(proc), await read_line(proc)]
        assert sorted(line.split()[1] for line in listed) == [first, second]
        summary = (await read_line(proc)).split()
        assert summary[:2] == ["LISTED", "2"] and summary[2].isdigit()
        # changes after the list arrive through the watch, resumed from the list's version
        await create(third)
        await pods.Patch(
            pods_pb2.PatchPodRequest(
                namespace=ns,
                name=first,
                patch_type=common_pb2.PATCH_TYPE_MERGE,
                patch=b'{"metadata":{"labels":{"touched":"yes"}}}',
            ),
            metadata=gw.auth(),
        )
        await pods.Delete(
            pods_pb2.DeletePodRequest(
                namespace=ns, name=second, options=meta_pb2.DeleteOptions(gracePeriodSeconds=0)
            ),
            metadata=gw.auth(),
        )
        events = [(await read_line(proc)).split() for _ in range(3)]
        assert [tuple(e[:3]) for e in events[:2]] == [
            ("EVENT", "ADDED", third),
            ("EVENT", "MODIFIED", first),
        ]
        # the pod is first marked for deletion (MODIFIED), then DELETED
        assert tuple(events[2][:3]) == ("EVENT", "MODIFIED", second)
        versions = [int(e[3]) for e in events]
        assert versions == sorted(versions) and versions[0] > int(summary[2])
        rest: list[str] = []
        while not (rest and rest[-1].startswith("DONE")):
            rest.append(await read_line(proc))
        assert rest[-1] == "DONE 3"
        async with asyncio.timeout(30):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    await pods.DeleteCollection(
        pods_pb2.DeleteCollectionPodsRequest(
            namespace=ns,
            label_selector=f"go={label}",
            options=meta_pb2.DeleteOptions(gracePeriodSeconds=0),
        ),
        metadata=gw.auth(),
    )


async def test_the_go_client_reports_the_apiserver_rejecting_its_token(
    go_client: Path, grpc_backend: GrpcBackend
) -> None:
    for token, expected in (("not-a-valid-token", "Unauthenticated"), ("", "Unauthenticated")):
        proc = await start_client(
            go_client, "-addr", grpc_backend.target, "-token", token, "-namespace", "team-a"
        )
        async with asyncio.timeout(30):
            out, err = await proc.communicate()
        assert (proc.returncode, out) == (1, b"")
        assert err.decode().startswith(f"ERROR {expected} "), err
    proc = await start_client(
        go_client,
        "-addr", grpc_backend.target,
        "-token", grpc_backend.token("alice"),
        "-namespace", grpc_backend.other_namespace,
    )  # fmt: skip
    async with asyncio.timeout(30):
        out, err = await proc.communicate()
    assert (proc.returncode, out) == (1, b"")
    assert err.decode().startswith("ERROR PermissionDenied "), err

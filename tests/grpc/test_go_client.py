"""A client in a second language: the Go program in tests/go-client lists pods and follows a
watch through the gateway (built from modules with the machine's Go, stubs from protos/)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.core.model.registry import LEASE, POD
from kube_gateway_demo import DemoUpstream
from tests.scenarios.backend import sample
from tests.support.grpc import ADMIN, NAMESPACE, GrpcGateway, gw, unique, upstream

__all__ = ["gw", "upstream"]  # fixtures

CLIENT_DIR = Path(__file__).resolve().parents[1] / "go-client"
BINARY = CLIENT_DIR / ".bin" / "kg-client"
STEP = 30.0


@pytest.fixture(scope="module")
def go_client() -> Path:
    """The built client (``make test`` builds it first; this reuses or rebuilds it)."""
    env = {**os.environ, "PYTHON_BIN": sys.executable}
    built = subprocess.run(
        ["bash", str(CLIENT_DIR / "build.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    assert BINARY.exists()
    return BINARY


async def start_client(binary: Path, *args: str) -> asyncio.subprocess.Process:
    """Start the Go client with ``args``, its output piped (also used by the e2e suite)."""
    return await asyncio.create_subprocess_exec(
        str(binary),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def read_line(proc: asyncio.subprocess.Process) -> str:
    """The client's next output line; fails if it ends first or takes longer than STEP."""
    assert proc.stdout is not None
    async with asyncio.timeout(STEP):
        raw = await proc.stdout.readline()
    assert raw, "the client ended early"
    return raw.decode().rstrip("\n")


def _pod(name: str, label: str) -> dict[str, object]:
    body = sample("pods", name, NAMESPACE)
    body["metadata"]["labels"] = {"go": label}  # type: ignore[index]
    body["spec"]["nodeName"] = "node-a"  # type: ignore[index]
    return body


async def test_the_go_client_lists_and_follows_a_watch(
    go_client: Path, gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    label = unique("go")
    first, second = sorted(unique("gp") for _ in range(2))
    for name in (first, second):
        await upstream.store.create(POD, _pod(name, label))
    proc = await start_client(
        go_client,
        "-addr", gw.target,
        "-token", ADMIN,
        "-namespace", NAMESPACE,
        "-selector", f"go={label}",
        "-events", "3",
    )  # fmt: skip
    try:
        listed = [await read_line(proc), await read_line(proc)]
        assert sorted(line.split()[1] for line in listed) == [first, second]
        assert all(line.startswith("POD ") for line in listed)
        summary = (await read_line(proc)).split()
        assert summary[:2] == ["LISTED", "2"] and summary[2].isdigit()
        # changes after the list arrive through the watch, resumed from the list's version
        third = unique("gp")
        await upstream.store.create(POD, _pod(third, label))
        await upstream.store.patch(
            POD, first, {"metadata": {"labels": {"touched": "yes"}}}, namespace=NAMESPACE
        )
        await upstream.store.delete(POD, second, namespace=NAMESPACE)
        events = [(await read_line(proc)).split() for _ in range(3)]
        assert [(e[0], e[1], e[2]) for e in events[:2]] == [
            ("EVENT", "ADDED", third),
            ("EVENT", "MODIFIED", first),
        ]
        # a scheduled pod is first marked for deletion (MODIFIED), then DELETED
        assert (events[2][0], events[2][1], events[2][2]) == ("EVENT", "MODIFIED", second)
        versions = [int(e[3]) for e in events]
        assert versions == sorted(versions) and versions[0] > int(summary[2])
        rest = []
        while not (rest and rest[-1].startswith("DONE")):
            rest.append(await read_line(proc))
        assert rest[-1] == "DONE 3"
        async with asyncio.timeout(STEP):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_the_go_client_reports_grpc_errors(go_client: Path, gw: GrpcGateway) -> None:
    proc = await start_client(
        go_client, "-addr", gw.target, "-token", "wrong", "-namespace", NAMESPACE
    )
    async with asyncio.timeout(STEP):
        out, err = await proc.communicate()
    assert proc.returncode == 1
    assert out == b""
    assert err.decode().startswith("ERROR Unauthenticated ")


async def test_the_go_client_lists_and_watches_through_the_generic_service(
    go_client: Path, gw: GrpcGateway, upstream: DemoUpstream
) -> None:
    label = unique("go")
    first, second = sorted(unique("gl") for _ in range(2))
    for name in (first, second):
        body = sample("leases", name, NAMESPACE)
        body["metadata"]["labels"] = {"go": label}
        await upstream.store.create(LEASE, body)
    proc = await start_client(
        go_client,
        "-addr", gw.target,
        "-token", ADMIN,
        "-resource", "coordination.k8s.io/v1/leases",
        "-namespace", NAMESPACE,
        "-selector", f"go={label}",
        "-events", "2",
    )  # fmt: skip
    try:
        listed = [(await read_line(proc)).split() for _ in range(2)]
        assert sorted(listed) == [["OBJECT", first], ["OBJECT", second]]
        summary = (await read_line(proc)).split()
        assert summary[:2] == ["LISTED", "2"]
        await upstream.store.patch(
            LEASE, first, {"spec": {"holderIdentity": "go"}}, namespace=NAMESPACE
        )
        await upstream.store.delete(LEASE, second, namespace=NAMESPACE)
        events = [(await read_line(proc)).split()[:3] for _ in range(2)]
        assert events == [["EVENT", "MODIFIED", first], ["EVENT", "DELETED", second]]
        assert await read_line(proc) == "DONE 2"
        async with asyncio.timeout(STEP):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

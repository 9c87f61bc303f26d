"""The demo upstream in a child process, seeded with realistic pods.

For tests that measure the event loop of the gateway's process: a demo upstream in the
same process serialises a list of thousands of pods in one step of that loop (its own
stall, not the gateway's).  ``python -m tests.support.demo_process PODS NAMESPACE`` serves
the demo with ``PODS`` pods of ``tests/bench/realistic.py`` (unique names, varied start
times) in ``NAMESPACE``, prints its URL, and stops when its stdin closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

from gateway.core import POD
from kube_gateway_demo import DemoUpstream
from tests.bench.realistic import pod


def realistic_pod(i: int, namespace: str) -> dict[str, Any]:
    """Pod ``i`` of ``tests/bench/realistic.py`` as a client creates it, its name made unique
    and its start time varied."""
    body = pod(i, namespace)
    meta = body["metadata"]
    meta["name"] = f"{meta['name']}-{i}"
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    body["status"]["startTime"] = f"2026-11-{i % 28 + 1:02d}T{i % 24:02d}:{i % 60:02d}:00Z"
    return body


@contextlib.asynccontextmanager
async def demo_process(pods: int, namespace: str) -> AsyncIterator[str]:
    """A demo upstream serving ``pods`` realistic pods in a child process: its URL."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.demo_process",
        str(pods),
        namespace,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        url = (await asyncio.wait_for(child.stdout.readline(), 120)).decode().strip()
        assert url.startswith("http"), url
        yield url
    finally:
        child.stdin.close()
        try:
            await asyncio.wait_for(child.wait(), 30)
        except TimeoutError:
            child.kill()
            await child.wait()


async def _serve(pods: int, namespace: str) -> None:
    async with DemoUpstream(seed=False) as demo:
        await demo.store.bulk_create(
            POD, (realistic_pod(i, namespace) for i in range(pods)), namespace=namespace
        )
        print(demo.url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1]), sys.argv[2]))

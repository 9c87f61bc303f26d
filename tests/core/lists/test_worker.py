"""A list worker process (gateway.core.lists.worker) as the pool starts it: a fresh
interpreter that imports what its jobs need and not the rest of the gateway."""

from __future__ import annotations

import os
import subprocess

import orjson

from gateway.core.lists.body import Undecoded
from gateway.core.lists.jobs import project
from gateway.core.lists.pool import ListWorkers
from gateway.core.lists.worker import COMMAND, NICENESS
from tests.core.lists.test_jobs import NAMES, _body

#: Modules a worker must not import: the core's front door pulls these in (all of the core,
#: the HTTP client), and a worker needs none of them.
NOT_IN_A_WORKER = {
    "httpx",
    "gateway.core.upstream",
    "gateway.core.fleet",
    "gateway.core.calls",
    "gateway.core.lists.large",
    "gateway.core.lists.pool",
}


def test_a_worker_imports_its_jobs_and_not_the_core() -> None:
    executable, *rest = COMMAND
    # Its input closed at once: the worker sees EOF and ends, as when the gateway stops it.
    done = subprocess.run(
        [executable, "-X", "importtime", *rest],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.decode().splitlines()
        if line.startswith("import time:")
    }
    assert {"gateway.core.lists.worker", "gateway.core.lists.jobs", "msgspec"} <= imported
    assert not imported & NOT_IN_A_WORKER, sorted(imported & NOT_IN_A_WORKER)
    assert len(imported) < 260, len(imported)  # ~200; through the front door ~400


async def test_a_worker_runs_at_a_lower_priority_than_the_gateway() -> None:
    workers = ListWorkers(1)
    try:
        (pid,) = await workers.ready()
        done = await workers.run(Undecoded(_body(3)), project(NAMES))  # past its start
        assert done is not None and orjson.loads(done)["items"][2] == {"name": "n2"}
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(mine + NICENESS, 19)
    finally:
        await workers.aclose()

"""The pool of list workers (gateway.core.lists.pool): what the gateway does when workers
cannot start, keep dying, or a caller goes mid-list; how many ``--list-workers`` means."""

from __future__ import annotations

import asyncio
import logging
import sys

import orjson
import pytest

from gateway.core.lists.body import Undecoded
from gateway.core.lists.jobs import project
from gateway.core.lists.large import LargeLists
from gateway.core.lists.pool import GIVE_UP, ListWorkers, workers_for
from tests.core.lists.test_jobs import NAMES, _body


async def test_workers_that_keep_dying_are_given_up_once_and_lists_still_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    died: list[str] = []
    workers = ListWorkers(1, died.append, command=(sys.executable, "-c", "pass"))
    lists = LargeLists(workers)
    try:
        with caplog.at_level(logging.WARNING, logger="gateway"):
            for _ in range(GIVE_UP):
                assert await workers.run(Undecoded(_body(600)), project(NAMES)) is None
            assert not workers.enabled
            assert await workers.run(Undecoded(_body(600)), project(NAMES)) is None
        assert died == ["died"] * GIVE_UP
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert errors == [
            f"{GIVE_UP} list workers in a row ended without answering: large lists are "
            "decoded by the gateway itself from now on"
        ]
        # The caller decodes it itself: the same answer as without workers.
        assert len((await lists.decoded(Undecoded(_body(600))))["items"]) == 600
    finally:
        await workers.aclose()


async def test_a_worker_that_cannot_start_turns_workers_off(
    caplog: pytest.LogCaptureFixture, tmp_path: object
) -> None:
    workers = ListWorkers(2, command=("/nonexistent/kube-gateway-python",))
    with caplog.at_level(logging.ERROR, logger="gateway"):
        assert await workers.run(Undecoded(_body(600)), project(NAMES)) is None
    assert not workers.enabled
    assert "a list worker cannot start" in caplog.text
    await workers.aclose()


async def test_a_caller_gone_mid_list_costs_that_worker_only() -> None:
    workers = ListWorkers(1)
    try:
        (pid,) = await workers.ready()
        (worker,) = workers._idle
        running = asyncio.create_task(workers.run(Undecoded(_body(50_000)), project(NAMES)))
        await asyncio.sleep(0)  # one step: the list takes the idle worker, then copies
        assert not workers._idle
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert await worker.proc.wait() != 0  # killed: its pipes were mid-frame
        done = await workers.run(Undecoded(_body(3)), project(NAMES))
        assert done is not None and orjson.loads(done)["items"][2] == {"name": "n2"}
        assert [w.proc.pid for w in workers._idle] != [pid]  # a new worker answered
    finally:
        await workers.aclose()


def test_a_number_is_the_count() -> None:
    assert workers_for("0") == 0
    assert workers_for("3") == 3
    assert 1 <= workers_for("auto") <= 4

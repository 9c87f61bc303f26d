"""List workers (gateway.core.listwork) on their own: what a worker answers, and what the
gateway does when workers cannot start, keep dying, or a caller goes mid-list."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import orjson
import pytest

from gateway.core.largelist import LargeLists
from gateway.core.listwork import (
    GIVE_UP,
    NOT_DONE,
    OVER_CAP,
    ListWorkers,
    Undecoded,
    cgroup_cpus,
    project,
    split_wire,
    wire,
    work,
    workers_for,
)
from gateway.core.projectcode import LEAF

_NAME = ("name", LEAF, "name", "type({v}) is not str", ("leaf", "String"), False)
#: ``{items: [{name}]}`` projected: every item's name.
NAMES = (
    "object",
    "List",
    (
        (
            "items",
            LEAF,
            "items",
            None,
            ("list", False, ("object", "Item", (_NAME,))),
            False,
        ),
    ),
)  # fmt: skip


def _body(count: int, **more: object) -> bytes:
    items = [{"name": f"n{i}", "big": "x" * 100} for i in range(count)]
    return orjson.dumps(
        {"kind": "List", "metadata": {"resourceVersion": "7", **more}, "items": items}
    )


def test_a_worker_projects_writes_or_gives_back() -> None:
    assert orjson.loads(work(_body(3), project(NAMES), 0)) == {  # type: ignore[arg-type]
        "items": [{"name": "n0"}, {"name": "n1"}, {"name": "n2"}]
    }
    assert work(b"{not json", project(NAMES), 0) == NOT_DONE
    assert work(b"[1, 2]", project(NAMES), 0) == NOT_DONE
    # A name that is not a string would need the scalar's serialiser: given back.
    odd = orjson.dumps({"items": [{"name": 5}]})
    assert work(odd, project(NAMES), 0) == NOT_DONE
    # More items than the cap, or a promise of more: refused.
    assert work(_body(3), project(NAMES), 2) == OVER_CAP
    assert work(_body(1, **{"continue": "next"}), project(NAMES), 2) == OVER_CAP
    assert work(_body(2), project(NAMES), 2) != OVER_CAP
    # A wire job: everything but the items as JSON, then each item's bytes.
    done = work(_body(2), wire(b"\x12", b"\x0a", as_struct=False), 0)
    assert isinstance(done, bytes)
    rest, items = split_wire(done)
    assert rest == {"kind": "List", "metadata": {"resourceVersion": "7"}}
    first = orjson.dumps({"name": "n0", "big": "x" * 100})
    one = b"\x0a" + bytes([len(first)]) + first  # ResourceObject{json}
    assert items.startswith(b"\x12" + bytes([len(one)]) + one)  # ResourceList.items


async def test_workers_that_keep_dying_are_given_up_once_and_lists_still_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    died: list[str] = []
    workers = ListWorkers(1, died.append, command=(sys.executable, "-c", "pass"))
    lists = LargeLists(workers)
    try:
        with caplog.at_level(logging.WARNING, logger="gateway"):
            for _ in range(GIVE_UP):
                assert await workers.run(Undecoded(_body(600), lists), project(NAMES)) is None
            assert not workers.enabled
            assert await workers.run(Undecoded(_body(600), lists), project(NAMES)) is None
        assert died == ["died"] * GIVE_UP
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert errors == [
            f"{GIVE_UP} list workers in a row ended without answering: large lists are "
            "decoded by the gateway itself from now on"
        ]
        # The caller decodes it itself: the same answer as without workers.
        assert len((await Undecoded(_body(600), lists).decoded())["items"]) == 600
    finally:
        await workers.aclose()


async def test_a_worker_that_cannot_start_turns_workers_off(
    caplog: pytest.LogCaptureFixture, tmp_path: object
) -> None:
    workers = ListWorkers(2, command=("/nonexistent/kube-gateway-python",))
    lists = LargeLists(workers)
    with caplog.at_level(logging.ERROR, logger="gateway"):
        assert await workers.run(Undecoded(_body(600), lists), project(NAMES)) is None
    assert not workers.enabled
    assert "a list worker cannot start" in caplog.text
    await workers.aclose()


async def test_a_caller_gone_mid_list_costs_that_worker_only() -> None:
    workers = ListWorkers(1)
    lists = LargeLists(workers)
    try:
        (pid,) = await workers.ready()
        (worker,) = workers._idle
        running = asyncio.create_task(workers.run(Undecoded(_body(50_000), lists), project(NAMES)))
        await asyncio.sleep(0)  # one step: the list takes the idle worker, then copies
        assert not workers._idle
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert await worker.proc.wait() != 0  # killed: its pipes were mid-frame
        done = await workers.run(Undecoded(_body(3), lists), project(NAMES))
        assert done is not None and orjson.loads(done)["items"][2] == {"name": "n2"}
        assert [w.proc.pid for w in workers._idle] != [pid]  # a new worker answered
    finally:
        await workers.aclose()


@pytest.mark.parametrize(
    ("files", "cpus"),
    [
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "200000 100000\n"}, 2),
        ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs: rounded up
        ({"cpu.max": "50000 100000\n"}, 1),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),
        ({}, None),
    ],
    ids=["v2-none", "v2-2", "v2-1.5", "v2-0.5", "v1-none", "v1-3", "no-cgroup"],
)
def test_auto_counts_the_cgroup_quota(
    files: dict[str, str], cpus: int | None, tmp_path: Path
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_cpus(str(tmp_path)) == cpus


def test_a_number_is_the_count() -> None:
    assert workers_for("0") == 0
    assert workers_for("3") == 3
    assert 1 <= workers_for("auto") <= 4

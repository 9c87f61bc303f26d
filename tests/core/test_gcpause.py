"""The cyclic-GC pause around large bodies: held exactly as long as promised, and never
turned on by a pause that did not turn it off."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from gateway.core import gcpause


@pytest.fixture(autouse=True)
def _collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_a_block_holds_the_collector_off_until_it_ends() -> None:
    with gcpause.paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError, match="boom"), gcpause.paused(True):
        raise ValueError("boom")
    assert gc.isenabled()


def test_a_block_for_small_work_leaves_the_collector_alone() -> None:
    with gcpause.paused(False):
        assert gc.isenabled()
    assert gc.isenabled()


def test_a_pause_never_turns_on_a_collector_someone_else_turned_off() -> None:
    gc.disable()
    with gcpause.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_inner_pause_does_not_end_an_outer_one() -> None:
    with gcpause.paused():
        with gcpause.paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


async def _next_turn() -> None:
    """Wait for a callback queued now: every callback queued before it has run."""
    loop = asyncio.get_running_loop()
    turned = loop.create_future()
    loop.call_soon(turned.set_result, None)
    await turned


async def test_a_step_pause_lasts_until_the_loop_turns() -> None:
    seen: list[bool] = []
    asyncio.get_running_loop().call_soon(lambda: seen.append(gc.isenabled()))
    gcpause.pause_until_next_turn()
    assert not gc.isenabled()
    await _next_turn()
    assert seen == [False]  # queued before the pause's callback: ran with the GC held
    assert gc.isenabled()


async def test_a_step_pause_leaves_a_collector_that_is_off_alone() -> None:
    gc.disable()
    gcpause.pause_until_next_turn()
    await _next_turn()
    assert not gc.isenabled()


def test_a_step_pause_needs_a_running_loop() -> None:
    gcpause.pause_until_next_turn()
    assert gc.isenabled()


async def test_a_hold_begun_during_a_step_pause_keeps_the_collector_off_to_its_end() -> None:
    gcpause.pause_until_next_turn()
    hold = gcpause.held()
    hold.__enter__()  # finds the collector off: the step pause's end must not turn it on
    await _next_turn()
    assert not gc.isenabled()
    await asyncio.sleep(0)
    assert not gc.isenabled()
    hold.__exit__(None, None, None)
    assert gc.isenabled()


async def test_overlapping_holds_keep_the_collector_off_until_the_last_one_ends() -> None:
    first, second = gcpause.held(), gcpause.held()
    first.__enter__()
    await asyncio.sleep(0)
    second.__enter__()
    assert not gc.isenabled()
    first.__exit__(None, None, None)  # the first ends while the second still holds
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()
    with gcpause.held(False):
        assert gc.isenabled()


async def test_a_hold_never_turns_on_a_collector_someone_else_turned_off() -> None:
    gc.disable()
    with gcpause.held():
        assert not gc.isenabled()
    assert not gc.isenabled()

"""The process's one count of collector holds: overlapping holds of different kinds (a
list's decode on the event loop, a schema build in a thread, a view's fill) keep the
collector off until the last one ends, and none turns on a collector it did not turn off."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from gateway.core.lists.large import LargeLists, paused
from gateway.core.process.collector import HOLD, CollectorHold
from gateway.graphql.engine.collector import SchemaCollector


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        assert HOLD.holders == 0
        (gc.enable if was else gc.disable)()


def test_overlapping_holds_of_every_kind_keep_the_collector_off_until_the_last(
    collector_on: None,
) -> None:
    lists = LargeLists()
    schemas = SchemaCollector()
    scope = lists.scope()
    scope.hold()  # a list's decode starts
    assert not gc.isenabled()
    started, finish = threading.Event(), threading.Event()

    def build() -> None:
        with schemas.building():
            started.set()
            finish.wait(10)

    thread = threading.Thread(target=build)
    thread.start()
    assert started.wait(10)
    scope.end()  # the list ends while the build runs: the collector stays off
    assert not gc.isenabled()
    with HOLD.held():  # a view's fill overlaps the build
        with paused():
            assert not gc.isenabled()
        finish.set()
        thread.join(10)
        assert not gc.isenabled()  # the build ended while the fill holds
    assert gc.isenabled()  # the last hold turned it back on


def test_a_hold_never_turns_on_a_collector_it_did_not_turn_off(collector_on: None) -> None:
    hold = CollectorHold()
    gc.disable()  # an embedding application's choice
    with hold.held(), hold.held():
        pass
    assert not gc.isenabled()
    gc.enable()
    with hold.held():
        assert not gc.isenabled()
        gc.disable()
    assert gc.isenabled()  # it turned it off first: it turns it back on


def test_settle_freezes_only_where_the_process_is_the_gateways() -> None:
    hold = CollectorHold()
    frozen = gc.get_freeze_count()
    hold.settle()
    assert gc.get_freeze_count() == frozen and hold.settled == 0
    hold.freeze = True
    kept = [[i] for i in range(1000)]  # a fill's survivors
    try:
        hold.settle()
        assert hold.settled == 1 and gc.get_freeze_count() >= frozen + len(kept)
    finally:
        gc.unfreeze()

"""The list tests' shared fixture."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.core.process.collector import HOLD


@pytest.fixture(autouse=True)
def _collector_as_it_was() -> Iterator[None]:
    """Some tests run a list worker's loop in this process (``worker.serve`` over pipes of
    bytes); it turns the cyclic collector off for good, as a worker's own process should.
    Put it back as it was, so no later test runs with it off; and no test may leave a hold
    of the gateway's own (:data:`HOLD`) open."""
    enabled = gc.isenabled()
    yield
    if enabled and not gc.isenabled() and HOLD.holders == 0:
        gc.enable()
    assert HOLD.holders == 0, "a hold of the cyclic collector was left open"

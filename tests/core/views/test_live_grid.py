"""The grid a busy live view evaluates on (gateway/core/views/live.py): the phases of one
cluster's live views spread over the interval, and :func:`next_slot` keeps a view on its
grid, at most once per interval, and brings one that evaluated off it (after a quiet
interval, or late) back in a few intervals, each at most a quarter of one later.  The
live views themselves are tested over real WebSocket clients in
tests/graphql/test_live_views.py."""

from __future__ import annotations

import itertools
import random

import pytest

from gateway.core.views.live import CATCH_UP, SLACK, next_slot, phase_of

INTERVAL = 0.25


@pytest.mark.parametrize("n", [2, 3, 10, 50, 199])
def test_the_phases_of_n_views_are_spread_over_the_interval(n: int) -> None:
    phases = sorted(phase_of(i, INTERVAL) for i in range(n))
    assert all(0 <= p < INTERVAL for p in phases)
    gaps = [b - a for a, b in itertools.pairwise(phases)]
    gaps.append(INTERVAL - phases[-1] + phases[0])
    # the golden-ratio sequence: no two closer than 0.4 of an even spread
    assert min(gaps) >= 0.4 * INTERVAL / n


def test_a_view_on_its_grid_stays_on_it() -> None:
    phase = phase_of(3, INTERVAL)
    at = phase + 40 * INTERVAL
    for k in range(1, 20):
        at = next_slot(at + 0.0005 * (k % 3), phase, INTERVAL)  # woken a little late
        assert at == pytest.approx(phase + (40 + k) * INTERVAL)


@pytest.mark.parametrize("seed", range(20))
def test_a_view_off_its_grid_gets_back_in_a_few_intervals(seed: int) -> None:
    rnd = random.Random(seed)
    phase = rnd.uniform(0, INTERVAL)
    at = 1000 + rnd.uniform(0, INTERVAL)  # a change after a quiet interval: at once
    steps = 0
    while abs((at - phase + INTERVAL / 2) % INTERVAL - INTERVAL / 2) > 1e-9:
        last, at = at, next_slot(at, phase, INTERVAL)
        steps += 1
        assert (1 - SLACK) * INTERVAL - 1e-9 <= at - last <= (1 + CATCH_UP) * INTERVAL + 1e-9
        assert steps <= 5

"""The CPUs this process may use (gateway.core.process.cpus): the cgroup's CPU quota, v1 and
v2."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.core.process.cpus import cgroup_cpus, usable_cpus


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


def test_the_usable_cpus_are_at_least_one() -> None:
    assert usable_cpus() >= 1

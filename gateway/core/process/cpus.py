"""The CPUs this process may use: its CPU affinity, and its cgroup's CPU quota (a pod
limited to 2 CPUs on a 64-core node may use 2)."""

from __future__ import annotations

import os

__all__ = ["cgroup_cpus", "usable_cpus"]


def usable_cpus() -> int:
    """The CPUs this process may use: those of its CPU affinity (all, where there is
    none), at most its cgroup's quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_cpus()
    return cpus if quota is None else min(cpus, quota)


def cgroup_cpus(root: str = "/sys/fs/cgroup") -> int | None:
    """The CPUs the process's cgroup may use, rounded up (``None``: no quota, or no
    cgroup to read): cgroup v2's ``cpu.max``, else v1's ``cpu.cfs_quota_us``."""
    for quota_file, period_file in (
        ("cpu.max", None),
        ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us"),
    ):
        try:
            with open(os.path.join(root, quota_file)) as f:
                fields = f.read().split()
            if period_file is not None:
                with open(os.path.join(root, period_file)) as f:
                    fields.append(f.read().strip())
        except OSError:
            continue
        if len(fields) < 2 or fields[0] in ("max", "-1"):
            return None
        try:
            quota, period = int(fields[0]), int(fields[1])
        except ValueError:
            return None
        if quota <= 0 or period <= 0:
            return None
        return max(1, -(-quota // period))
    return None

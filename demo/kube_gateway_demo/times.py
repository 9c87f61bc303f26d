"""Timestamp formats of the Kubernetes API."""

from __future__ import annotations

import calendar
import time


def rfc3339(ts: float) -> str:
    """``metav1.Time`` serialisation: seconds precision, UTC."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def micro_time(ts: float) -> str:
    """``metav1.MicroTime``: RFC 3339 with microseconds."""
    return rfc3339(ts)[:-1] + f".{int((ts % 1) * 1_000_000):06d}Z"


def parse_rfc3339(value: str) -> float:
    """Seconds since the epoch of a ``metav1.Time`` (``2006-01-02T15:04:05Z``)."""
    return float(calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ")))

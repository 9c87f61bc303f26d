"""Container logs as a kubelet would serve them: lines with timestamps, the previous
instance's lines, and followers that are woken as lines are written."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

_UTC: Final = dt.UTC


def format_timestamp(ts: float) -> str:
    """The kubelet's log timestamp: RFC 3339 with exactly nine fractional digits."""
    seconds = int(ts)
    nanos = round((ts - seconds) * 1e9)
    if nanos >= 1_000_000_000:
        seconds, nanos = seconds + 1, nanos - 1_000_000_000
    base = dt.datetime.fromtimestamp(seconds, _UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{nanos:09d}Z"


@dataclass(slots=True)
class LogLine:
    """One line of output (without its newline) and when it was written."""

    ts: float
    data: bytes

    def render(self, timestamps: bool) -> bytes:
        """The bytes served for this line."""
        if timestamps:
            return format_timestamp(self.ts).encode() + b" " + self.data + b"\n"
        return self.data + b"\n"


@dataclass(slots=True)
class ContainerLog:
    """The log of one container of one pod instance."""

    lines: list[LogLine] = field(default_factory=list)
    previous: list[LogLine] | None = None
    ended: bool = False
    followers: set[asyncio.Event] = field(default_factory=set)

    def wake(self) -> None:
        for ev in self.followers:
            ev.set()


class LogStore:
    """Logs by pod UID and container name."""

    def __init__(self) -> None:
        self._pods: dict[str, dict[str, ContainerLog]] = {}
        self.closed = False

    def get(self, uid: str, name: str) -> ContainerLog | None:
        """The log of ``name`` in pod ``uid``, if it was ever written."""
        return self._pods.get(uid, {}).get(name)

    def container(self, uid: str, name: str) -> ContainerLog:
        """The log of ``name`` in pod ``uid`` (created empty on first use)."""
        return self._pods.setdefault(uid, {}).setdefault(name, ContainerLog())

    def append(self, uid: str, name: str, lines: Iterable[str | bytes], ts: float) -> None:
        """Write lines (a line written after the container ended starts a new instance)."""
        log = self.container(uid, name)
        for line in lines:
            data = line.encode() if isinstance(line, str) else line
            for part in data.split(b"\n"):
                log.lines.append(LogLine(ts, part))
        log.wake()

    def end(self, uid: str, name: str | None = None) -> None:
        """Mark one container (or, with ``name=None``, every container) as exited."""
        for cname, log in self._pods.get(uid, {}).items():
            if name is None or cname == name:
                log.ended = True
                log.wake()

    def restart(self, uid: str, name: str) -> None:
        """Start a new container instance: the current lines become the previous ones."""
        log = self.container(uid, name)
        log.previous = log.lines
        log.lines = []
        log.ended = False
        log.wake()

    def forget(self, uid: str) -> None:
        """The pod is gone: end every follower, drop the logs."""
        for log in self._pods.pop(uid, {}).values():
            log.ended = True
            log.wake()

    def close(self) -> None:
        """Server shutdown: wake every follower so it can finish."""
        self.closed = True
        for containers in self._pods.values():
            for log in containers.values():
                log.wake()

"""Latency one request at a time, to the nanosecond, in interleaved rounds: the method of the
p50 rows at concurrency 1 of ``bench_rps`` and ``bench_get`` (issue 30), shared by both.

Each request's own latency is kept at the load client's full precision, and a run's p50
and p99 are computed here from all of them, the same way for a direct row and a gateway
row:

* HTTP: ``vegeta`` (``tests/go-client/build.sh load`` builds it, pinned there), one worker
  at a time (``-rate 0 -max-workers 1``, HTTP/1.1 keep-alive), each result's latency in ns
  (``vegeta encode -to json``).  ``hey`` prints times in steps of 0.1 ms, its ``-o csv``
  too (``%4.4f`` seconds), which a goal of +0.5 ms cannot be judged on.  vegeta's clock
  starts before it reads the request's target (one JSON line of a file, read lazily so that
  it stops after ``n``): the direct and the gateway rows alike;
* gRPC: ``ghz -c 1`` with ``-O json``, whose ``details`` give each call's latency in ns.

Each run sends one request more than it keeps and drops the first: the client's connection
(TCP, TLS) is set up in it.  Rows are measured in rounds, the direct and the gateway runs in
turns within each round, so a slow minute of the shared machine falls on both: a row's p50 is
the median of its rounds' p50s, and the latency a gateway row adds is the median of the
rounds' differences (its p50 less the same round's direct p50), not the difference of two
medians.
"""

from __future__ import annotations

import datetime
import itertools
import json
import math
import statistics
import subprocess
import tempfile
from base64 import b64encode
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values``, interpolated linearly between the two nearest
    ranks (numpy's default, ``statistics.quantiles``' "inclusive"): the p50 of an even count
    is the mean of the middle two."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


@dataclass(frozen=True)
class Timed:
    """One run one request at a time: each request's latency (ms, full precision) and the
    run's requests per second (requests over the wall time from the first's start to the
    last's end)."""

    ms: tuple[float, ...]
    rps: float

    @property
    def p50(self) -> float:
        return percentile(self.ms, 0.5)

    @property
    def p99(self) -> float:
        return percentile(self.ms, 0.99)


@dataclass(frozen=True)
class Rounds:
    """A row's runs at concurrency 1, one per round, and what is said of them."""

    runs: tuple[Timed, ...]

    @property
    def p50(self) -> float:
        """The median of the rounds' p50s (ms)."""
        return statistics.median(r.p50 for r in self.runs)

    @property
    def p99(self) -> float:
        """The median of the rounds' p99s (ms)."""
        return statistics.median(r.p99 for r in self.runs)

    @property
    def rps(self) -> float:
        return statistics.median(r.rps for r in self.runs)

    def added(self, base: Rounds) -> tuple[float, float, float]:
        """The median of the rounds' differences of p50 to ``base``'s (ms, the latency this
        row adds to it), and their least and greatest: round i of each was measured in turn
        with the other's."""
        if len(self.runs) != len(base.runs) or not self.runs:
            raise ValueError(f"{len(self.runs)} rounds against {len(base.runs)}")
        differences = [r.p50 - b.p50 for r, b in zip(self.runs, base.runs, strict=True)]
        return statistics.median(differences), min(differences), max(differences)


def added_note(added: tuple[float, float, float], rounds: int) -> str:
    """How a row's added latency was judged, for its note: the median of ``rounds``
    differences, with their spread."""
    median, low, high = added
    return (
        f"added {median:+.3f} ms, the median of {rounds} interleaved rounds' p50 differences "
        f"({low:+.3f} to {high:+.3f})"
    )


def vegeta(
    binary: Path,
    url: str,
    n: int,
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> Timed:
    """``n`` requests one at a time with ``vegeta`` (GET, or POST of ``body``), after one
    more that opens the connection (dropped); every answer must be a 200."""
    target: dict[str, object] = {
        "method": "GET" if body is None else "POST",
        "url": url,
        "header": {k: [v] for k, v in (headers or {}).items()},
    }
    if body is not None:
        target["body"] = b64encode(body).decode()
    with tempfile.TemporaryDirectory(prefix="kg-vegeta-") as d:
        targets, results = Path(d) / "targets.json", Path(d) / "results.bin"
        # one target per request, read lazily: vegeta stops when they run out (the token
        # stays in a file, out of the command line)
        targets.write_text((json.dumps(target) + "\n") * (n + 1))
        argv = [str(binary), "attack", "-format", "json", "-lazy", "-targets", str(targets)]
        argv += ["-rate", "0", "-workers", "1", "-max-workers", "1", "-max-body", "0"]
        argv += ["-http2=false", "-insecure", "-timeout", "30s", "-output", str(results)]
        attack = subprocess.run(argv, check=False, capture_output=True, text=True)
        if attack.returncode != 0:
            raise RuntimeError(f"vegeta attack {url} failed: {attack.stderr[-2000:]}")
        encoded = subprocess.run(
            [str(binary), "encode", "-to", "json", str(results)],
            check=True,
            capture_output=True,
            text=True,
        )
    return vegeta_results(encoded.stdout, n)


def vegeta_results(text: str, n: int) -> Timed:
    """The :class:`Timed` of ``vegeta encode -to json``'s lines: the first request (the
    connection's) and vegeta's closing "no targets to attack" dropped, every other a 200."""
    results = [json.loads(line) for line in text.splitlines() if line.strip()]
    results = [r for r in results if r.get("error") != "no targets to attack"]
    results.sort(key=lambda r: r["seq"])
    bad = [(r["code"], r["error"]) for r in results if r["code"] != 200 or r["error"]]
    if bad or len(results) != n + 1:
        raise RuntimeError(f"vegeta: {len(results)} results of {n + 1}, not 200: {bad[:5]}")
    kept = results[1:]
    start = _ns(kept[0]["timestamp"])
    end = _ns(kept[-1]["timestamp"]) + kept[-1]["latency"]
    return Timed(tuple(r["latency"] / 1e6 for r in kept), len(kept) / ((end - start) / 1e9))


def ghz_details(report: Mapping[str, object], n: int) -> Timed:
    """The :class:`Timed` of a ``ghz -c 1 -O json`` report of ``n + 1`` calls: each call's
    latency from its ``details``, the first call (the connection's) dropped."""
    details = sorted(report["details"], key=lambda d: _ns(d["timestamp"]))  # type: ignore[arg-type,index]
    if len(details) != n + 1:
        raise RuntimeError(f"ghz: {len(details)} details of {n + 1} calls")
    kept = details[1:]
    start = _ns(kept[0]["timestamp"])
    end = _ns(kept[-1]["timestamp"]) + kept[-1]["latency"]
    return Timed(tuple(d["latency"] / 1e6 for d in kept), len(kept) / ((end - start) / 1e9))


def _ns(timestamp: str) -> int:
    """Nanoseconds since the epoch of an RFC 3339 time with up to 9 digits of fraction (Go's
    ``time.Time`` in JSON; Python's datetime keeps 6).  The offset is ignored: both
    clients write the times of one clock, and only differences are taken."""
    seconds = datetime.datetime.fromisoformat(timestamp[:19]).replace(tzinfo=datetime.UTC)
    fraction = timestamp[20:] if timestamp[19:20] == "." else ""
    digits = "".join(itertools.takewhile(str.isdigit, fraction))[:9]
    return int(seconds.timestamp()) * 1_000_000_000 + int(digits.ljust(9, "0"))

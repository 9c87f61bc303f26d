"""A compact job's answer made as its list body arrives (gateway.core.lists.compacting.
Streaming, and a list worker fed a body with its job named: gateway.core.lists.worker): the
very parts, byte for byte, that the job makes of the whole body (written_parts of read_list),
whatever the cuts of the body as it comes, or none at all (the job then done on the whole
body, as before) where the body is not cut as an apiserver writes a list; through a worker,
the very frames and memory file an unfed body gets; through the pool, the same answer as a
body handed over whole, a body over the cap refused, and a worker killed or a caller gone in
the middle costing no answer."""

from __future__ import annotations

import asyncio
import gzip
import io
import os
import pickle
import random
import signal
from typing import Any

import orjson
import pytest

from gateway.core.lists.body import Undecoded
from gateway.core.lists.compacting import (
    ColumnSpec,
    Sliced,
    Streaming,
    compact,
    part_bounds,
    read_list,
    written,
)
from gateway.core.lists.pool import Feed, ListWorkers
from gateway.core.lists.worker import (
    ANSWER,
    CHUNK,
    DROP,
    FED,
    HELD,
    REQUEST,
    STATUS_NOT_DONE,
    STATUS_OVER_CAP,
    STATUS_PART,
    STATUS_PARTS_END,
    part_after,
    serve,
)
from tests.core.lists.test_compacting import COLUMNS, _items
from tests.core.lists.test_pool_feed import _run
from tests.core.lists.test_pool_parts import _taken

JOB = compact("v1", "Pod", COLUMNS)
#: Small parts and steps, so that a small list is cut in many places.
PART, TAIL, STEP = 4, 1, 64


def _pod(i: int, **more: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p{i}", "namespace": "ns", "labels": {"app": f"a{i % 3}"}},
        "spec": {"replicas": i % 9, "containers": [{"name": "a"}, {"name": "b"}]},
        "status": {"startTime": f"2026-11-{i % 28 + 1:02d}T00:00:00Z"},
        **more,
    }


def _list(items: list[Any], **rest: Any) -> bytes:
    return orjson.dumps(
        {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}, **rest}
        | {"items": items}
    )


#: Items as a list holds them (the compacting tests' odd ones, integers past 64 bits
#: aside, which orjson cannot write) among ordinary pods, and items that look like a place
#: to cut the list where there is none: a nested list of objects with ``metadata``, and a
#: string holding ``},{"metadata":``.
ODD = [i for i in _items() if "big" not in str(i)]
TRAPS = [
    _pod(1000, spec={"claims": [{"metadata": {"name": "x"}}, {"metadata": {"name": "y"}}]}),
    _pod(1001, note='a"},{"metadata":{"name":"fake"}},{"metadata":'),
    _pod(1002, note='\u00e9\u4e2d \U0001f600 },{"metadata":'),
]


def _body(n: int = 40) -> bytes:
    items: list[Any] = [_pod(i) for i in range(n)]
    items[5:5] = ODD
    items[20:20] = TRAPS
    return _list(items)


def _want(body: bytes, job: tuple[Any, ...] = JOB) -> list[bytes] | None:
    """The parts the job makes of the whole body (its function in this process)."""
    value = read_list(body)
    if value is None:
        return None
    items = value["items"]
    rest = {k: v for k, v in value.items() if k != "items"}
    return [
        b"".join(written({**rest, "items": items[s:e]}, *job[1:]))
        for s, e in part_bounds(len(items), PART, TAIL)
    ]


def _streamed(
    body: bytes, cuts: list[int], job: tuple[Any, ...] = JOB, step: int = STEP
) -> list[bytes] | None:
    """The parts made of ``body`` come in pieces cut at ``cuts`` (None: given up)."""
    streaming = Streaming(job, PART, TAIL, step)
    grown = bytearray()
    parts: list[bytes] = []
    for start, end in zip([0, *cuts], [*cuts, len(body)], strict=True):
        grown += body[start:end]
        parts += map(b"".join, streaming.step(grown))
    last = streaming.finish(grown)
    return None if last is None else parts + list(map(b"".join, last))


def _cuts(body: bytes, seed: int, pieces: int = 30) -> list[int]:
    return sorted(random.Random(seed).sample(range(1, len(body)), min(pieces, len(body) - 1)))


def test_the_parts_are_those_of_the_whole_body_however_it_comes() -> None:
    body = _body()
    want = _want(body)
    assert want is not None and len(want) > 10
    assert _streamed(body, []) == want  # in one piece
    assert _streamed(body, list(range(1, len(body)))) == want  # a byte at a time
    for seed in range(40):
        assert _streamed(body, _cuts(body, seed)) == want, seed
    for step in (1, 7, 500, 1 << 20):  # steps of every size: a step at each piece, or none
        assert _streamed(body, _cuts(body, 0), step=step) == want


def test_parts_are_made_as_the_body_comes_not_only_at_its_end() -> None:
    body = _body(400)
    streaming = Streaming(JOB, PART, TAIL, STEP)
    made_before_the_end = 0
    for at in range(0, len(body), 997):
        made_before_the_end += len(streaming.step(bytearray(body[: at + 997])))
    last = streaming.finish(bytearray(body))
    want = _want(body)
    assert last is not None and want is not None
    # all but the last PART items' parts (and a step's worth) before the body's end
    assert made_before_the_end >= len(want) - PART // TAIL - 3


@pytest.mark.parametrize(
    ("items", "columns"),
    [
        ([_pod(0)], COLUMNS),  # one object
        ([_pod(i) for i in range(3)], ()),  # no column asked
        ([{"metadata": {"name": "only"}}, {"metadata": {"name": "two"}}], COLUMNS),  # none set
        ([_pod(i, note="\u00fc" * 50) for i in range(9)], COLUMNS[:1]),  # unicode
        ([_pod(i, blob="x" * 300_000) for i in range(3)], COLUMNS),  # objects past a step
        ([{"kind": "Pod", "apiVersion": "v1", **_pod(i)} for i in range(9)], COLUMNS),
    ],
)
def test_edges_are_made_as_the_whole_body_makes_them(
    items: list[Any], columns: tuple[ColumnSpec, ...]
) -> None:
    job = compact("v1", "Pod", columns)
    body = _list(items)
    want = _want(body, job)
    assert want is not None
    for seed in range(5):
        assert _streamed(body, _cuts(body, seed, 8), job) == want


@pytest.mark.parametrize(
    "body",
    [
        _list([]),  # no item: done whole
        orjson.dumps({"kind": "PodList", "items": [_pod(i) for i in range(9)], "metadata": {}}),
        orjson.dumps({"items": [_pod(0)], "kind": "PodList"}),  # items not last
        orjson.dumps(
            {"kind": "PodList", "items": [_pod(i) for i in range(9)]}, option=orjson.OPT_INDENT_2
        ),
        _list([_pod(i) for i in range(9)])[:-2] + b'],"more":1}',  # a field after the items
        _list([_pod(i) for i in range(9)])[:-2] + b",]}",  # a trailing comma: not JSON
        _list([_pod(i) for i in range(9)]).replace(b"p3", b"\xff3"),  # not UTF-8
        _list([_pod(i) for i in range(9)])[:-1],  # cut short
        _list([1, 2, 3]),  # not objects
        _list([_pod(0), 2, _pod(1)]),
        b'{"kind":"PodList","items":null}',
        b"[1,2]",
    ],
)
def test_a_body_not_written_as_an_apiserver_writes_a_list_is_given_up(body: bytes) -> None:
    """(The job is then done on the whole body, as before: its answer whatever it was.)"""
    for cuts in ([], _cuts(body, 1, 5)):
        assert _streamed(body, cuts) is None


@pytest.mark.parametrize(
    "body",
    [
        _list([]),
        _list([_pod(i) for i in range(9)])[:-2] + b'],"more":1}',
        _list([_pod(i) for i in range(9)]).replace(b"p3", b"\xff3"),
        _list([_pod(0), 2, _pod(1)]),
        b'{"kind":"PodList","items":null}',
        b"[1,2]",
    ],
)
def test_a_body_given_up_is_answered_by_a_worker_as_before(body: bytes) -> None:
    for gzipped in (True, False):
        fed, unfed = (_fed_request(body, job, 100, gzipped) for job in (JOB, None))
        assert _served(fed + _held(JOB))[:2] == _served(unfed + _held(JOB))[:2]


def test_a_list_with_blank_after_its_end_is_made_as_usual() -> None:
    body = _list([_pod(i) for i in range(30)])
    assert _streamed(body + b"\n", _cuts(body, 3)) == _want(body)  # (Go's encoder's newline)


# -- through a worker (its loop, in this process, over pipes of bytes) -------------------


def _fed_request(body: bytes, job: tuple[Any, ...] | None, piece: int, gzipped: bool) -> bytes:
    data = gzip.compress(body, 1) if gzipped else body
    head = pickle.dumps(gzipped if job is None else (gzipped, job))
    frames = [REQUEST.pack(len(head), 0, FED), head]
    for at in range(0, len(data), piece):
        frames += [CHUNK.pack(len(data[at : at + piece])), data[at : at + piece]]
    return b"".join([*frames, CHUNK.pack(0)])


def _held(job: tuple[Any, ...], cap: int = 0) -> bytes:
    head = pickle.dumps((job, cap, False))
    return REQUEST.pack(len(head), 0, HELD) + head


def _served(requests: bytes) -> tuple[list[tuple[int, int]], list[bytes], int]:
    """What a worker's loop answers ``requests`` with: its frames, the parts they say are
    in its memory file, and the file's size at its end."""
    shared = os.memfd_create("worker")
    try:
        out = io.BytesIO()
        serve(io.BytesIO(requests), out, shared)
        answer = out.getvalue()
        frames = [ANSWER.unpack_from(answer, at) for at in range(0, len(answer), ANSWER.size)]
        parts, at = [], 0
        for status, size in frames:
            if status == STATUS_PART:
                parts.append(os.pread(shared, size, at))
                at = part_after(at, size)
        return frames, parts, os.fstat(shared).st_size
    finally:
        os.close(shared)


@pytest.mark.parametrize("gzipped", [True, False], ids=["gzipped", "plain"])
def test_a_worker_fed_a_body_with_its_job_answers_as_one_fed_without(gzipped: bool) -> None:
    body = _list([_pod(i, blob="y" * 900) for i in range(6000)])  # ~7 MB: a few steps
    frames, parts, _ = _served(_fed_request(body, JOB, 65_536, gzipped) + _held(JOB))
    want_frames, want_parts, _ = _served(_fed_request(body, None, 65_536, gzipped) + _held(JOB))
    assert frames == want_frames and parts == want_parts
    assert frames[-1] == (STATUS_PARTS_END, len(parts)) and len(parts) >= 3


def test_parts_are_said_as_the_body_comes_and_the_last_ones_with_the_job() -> None:
    body = _list([_pod(i, blob="y" * 900) for i in range(6000)])
    out = io.BytesIO()
    shared = os.memfd_create("worker")
    try:
        serve(io.BytesIO(_fed_request(body, JOB, 65_536, True)), out, shared)
        early = out.getvalue()  # (the body fed, no job asked yet)
    finally:
        os.close(shared)
    frames = [ANSWER.unpack_from(early, at) for at in range(0, len(early), ANSWER.size)]
    assert frames and {status for status, _ in frames} == {STATUS_PART}
    whole, _, _ = _served(_fed_request(body, JOB, 65_536, True) + _held(JOB))
    assert frames == whole[: len(frames)] and len(whole) > len(frames) + 1


def test_a_worker_fed_a_body_with_its_job_refuses_it_over_the_cap_and_frees_its_file() -> None:
    body = _list([_pod(i, blob="y" * 900) for i in range(3000)])
    frames, _, size = _served(_fed_request(body, JOB, 65_536, True) + _held(JOB, cap=2999))
    assert frames == [(STATUS_OVER_CAP, 0)] and size == 0
    frames, parts, _ = _served(_fed_request(body, JOB, 65_536, True) + _held(JOB, cap=3000))
    assert frames[-1] == (STATUS_PARTS_END, len(parts))
    # parts said as it came, then a cap (the gateway names no job for a capped list): given
    # up, the file left to the gateway, which empties it at the answer's end
    body = _list([_pod(i, blob="y" * 900) for i in range(6000)])
    frames, parts, _ = _served(_fed_request(body, JOB, 65_536, True) + _held(JOB, cap=5999))
    assert frames[-1] == (STATUS_NOT_DONE, 0) and len(parts) == len(frames) - 1 > 0


@pytest.mark.parametrize(
    "tail",
    [
        b' , {"metadata":{"name":"spaced"}} ]}',  # whitespace: read whole, as JSON allows
        b",7]}",  # not an object, past the parts said: given up as before, at that part
        b',{"metadata":{"name":"a"}}],"more":{}}',  # a field after the items
    ],
)
def test_given_up_after_parts_were_said_the_rest_is_the_whole_body_s(tail: bytes) -> None:
    body = _list([_pod(i, blob="y" * 900) for i in range(6000)])[:-2] + tail
    fed, unfed = (_fed_request(body, job, 65_536, True) + _held(JOB) for job in (JOB, None))
    frames, parts, _ = _served(fed)
    assert (frames, parts) == _served(unfed)[:2]
    assert len(parts) >= 2


def test_a_worker_given_another_job_or_none_does_it_on_the_whole_body() -> None:
    body = _list([_pod(i, blob="y" * 900) for i in range(3000)])
    other = compact("v1", "Pod", COLUMNS[:1])
    fed = _fed_request(body, JOB, 65_536, True)
    unfed = _fed_request(body, None, 65_536, True)
    assert _served(fed + _held(other))[:2] == _served(unfed + _held(other))[:2]
    # dropped: its parts' file emptied, the worker on to the next list
    frames, parts, size = _served(fed + REQUEST.pack(0, 0, DROP))
    assert frames == [] and parts == [] and size == 0
    frames, _, _ = _served(fed + REQUEST.pack(0, 0, DROP) + fed + _held(JOB))
    assert frames[-1][0] == STATUS_PARTS_END
    # a damaged body: not done, its file emptied
    damaged = _fed_request(body, JOB, 65_536, True)
    damaged = damaged[:5000] + b"\xff" * 64 + damaged[5064:]
    frames, _, size = _served(damaged + _held(JOB))
    assert frames == [(STATUS_NOT_DONE, 0)] and size == 0


# -- through the pool, a real worker process ---------------------------------------------


async def _feed(
    workers: ListWorkers, data: bytes, job: tuple[Any, ...] | None, upto: int | None = None
) -> Feed:
    for parts in list(workers._streams):  # an answer's end: its worker idle again
        await parts.over()
    while workers._early:  # a fed worker's answer read, and the worker settled
        await asyncio.wait(list(workers._early))
    feed = await workers.feed(True, job)
    assert feed is not None
    for at in range(0, len(data) if upto is None else upto, 32_768):
        await feed.send(data[at : at + 32_768])
    if upto is None:
        feed.end()
    return feed


BIG = _list([_pod(i, blob="z" * 2000) for i in range(6000)])


def test_through_the_pool_the_answer_is_that_of_a_body_handed_over_whole() -> None:
    data = gzip.compress(BIG, 1)

    async def test(workers: ListWorkers) -> None:
        want = await _taken_of(workers, data)
        for _ in range(2):  # the same worker again: its pipe and memory file in step
            feed = await _feed(workers, data, JOB)
            got = await workers.run(Undecoded(data, gzipped=True, feed=feed), JOB)
            assert isinstance(got, Sliced) and await _taken(got) == want
            assert await _taken_of(workers, data) == want
        assert workers.fed == 2 and workers.feeding == 0 and workers.returned == 0
        assert len(workers._all) == 1  # one worker all along
        # a cap with parts said as the body came (the adapter names no job for a list the
        # cap applies to): the answer given up in the middle, its worker ended
        feed = await _feed(workers, data, JOB)
        got = await workers.run(Undecoded(data, gzipped=True, cap=10, feed=feed), JOB)
        assert isinstance(got, Sliced)
        with pytest.raises(ValueError, match="gave its answer up"):
            await _taken(got)
        assert await _taken_of(workers, data) == want

    _run(test)


def test_a_worker_killed_as_it_is_fed_or_a_caller_gone_costs_no_answer() -> None:
    data = gzip.compress(BIG, 1)

    async def test(workers: ListWorkers) -> None:
        want = await _taken_of(workers, data)
        # killed in the middle of the body: the caller decodes it (no answer from a worker)
        feed = await _feed(workers, data, JOB, upto=len(data) // 2)
        (worker,) = [w for w in workers._all if w.proc.returncode is None]
        os.kill(worker.proc.pid, signal.SIGKILL)
        await worker.proc.wait()
        for at in range(len(data) // 2, len(data), 32_768):
            await feed.send(data[at : at + 32_768])
        feed.end()
        assert await workers.run(Undecoded(data, gzipped=True, feed=feed), JOB) is None
        # the caller gone in the middle of the body: its worker ended, the next list served
        feed = await _feed(workers, data, JOB, upto=len(data) // 3)
        feed.abandon()
        assert await _taken_of(workers, data) == want
        feed = await _feed(workers, data, JOB)
        got = await workers.run(Undecoded(data, gzipped=True, feed=feed), JOB)
        assert isinstance(got, Sliced) and await _taken(got) == want

    _run(test)


async def _taken_of(workers: ListWorkers, data: bytes) -> Any:
    answer = await workers.run(Undecoded(data, gzipped=True), JOB)
    assert isinstance(answer, Sliced)
    return await _taken(answer)

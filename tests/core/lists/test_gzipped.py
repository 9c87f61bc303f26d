"""Gzipped bodies (gateway.core.lists.gzipped): every member inflated as ``gzip`` does, the
trailer's size, and a damaged body decoded here as the upstream error httpx would give."""

from __future__ import annotations

import gzip
import random
import zlib

import pytest

from gateway.core import errors
from gateway.core.lists.gzipped import Gunzipping, gunzip, gzip_size, inflated


def test_gunzip_reads_every_member_as_gzip_does() -> None:
    one, two = gzip.compress(b'{"a":'), gzip.compress(b"1}")
    assert gunzip(one) == b'{"a":'
    assert gunzip(one + two) == gzip.decompress(one + two) == b'{"a":1}'
    assert gunzip(one + b"\0\0\0" + two) == b'{"a":1}'  # padding between members
    with pytest.raises(EOFError):
        gunzip(one[:-3])
    with pytest.raises(zlib.error):
        gunzip(b"\x1f\x8b not gzip at all")
    assert gzip_size(one + two) == 2  # the last member's count, as its trailer says
    assert gzip_size(b"short") == 0


async def test_a_damaged_gzipped_body_decoded_here_is_an_upstream_error() -> None:
    with pytest.raises(errors.Unavailable, match="DecodingError"):
        await inflated(b"\x1f\x8b\x08\x00 damaged")
    assert await inflated(gzip.compress(b"{}")) == b"{}"


def _streamed(data: bytes, cuts: list[int]) -> bytes | type[BaseException]:
    """``data`` inflated a piece at a time, cut at ``cuts`` (or the error's type)."""
    stream = Gunzipping()
    out: list[bytes] = []
    try:
        for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
            out += stream.feed(data[start:end])
        stream.end()
    except (zlib.error, EOFError) as exc:
        return type(exc)
    return b"".join(out)


def _whole(data: bytes) -> bytes | type[BaseException]:
    try:
        return gunzip(data)
    except (zlib.error, EOFError) as exc:
        return type(exc)


@pytest.mark.parametrize("seed", range(8))
def test_a_body_inflated_as_it_arrives_is_the_body_inflated_whole(seed: int) -> None:
    rng = random.Random(seed)
    text = b"".join(
        b'{"name":"pod-%d","x":"%s"}' % (i, b"y" * rng.randrange(50)) for i in range(3000)
    )
    one, two = gzip.compress(text[:40_000], 1), gzip.compress(text[40_000:], 6)
    bodies = [
        one,
        one + two,
        one + b"\0" * 7 + two,  # padding between members
        one + b"\0\0",  # padding at the end
        one[:-3],  # cut short
        one[: len(one) // 2],
        one + two[:-1],
        one + b"\0\0garbage after the padding",
        b"\x1f\x8b not gzip at all",
        b"\0" + one,  # padding only between members
        b"",
    ]
    for body in bodies:
        cuts = [rng.randrange(1, len(body)) for _ in range(12)] if len(body) > 1 else []
        cuts += [len(one) - 2, len(one), len(one) + 3]  # around the members' border
        cuts = sorted({c for c in cuts if 0 < c < len(body)})
        assert _streamed(body, cuts) == _whole(body), (seed, bodies.index(body))
        assert _streamed(body, list(range(1, min(len(body), 300)))) == _whole(body)

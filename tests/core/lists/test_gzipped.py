"""Gzipped bodies (gateway.core.lists.gzipped): every member inflated as ``gzip`` does, the
trailer's size, and a damaged body decoded here as the upstream error httpx would give."""

from __future__ import annotations

import gzip
import zlib

import pytest

from gateway.core import errors
from gateway.core.lists.gzipped import gunzip, gzip_size, inflated


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

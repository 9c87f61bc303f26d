"""Gzipped bodies: the inflated size a gzip trailer gives, and inflating every member at
zlib's speed (in a worker process, or in a thread beside the gateway's event loop).

A large list the apiserver gzips (``APIResponseCompression``) is read as it came when a list
worker may take it, and inflated there; any other is inflated here, off the event loop.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Final

from gateway.core import errors

__all__ = ["gunzip", "gzip_size", "inflated"]

#: ``zlib``'s window bits for a gzip header and trailer.
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
#: Header (10) and trailer (8) bytes of the smallest gzip member.
_GZIP_SMALLEST: Final = 18


def gzip_size(data: bytes | memoryview) -> int:
    """The size of gzipped ``data`` inflated, as its trailer says (modulo 2**32, of its
    last member); 0 when it is too short to have one."""
    return int.from_bytes(data[-4:], "little") if len(data) >= _GZIP_SMALLEST else 0


def gunzip(data: bytes | memoryview) -> bytes:
    """``data`` inflated: every gzip member, as ``gzip.decompress`` does, at zlib's speed
    (one ``decompressobj`` per member, no copies for the usual one member).

    Raises:
        zlib.error: not gzip, or damaged.
        EOFError: cut short.
    """
    parts: list[bytes] = []
    rest: bytes | memoryview = data
    while rest:
        inflater = zlib.decompressobj(_GZIP_WBITS)
        parts.append(inflater.decompress(rest))
        if not inflater.eof:
            raise EOFError("the gzip body ends before its end")
        rest = inflater.unused_data.lstrip(b"\0")  # members may be padded with zeros
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def inflated(data: bytes) -> bytes:
    """:func:`gunzip` in a thread (zlib lets the event loop go on meanwhile).

    Raises:
        Unavailable: the body is not gzip, or is damaged or cut short (as httpx's own
            inflating of a response says it).
    """
    try:
        return await asyncio.to_thread(gunzip, data)
    except (zlib.error, EOFError) as exc:
        raise errors.Unavailable("upstream unreachable: DecodingError") from exc

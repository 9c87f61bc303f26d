"""Gzipped bodies: the inflated size a gzip trailer gives, and inflating every member at
zlib's speed (in a worker process, or in a thread beside the gateway's event loop).

A large list the apiserver gzips (``APIResponseCompression``) is read as it came when a list
worker may take it, and inflated there (as it arrives: :class:`Gunzipping`, the same bytes as
:func:`gunzip` of the whole); any other is inflated here, off the event loop.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Any, Final

from gateway.core import errors

__all__ = ["Gunzipping", "gunzip", "gzip_size", "inflated"]

#: ``zlib``'s window bits for a gzip header and trailer.
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
#: Header (10) and trailer (8) bytes of the smallest gzip member.
_GZIP_SMALLEST: Final = 18


def gzip_size(data: bytes | memoryview) -> int:
    """The size of gzipped ``data`` inflated, as its trailer says (modulo 2**32, of its
    last member); 0 when it is too short to have one."""
    return int.from_bytes(data[-4:], "little") if len(data) >= _GZIP_SMALLEST else 0


def gunzip(data: bytes | bytearray | memoryview) -> bytes:
    """``data`` inflated: every gzip member, as ``gzip.decompress`` does, at zlib's speed
    (one ``decompressobj`` per member, no copies for the usual one member).

    Raises:
        zlib.error: not gzip, or damaged.
        EOFError: cut short.
    """
    parts: list[bytes] = []
    rest: bytes | bytearray | memoryview = data
    while rest:
        inflater = zlib.decompressobj(_GZIP_WBITS)
        parts.append(inflater.decompress(rest))
        if not inflater.eof:
            raise EOFError("the gzip body ends before its end")
        rest = inflater.unused_data.lstrip(b"\0")  # members may be padded with zeros
    return parts[0] if len(parts) == 1 else b"".join(parts)


class Gunzipping:
    """:func:`gunzip` a piece at a time, as a body arrives: :meth:`feed` each piece, then
    :meth:`end`; the pieces inflated, joined, are what :func:`gunzip` gives of the whole
    body, and the errors are its errors (``tests/core/lists/test_gzipped.py`` holds the two
    to the same bytes for any cut of the body)."""

    __slots__ = ("_inflater",)

    def __init__(self) -> None:
        #: The member being inflated (``None`` before the first).
        self._inflater: Any = None

    def feed(self, data: bytes | memoryview) -> list[bytes]:
        """``data``, the next piece of the body, inflated (as far as it goes).

        Raises:
            zlib.error: not gzip, or damaged.
        """
        out: list[bytes] = []
        while data:
            inflater = self._inflater
            if inflater is None or inflater.eof:
                if inflater is not None:  # members may be padded with zeros
                    data = bytes(data).lstrip(b"\0")
                    if not data:
                        break
                inflater = self._inflater = zlib.decompressobj(_GZIP_WBITS)
            out.append(inflater.decompress(data))
            data = inflater.unused_data if inflater.eof else b""
        return out

    def end(self) -> None:
        """The body is over.

        Raises:
            EOFError: it ends in the middle of a member.
        """
        if self._inflater is not None and not self._inflater.eof:
            raise EOFError("the gzip body ends before its end")


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

"""Protobuf wire-format pieces the gRPC codec writes itself: varints, tags, ``Struct`` from
JSON.  In the core (pure functions of bytes and decoded JSON) so that a list worker
(:mod:`gateway.core.lists.jobs`) writes the same bytes as the gRPC front end.

Building a ``google.protobuf.Struct`` through the Python API costs ~100 µs for a typical
``managedFields[].fieldsV1`` (every JSON node becomes three messages), more than decoding the
whole pod.  Its wire form is simple, so the codec encodes it here, straight from the decoded
JSON, and appends the bytes to the enclosing message (protobuf merges a message field that
appears twice, and appends repeated fields in order).  :class:`StructCache` remembers the
encodings: the ``fieldsV1`` of pods of one workload are byte-for-byte identical.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from itertools import repeat
from typing import Any, Final

import orjson

from gateway.core.support.deepjson import FROZEN_DEPTH

__all__ = [
    "StructCache",
    "TooDeep",
    "encode_struct",
    "field_tag",
    "length_prefixed",
    "varint",
]

_DOUBLE: Final = struct.Struct("<d")
_SMALL: Final = tuple(bytes((i,)) for i in range(128))

# google.protobuf.Value oneof tags: null 1 (varint), number 2 (double), string 3, bool 4
# (varint), struct 5, list 6 (length-delimited).
_NULL: Final = b"\x08\x00"
_TRUE: Final = b"\x20\x01"
_FALSE: Final = b"\x20\x00"
_NUMBER: Final = b"\x11"
_STRING: Final = b"\x1a"
_STRUCT: Final = b"\x2a"
_LIST: Final = b"\x32"
_FIELD1: Final = b"\x0a"  # Struct.fields, ListValue.values, map entry key
_FIELD2: Final = b"\x12"  # map entry value


def varint(n: int) -> bytes:
    """The base-128 varint of a non-negative ``n``."""
    if n < 128:
        return _SMALL[n]
    if n < 16384:
        return bytes((n & 0x7F | 0x80, n >> 7))
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field_tag(number: int) -> bytes:
    """The tag of a length-delimited field (wire type 2)."""
    return varint(number << 3 | 2)


def length_prefixed(tag: bytes, body: bytes) -> bytes:
    """``tag``, the length of ``body``, ``body``."""
    return tag + varint(len(body)) + body


def _value(v: Any, depth: int) -> bytes:
    c = v.__class__
    if c is str:
        b: bytes = v.encode()
        return _STRING + varint(len(b)) + b
    if c is dict:
        body = encode_struct(v, depth)
        return _STRUCT + varint(len(body)) + body
    if c is bool:
        return _TRUE if v else _FALSE
    if c is int or c is float:
        return _NUMBER + _DOUBLE.pack(v)
    if c is list:
        if depth > FROZEN_DEPTH:
            raise TooDeep("an object nested deeper than a Struct holds")
        inner = depth + 1
        body = b"".join(_FIELD1 + varint(len(x)) + x for x in map(_value, v, repeat(inner)))
        return _LIST + varint(len(body)) + body
    if v is None:
        return _NULL
    if c is orjson.Fragment:
        raise TooDeep("an object nested deeper than a Struct holds")
    raise TypeError(f"{c.__name__} is not a JSON value")


class TooDeep(TypeError):
    """A value nested past :data:`gateway.core.support.deepjson.FROZEN_DEPTH` levels (held as
    JSON text, ``orjson.Fragment``, when decoded past ``orjson``'s 1,024 levels; as it is
    when shallower, counted here so the encoder never recurses deep): no ``Struct`` is
    written for it (protobuf runtimes refuse messages nested past 100 levels when they
    read one, and each JSON level is two); the caller writes the object's JSON instead."""


def encode_struct(obj: dict[str, Any], depth: int = 1) -> bytes:
    """The wire bytes of the ``google.protobuf.Struct`` holding the JSON object ``obj``.

    Numbers become doubles, as in every ``Struct``.  ``depth`` is the level of ``obj`` in
    the object written (1: the object itself).

    Raises:
        TooDeep: ``obj`` holds a part nested too deep for a ``Struct``.
        TypeError: ``obj`` holds something that is not JSON.
    """
    if depth > FROZEN_DEPTH:
        raise TooDeep("an object nested deeper than a Struct holds")
    inner = depth + 1
    parts = []
    for k, v in obj.items():
        kb = k.encode()
        vb = _value(v, inner)
        entry = _FIELD1 + varint(len(kb)) + kb + _FIELD2 + varint(len(vb)) + vb
        parts.append(_FIELD1 + varint(len(entry)) + entry)
    return b"".join(parts)


class StructCache:
    """``encode_struct`` with a bounded LRU memory keyed by the object's JSON text.

    Args:
        size: entries kept.
    """

    def __init__(self, size: int = 2048) -> None:
        self._size = size
        self._entries: OrderedDict[bytes, bytes] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def encode(self, obj: dict[str, Any]) -> bytes:
        """``encode_struct(obj)``, from memory when the same JSON was seen recently."""
        try:
            key = orjson.dumps(obj)
        except TypeError:  # not representable as JSON text (e.g. a huge integer)
            return encode_struct(obj)
        entries = self._entries
        found = entries.get(key)
        if found is not None:
            self.hits += 1
            entries.move_to_end(key)
            return bytes(found)
        self.misses += 1
        found = entries[key] = encode_struct(obj)
        if len(entries) > self._size:
            entries.popitem(last=False)
        return found

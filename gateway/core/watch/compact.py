"""A watch's state kept as compact JSON: one ``bytes`` per object, decoded when read.

The watch hub keeps the current objects of each upstream watch (what a joining subscriber's
snapshot is made of, and the base of a relist's diff).  Kept as decoded Python data, a
realistic pod costs about five times its JSON (dicts, strings, lists; measured on 30,000
pods of ``tests/bench/realistic.py``: ~800 MB for 155 MB of JSON), and those millions of
objects are what every young and full collection of the cyclic collector walks.  Kept as
its JSON (``orjson.dumps``), an object is one ``bytes``: its size in JSON plus 33 bytes,
and nothing the collector tracks.  A view cache (:mod:`gateway.core.views.store`) keeps
the very same ``bytes`` objects (the hub's events carry them, :attr:`HubEvent.raw
<gateway.core.watch.hub.HubEvent.raw>`), so one copy serves both.

Reading an object decodes it (``orjson.loads``: ~20 us for a realistic pod), so a
joining subscriber's snapshot decodes each object as it is read, once per subscriber, where
it used to share the hub's decoded objects: memory for CPU, on a path taken once per join.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from gateway.core.lists.compacting import Columns
from gateway.core.model.values import JSON
from gateway.core.support import deepjson

__all__ = ["CompactState", "encode"]


def encode(obj: JSON) -> bytes:
    """``obj``'s JSON in a ``bytes`` of its own size.

    ``orjson.dumps`` leaves its output in the buffer it grew (by doubling), only marked
    shorter: a realistic pod's 5.5 KB held 8 KB (measured with tracemalloc), 1.5x the JSON
    for as long as it is kept.  A copy of the exact size costs a memcpy.
    """
    return bytes(memoryview(deepjson.dumps(obj)))


class CompactState(MutableMapping[str, JSON]):
    """Objects by namespace/name, each kept as its JSON; a mapping of decoded objects."""

    __slots__ = ("_columns", "_raw")

    def __init__(self, raw: dict[str, bytes] | None = None) -> None:
        self._raw: dict[str, bytes] = raw if raw is not None else {}
        #: Values a view asked for of the listed objects, read when they were listed
        #: (:class:`~gateway.core.lists.compacting.Columns`), until a view takes them.
        self._columns: Columns | None = None

    # -- compact access ------------------------------------------------------------------

    def put(self, key: str, obj: JSON) -> bytes:
        """Keep ``obj`` at ``key``; returns its JSON (the bytes kept)."""
        data = self._raw[key] = encode(obj)
        return data

    def put_raw(self, key: str, data: bytes) -> None:
        """Keep the JSON ``data`` at ``key`` as it is."""
        self._raw[key] = data

    def fill(self, found: dict[str, bytes], columns: Columns | None = None) -> None:
        """Take ``found`` (JSON by key) as the objects held, replacing any; ``columns``:
        values read of them as they were listed, for a view to take."""
        self._raw = found
        self._columns = columns

    def take_columns(self) -> Columns | None:
        """The values read of the objects as they were listed (once: whoever takes them
        keeps them; they are matched to objects by the identity of their JSON, so those
        that changed since are read anew)."""
        columns, self._columns = self._columns, None
        return columns

    def raw(self, key: str) -> bytes | None:
        """The JSON kept at ``key`` (``None``: nothing)."""
        return self._raw.get(key)

    def raw_items(self) -> list[tuple[str, bytes]]:
        """Every (key, JSON) now: a list of references, taken in one step."""
        return list(self._raw.items())

    @property
    def bytes(self) -> int:
        """The JSON bytes held (a walk of the values: for tests and benches)."""
        return sum(map(len, self._raw.values()))

    def copy(self) -> CompactState:
        """A mapping of the same objects now (the same ``bytes``; later changes to either
        are not seen by the other)."""
        return CompactState(dict(self._raw))

    # -- the mapping of decoded objects --------------------------------------------------

    def __getitem__(self, key: str) -> JSON:
        found: JSON = deepjson.loads(self._raw[key])
        return found

    def __setitem__(self, key: str, obj: JSON) -> None:
        self._raw[key] = encode(obj)

    def __delitem__(self, key: str) -> None:
        del self._raw[key]

    def __contains__(self, key: Any) -> bool:
        return key in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def clear(self) -> None:
        self._raw.clear()
        self._columns = None

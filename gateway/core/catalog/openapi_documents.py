"""The OpenAPI v3 documents of a catalog's group/versions, read when a schema needs them.

A :class:`~gateway.core.catalog.catalog.Catalog` names each discovered group/version's document by
its hash; the document itself is read only when a front end builds the schema of a scope
that contains it (a GraphQL schema of the built-in API or of one API group), so what the
gateway holds grows with the scopes callers use, not with the number of CRDs a cluster has.

:func:`load` is the one entry point: it returns the documents of the asked group/versions
(a document carried inline by the catalog as it is, else the one the catalog's
:attr:`~gateway.core.catalog.catalog.Catalog.documents` source reads, cached by hash).
:class:`Documents` is the source :class:`~gateway.core.catalog.discovery.Discovery` gives the
catalogs it reads: documents read with the gateway's identity, a bounded number kept.
:func:`decode` parses what discovery reads: a large body (an API group's OpenAPI document is
0.1-10 MB) in a worker thread that hands the GIL back between objects, so the event loop is
never held for a parse's whole length.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import orjson

from gateway.core import errors
from gateway.core.catalog.catalog import Catalog, GroupVersion, GroupVersionKey
from gateway.core.process.collector import HOLD as COLLECTOR_HOLD

log = logging.getLogger(__name__)


async def load(
    catalog: Catalog, keys: Iterable[GroupVersionKey]
) -> dict[GroupVersionKey, Mapping[str, Any]]:
    """The OpenAPI v3 document of each of ``keys`` that the catalog describes.

    A group/version without a document (the upstream serves none, or it could not be read)
    is left out; its kinds are then not typed in GraphQL (the generic gRPC service still
    serves them).
    """
    out: dict[GroupVersionKey, Mapping[str, Any]] = {}
    missing: list[GroupVersion] = []
    for key in keys:
        gv = catalog.groups.get(key)
        if gv is None:
            continue
        if gv.openapi is not None:
            out[key] = gv.openapi
        elif catalog.documents is not None and (gv.openapi_hash or gv.openapi_url):
            missing.append(gv)
    if missing and catalog.documents is not None:
        out.update(await catalog.documents.documents(missing))
    return out


class _Parsed(dict[str, Any]):
    """A parsed document (a dict that can be referred to weakly)."""


#: Parsed documents by the SHA-256 of their bytes, for as long as a cluster holds them.
_PARSED: weakref.WeakValueDictionary[bytes, _Parsed] = weakref.WeakValueDictionary()


def shared_document(body: bytes) -> Any:
    """:func:`parse` of ``body``, or the parse of the same bytes another cluster's discovery
    holds now: clusters of one Kubernetes version serve the same documents (``api/v1``
    parsed is ~10 MB of objects), so a fleet keeps one of each, not one per cluster.
    Keyed by the bytes' own digest, never by the hash a cluster advertises: a cluster can
    only ever share what it sent itself.

    Raises:
        ValueError: not JSON (:func:`parse`).
    """
    key = hashlib.sha256(body).digest()
    parsed = _PARSED.get(key)
    if parsed is None:
        value = parse(body)
        if not isinstance(value, dict):
            return value
        parsed = _PARSED[key] = _Parsed(value)
    return parsed


#: Bodies up to this many bytes are parsed on the event loop by orjson (a millisecond or
#: two); larger ones by :func:`parse_sliced` in a worker thread.  An API group's OpenAPI v3
#: document is 0.1-10 MB: 14 ms of orjson for a middling one, all of it holding the GIL
#: (in a thread as much as on the loop: orjson never lets go of it).
SLICED_PARSE_BYTES: Final = 256 * 1024


def _handover(obj: dict[str, Any]) -> dict[str, Any]:
    """The object hook of :func:`parse_sliced`: a Python call, so the interpreter may hand
    the GIL to another thread (the event loop's) here, between two objects."""
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_sliced(body: bytes) -> Any:
    """``body`` parsed as JSON, letting go of the GIL between objects.

    orjson parses a document in one C call that holds the GIL throughout, so a thread
    parsing a 5 MB document holds the event loop as long as the loop itself would.  The
    standard library's parser calls back into Python for each object it completes
    (:func:`_handover`), and the interpreter switches threads at such calls once the switch
    interval is over: the loop waits a slice (the parse of one object's own members), never
    the parse.  About 1.5 times orjson's CPU time, so it is kept for large bodies.

    Raises:
        ValueError: not UTF-8, not JSON, ``NaN`` or ``Infinity`` (orjson refuses them too),
            or nested deeper than the interpreter's recursion limit.
    """
    try:
        return json.loads(body.decode(), object_hook=_handover, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deep") from None


def parse(body: bytes) -> Any:
    """``body`` parsed as JSON: by orjson if small, else :func:`parse_sliced`.

    Raises:
        ValueError: not JSON (``orjson.JSONDecodeError`` is one).
    """
    return orjson.loads(body) if len(body) <= SLICED_PARSE_BYTES else parse_sliced(body)


async def decode(body: bytes, *, shared: bool = False) -> Any:
    """``body`` parsed as JSON (:func:`shared_document` if ``shared``), off the event loop if
    it is large: a worker thread parses it in slices (:func:`parse_sliced`), and hashes it
    (``hashlib`` lets go of the GIL) to share it.

    Raises:
        ValueError: not JSON.
    """
    fn = shared_document if shared else parse
    if len(body) <= SLICED_PARSE_BYTES:
        return fn(body)
    return await asyncio.to_thread(_held, fn, body)


def _held(fn: Callable[[bytes], Any], body: bytes) -> Any:
    """``fn(body)`` with the cyclic collector held off: a parse allocates a burst of objects
    (a million for a 10 MB document, a tenth of them tracked) that all live on, and the
    collections it would trigger meanwhile walk them again and again (a middle generation's
    walk of hundreds of thousands, on whichever thread allocated last, the event loop's
    too).  Held off, the next young collection walks the parse once (a millisecond a MB).

    Not frozen after (:meth:`CollectorHold.settle`): a freeze takes every tracked object,
    and a group schema's rebuild reads its documents again (up to a hundred a churn round
    with 104 groups): each freeze would keep what requests in flight held then, and what
    of it ends in a cycle would never be freed."""
    with COLLECTOR_HOLD.held():
        return fn(body)


#: Parsed documents a :class:`Documents` keeps (``api/v1`` parsed is ~10 MB of objects).
DEFAULT_CACHED_DOCUMENTS: Final = 32

#: Reads one server-relative URL with the gateway's identity, decoded JSON.
Fetch = Callable[[str], Awaitable[Any]]

_CacheKey = tuple[str, str, str]  # group, version, hash


class Documents:
    """A :class:`DocumentSource` over the upstream's ``/openapi/v3`` documents.

    A group/version's document is read from its :attr:`~GroupVersion.openapi_url` the first
    time it is asked for, then kept by ``(group, version, hash)`` in a least-recently-used
    cache of ``size`` documents: an unchanged hash is an unchanged document (the apiserver's
    contract), so it is never read again while it stays cached.  Callers asking for one
    document at the same time share one read.  A document the index names without a hash
    cannot be told apart from a changed one, so it is read on every call and never kept.

    Args:
        fetch: GETs a server-relative URL with the gateway's own identity and returns the
            decoded body (raises :class:`~gateway.core.errors.GatewayError`); it applies the
            reads' limits (bytes, time, concurrency).
        size: documents kept at most.

    Attributes:
        fetches: documents read from the upstream since start (for tests and debugging).
    """

    def __init__(self, fetch: Fetch, *, size: int = DEFAULT_CACHED_DOCUMENTS) -> None:
        self._fetch = fetch
        self._size = max(size, 0)
        self._cache: OrderedDict[_CacheKey, Mapping[str, Any]] = OrderedDict()
        self._reading: dict[_CacheKey, asyncio.Task[Mapping[str, Any] | None]] = {}
        self.fetches = 0

    def __len__(self) -> int:
        """Documents cached now."""
        return len(self._cache)

    async def documents(
        self, gvs: Sequence[GroupVersion]
    ) -> dict[GroupVersionKey, Mapping[str, Any]]:
        """The document of each of ``gvs`` that could be read (others are left out, logged)."""
        pending: list[tuple[GroupVersionKey, asyncio.Future[Mapping[str, Any] | None]]] = []
        out: dict[GroupVersionKey, Mapping[str, Any]] = {}
        for gv in gvs:
            if not gv.openapi_url:
                continue  # the index does not name one: nothing to read
            key = (gv.group, gv.version, gv.openapi_hash)
            if gv.openapi_hash:
                cached = self._cache.get(key)
                if cached is not None:
                    self._cache.move_to_end(key)
                    out[(gv.group, gv.version)] = cached
                    continue
                task = self._reading.get(key)
                if task is None:
                    task = asyncio.create_task(self._read(key, gv.openapi_url))
                    self._reading[key] = task
                    task.add_done_callback(functools.partial(self._done, key))
            else:
                task = asyncio.create_task(self._read(key, gv.openapi_url))
            # shielded: one caller cancelled must not cancel the read others wait for
            pending.append(((gv.group, gv.version), asyncio.shield(task)))
        for gvk, waiting in pending:
            doc = await waiting
            if doc is not None:
                out[gvk] = doc
        return out

    def _done(self, key: _CacheKey, task: asyncio.Task[Mapping[str, Any] | None]) -> None:
        if self._reading.get(key) is task:
            del self._reading[key]

    async def _read(self, key: _CacheKey, url: str) -> Mapping[str, Any] | None:
        """Read one document (``None``: it could not be read; logged here, once per read)."""
        self.fetches += 1
        path = url.split("?", 1)[0]  # the hash adds nothing to a message
        try:
            doc = await self._fetch(url)
        except errors.GatewayError as exc:
            log.warning("openapi: cannot read %s (%s); its kinds are not typed", path, exc)
            return None
        if not isinstance(doc, dict):
            log.warning("openapi: %s is not an object; its kinds are not typed", path)
            return None
        document: Mapping[str, Any] = MappingProxyType(doc)
        if key[2]:
            self._keep(key, document)
        return document

    def _keep(self, key: _CacheKey, document: Mapping[str, Any]) -> None:
        # A group/version's older hashes name documents the upstream no longer serves: drop
        # them now rather than when they age out.
        for old in [k for k in self._cache if k[:2] == key[:2] and k != key]:
            del self._cache[old]
        self._cache[key] = document
        self._cache.move_to_end(key)
        while len(self._cache) > self._size:
            self._cache.popitem(last=False)

"""What the cluster serves: discovery and OpenAPI v3, read into a catalog.

:class:`Discovery` reads, with the gateway's own identity (never a caller's):

1. the served group/versions and their resources, from aggregated discovery (``GET /api`` and
   ``/apis`` as ``APIGroupDiscoveryList``, apidiscovery.k8s.io/v2: two requests for the whole
   cluster), else from legacy discovery (``/api``, ``/apis``, then ``/api/v1`` and
   ``/apis/<group>/<version>`` one by one);
2. the OpenAPI v3 index (``GET /openapi/v3``): the hash and URL of the document of every
   served group/version with a resource the gateway serves from discovery.  The documents
   themselves are not read here: a catalog names them, and its
   :attr:`~gateway.core.catalog.catalog.Catalog.documents`
   (:class:`~gateway.core.catalog.openapi_documents.Documents`)
   reads one when a front end builds a schema that needs it, kept by hash, so what discovery
   costs does not grow with the size of every CRD's schema.

Every served version is kept: a kind served in ``v1`` and ``v1beta1`` of one group is two
resources (the front ends decide how to name them).  The curated seed resources
(:data:`gateway.core.model.registry.REGISTRY`) are always served with their own records, whatever
discovery or ``--resources`` say.

``--resources`` (:class:`ResourcePatterns`) chooses what else is served: comma-separated
``[-][GROUP/][VERSION/]RESOURCE`` patterns with :func:`fnmatch` globs, a leading ``-``
denies, a deny always wins over an allow, and without any allow everything not denied is
served.  The core group is written ``core``.  Secrets are served by default like any other
resource: every call carries the caller's own token, so the apiserver's RBAC decides who
reads them; ``-secrets`` keeps them out of the gateway altogether.

Reads are bounded (:class:`DiscoveryLimits`): the bytes of each document, the number of
group/versions, the requests in flight, the time of each request.  One group/version that
cannot be read (a broken aggregated APIService answering 503, a ``Stale`` entry of
aggregated discovery, an OpenAPI index that fails) keeps its previous entry and is logged;
it never costs the others.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Literal
from urllib.parse import parse_qs, urlsplit

import httpx

from gateway.core import errors
from gateway.core.catalog.catalog import Catalog, GroupVersion, GroupVersionKey
from gateway.core.catalog.openapi_documents import (
    DEFAULT_CACHED_DOCUMENTS,
    Documents,
    decode,
)
from gateway.core.model.registry import ALL_VERBS, REGISTRY, Registry, Resource, Subresource, Verb
from gateway.core.process.metrics import Metrics
from gateway.core.upstream.config import ConfigError

log = logging.getLogger(__name__)

__all__ = [
    "AGGREGATED_ACCEPT",
    "Discovery",
    "DiscoveryFailed",
    "DiscoveryLimits",
    "ResourcePattern",
    "ResourcePatterns",
    "catalog_changed",
]

#: Aggregated discovery first, legacy JSON where the server has none (before v1.26).
AGGREGATED_ACCEPT: Final = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
)
#: Subresources that only upgrade the connection (SPDY / WebSocket): not served.
CONNECT_ONLY: Final = frozenset(("exec", "attach", "portforward", "proxy"))
#: Subresources whose body is text, not an object.
TEXT_SUBRESOURCES: Final = frozenset(("log",))
#: Where the OpenAPI v3 documents live; an index entry pointing elsewhere is ignored.
OPENAPI_PREFIX: Final = "/openapi/v3/"

ResourceKey = tuple[str, str, str]


class DiscoveryFailed(Exception):
    """The cluster's list of group/versions could not be read (nothing was changed)."""


# -------------------------------------------------------------------------- --resources


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """One ``--resources`` entry: globs for group, version and resource (plural)."""

    group: str
    version: str
    resource: str
    deny: bool = False

    def matches(self, group: str, version: str, plural: str) -> bool:
        return (
            fnmatch.fnmatchcase(group, self.group)
            and fnmatch.fnmatchcase(version, self.version)
            and fnmatch.fnmatchcase(plural, self.resource)
        )

    def __str__(self) -> str:
        group = "core" if self.group == "" else self.group
        return f"{'-' if self.deny else ''}{group}/{self.version}/{self.resource}"


@dataclass(frozen=True, slots=True)
class ResourcePatterns:
    """The ``--resources`` allow/deny list (see the module docstring for the syntax).

    ``RESOURCE`` alone is any group and version (``-secrets``), ``GROUP/RESOURCE`` any
    version of that group (``apps/*``), ``GROUP/VERSION/RESOURCE`` exactly that
    (``-*/v1beta1/*``).  ``core`` is the core (legacy) group, whose group name is empty.
    """

    entries: tuple[ResourcePattern, ...] = ()

    @classmethod
    def parse(cls, text: str | None) -> ResourcePatterns:
        """Parse ``--resources``; empty or ``None`` serves everything.

        Raises:
            ValueError: an entry with more than three parts or an empty part.
        """
        entries: list[ResourcePattern] = []
        for raw in (text or "").split(","):
            item = raw.strip()
            if not item:
                continue
            deny = item.startswith("-")
            body = item[1:].strip() if deny else item
            parts = body.split("/")
            if len(parts) > 3 or any(not p for p in parts):
                raise ValueError(
                    f"--resources entry {item!r} is not [-][GROUP/][VERSION/]RESOURCE "
                    "(e.g. apps/*, *.example.com/*, -secrets, -*/v1beta1/*)"
                )
            if len(parts) == 1:
                group, version, resource = "*", "*", parts[0]
            elif len(parts) == 2:
                group, version, resource = parts[0], "*", parts[1]
            else:
                group, version, resource = parts
            entries.append(
                ResourcePattern("" if group == "core" else group, version, resource, deny)
            )
        return cls(tuple(entries))

    def allows(self, group: str, version: str, plural: str) -> bool:
        """Is ``group/version/plural`` served?  A deny wins; no allow at all allows all."""
        if any(e.deny and e.matches(group, version, plural) for e in self.entries):
            return False
        allows = [e for e in self.entries if not e.deny]
        return not allows or any(e.matches(group, version, plural) for e in allows)

    def __str__(self) -> str:
        return ",".join(str(e) for e in self.entries) or "everything"


EVERYTHING: Final = ResourcePatterns()


# ------------------------------------------------------------------------------- limits


@dataclass(frozen=True, slots=True)
class DiscoveryLimits:
    """Bounds on what one read of the cluster's discovery and OpenAPI may cost."""

    #: The largest discovery document read (aggregated ``/apis`` of a large cluster: ~1 MB).
    max_discovery_bytes: int = 16 * 1024 * 1024
    #: The largest OpenAPI v3 document read (``/openapi/v3/api/v1``: ~1.5 MB).
    max_openapi_bytes: int = 32 * 1024 * 1024
    #: Group/versions kept; past it the rest are left out (and logged).
    max_group_versions: int = 1000
    #: Requests in flight at once (legacy per-group-version discovery, OpenAPI documents).
    concurrency: int = 8
    #: Seconds one request may take.
    timeout: float = 30.0
    #: Parsed OpenAPI documents kept for the schemas that read them (least recently used
    #: ones evicted).
    cached_documents: int = DEFAULT_CACHED_DOCUMENTS


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class _Served:
    """One group/version as discovery lists it (before ``--resources``)."""

    group: str
    version: str
    resources: tuple[Resource, ...]
    #: ``False``: discovery could not say what it serves now (keep the previous entry).
    fresh: bool = True


@dataclass(slots=True)
class _Fetched:
    status: int
    body: bytes
    headers: httpx.Headers


def _gv_path(group: str, version: str) -> str:
    return f"/apis/{group}/{version}" if group else f"/api/{version}"


def _openapi_key(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _verbs(raw: Any) -> frozenset[Verb]:
    if not isinstance(raw, list):
        return frozenset()
    return frozenset(v for v in ALL_VERBS if v in raw)


def _strings(raw: Any) -> tuple[str, ...]:
    return tuple(s for s in raw if isinstance(s, str) and s) if isinstance(raw, list) else ()


def _subresource(name: str, verbs: Any) -> Subresource | None:
    """A served subresource, or ``None`` for connect-only ones and ones without our verbs."""
    if name in CONNECT_ONLY:
        return None
    served = _verbs(verbs)
    if not served:
        return None
    content: Literal["json", "text"] = "text" if name in TEXT_SUBRESOURCES else "json"
    return Subresource(name, served, content)


def _resource(
    group: str,
    version: str,
    *,
    plural: Any,
    kind: Any,
    singular: Any,
    namespaced: bool,
    verbs: Any,
    short_names: Any,
    subresources: Mapping[str, Subresource],
) -> Resource | None:
    if not isinstance(plural, str) or not plural or "/" in plural:
        return None
    if not isinstance(kind, str) or not kind:
        return None
    served = _verbs(verbs)
    if not served:
        return None  # nothing the gateway serves (connect-only or unknown verbs)
    return Resource(
        group=group,
        version=version,
        kind=kind,
        plural=plural,
        # legacy discovery often leaves singularName empty: kubectl's rule, the lowercase kind
        singular=singular if isinstance(singular, str) and singular else kind.lower(),
        namespaced=namespaced,
        verbs=served,
        subresources=MappingProxyType(dict(subresources)),
        short_names=_strings(short_names),
    )


def parse_resource_list(group: str, version: str, body: Any) -> tuple[Resource, ...]:
    """A legacy ``APIResourceList`` as resources (subresources attached to their parent)."""
    items = body.get("resources") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return ()
    subs: dict[str, dict[str, Subresource]] = {}
    for item in items:
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(name, str) and name.count("/") == 1:
            parent, sub_name = name.split("/")
            sub = _subresource(sub_name, item.get("verbs"))
            if sub is not None:
                subs.setdefault(parent, {})[sub_name] = sub
    out: list[Resource] = []
    for item in items:
        if not isinstance(item, dict) or "/" in str(item.get("name", "/")):
            continue
        found = _resource(
            group,
            version,
            plural=item.get("name"),
            kind=item.get("kind"),
            singular=item.get("singularName"),
            namespaced=item.get("namespaced") is True,
            verbs=item.get("verbs"),
            short_names=item.get("shortNames"),
            subresources=subs.get(str(item.get("name")), {}),
        )
        if found is not None:
            out.append(found)
    return tuple(out)


def parse_aggregated(body: Mapping[str, Any]) -> list[_Served]:
    """An ``APIGroupDiscoveryList`` (apidiscovery.k8s.io/v2) as served group/versions,
    in its order (each group's versions by preference)."""
    served: list[_Served] = []
    for item in body.get("items") or ():
        if not isinstance(item, dict):
            continue
        meta = item.get("metadata") or {}
        group = meta.get("name") if isinstance(meta, dict) else None
        group = group if isinstance(group, str) else ""
        for entry in item.get("versions") or ():
            if not isinstance(entry, dict) or not isinstance(entry.get("version"), str):
                continue
            version = entry["version"]
            resources: list[Resource] = []
            for raw in entry.get("resources") or ():
                if not isinstance(raw, dict):
                    continue
                subs: dict[str, Subresource] = {}
                for sub_raw in raw.get("subresources") or ():
                    if not isinstance(sub_raw, dict):
                        continue
                    name = sub_raw.get("subresource")
                    if isinstance(name, str) and name:
                        sub = _subresource(name, sub_raw.get("verbs"))
                        if sub is not None:
                            subs[name] = sub
                kind = raw.get("responseKind")
                found = _resource(
                    group,
                    version,
                    plural=raw.get("resource"),
                    kind=kind.get("kind") if isinstance(kind, dict) else None,
                    singular=raw.get("singularResource"),
                    namespaced=raw.get("scope") == "Namespaced",
                    verbs=raw.get("verbs"),
                    short_names=raw.get("shortNames"),
                    subresources=subs,
                )
                if found is not None:
                    resources.append(found)
            fresh = entry.get("freshness", "Current") != "Stale"
            served.append(_Served(group, version, tuple(resources), fresh))
    return served


def catalog_changed(old: Catalog, new: Catalog) -> bool:
    """Do two catalogs differ in what they serve (resources, or an OpenAPI document's name)?"""
    if old.groups.keys() != new.groups.keys() or old.crd_groups != new.crd_groups:
        return True
    for key, gv in new.groups.items():
        before = old.groups[key]
        if (
            before.resources != gv.resources
            or before.openapi_hash != gv.openapi_hash
            or before.openapi_url != gv.openapi_url
        ):
            return True
    return tuple(old.registry.records) != tuple(new.registry.records)


class Discovery:
    """Reads the cluster's discovery and OpenAPI v3 into catalogs (see the module docstring).

    Args:
        http: a client that carries the gateway's own identity (its ``auth`` adds the token);
            owned by the caller.
        patterns: ``--resources``.
        limits: bounds of each read.
        seed: the curated resources, always served with their own records.
        metrics: upstream request latencies are recorded here (verb ``get``, resource
            ``discovery`` or ``openapi``).

    Attributes:
        aggregated: whether the last read got aggregated discovery (``None``: no read yet).
        seen: every ``(group, version, plural)`` the last read found, before ``--resources``.
        seen_group_versions: every group/version the last read found.
        openapi_served: whether the last read found an OpenAPI v3 index (``False``: 404).
        requests: upstream requests made, by path (for the operator's debugging, and tests).
        documents: reads the OpenAPI documents of every catalog this discovery reads (one
            cache for all of them).
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        patterns: ResourcePatterns = EVERYTHING,
        limits: DiscoveryLimits = DiscoveryLimits(),
        seed: Registry = REGISTRY,
        metrics: Metrics | None = None,
    ) -> None:
        self.http = http
        self.patterns = patterns
        self.limits = limits
        self.seed = seed
        self.metrics = metrics
        self.aggregated: bool | None = None
        self.seen: frozenset[ResourceKey] = frozenset()
        self.seen_group_versions: frozenset[GroupVersionKey] = frozenset()
        self.openapi_served = True
        self.requests = 0
        self._gate = asyncio.Semaphore(limits.concurrency)
        self.documents = Documents(self._document, size=limits.cached_documents)

    # -- the one read ------------------------------------------------------------------

    async def read(self, previous: Catalog) -> Catalog:
        """Read the cluster into a new catalog (generation ``previous.generation + 1``).

        ``previous`` supplies what a failing group/version keeps (its resources, and its
        document's hash and URL when the OpenAPI index cannot be read).  No document is read:
        the catalog's :attr:`~gateway.core.catalog.catalog.Catalog.documents` is :attr:`documents`.

        Raises:
            DiscoveryFailed: the list of group/versions itself could not be read.
        """
        served = await self._served(previous)
        # The walks below touch every resource (thousands with a thousand CRDs): a worker
        # thread does them, so callers are served between its GIL slices.
        kept, seen, seen_gvs = await asyncio.to_thread(self._kept, served)
        self.seen, self.seen_group_versions = seen, seen_gvs
        named = await self._openapi(
            [(g, v) for g, v, _, discovered in kept if discovered], previous
        )
        return await asyncio.to_thread(self._catalog, kept, named, previous)

    def _kept(
        self, served: list[_Served]
    ) -> tuple[
        list[tuple[str, str, tuple[Resource, ...], bool]],
        frozenset[ResourceKey],
        frozenset[GroupVersionKey],
    ]:
        """The served group/versions to keep (seed records, ``--resources``, the bound),
        and what discovery listed."""
        seen = frozenset((s.group, s.version, r.plural) for s in served for r in s.resources)
        seen_gvs = frozenset((s.group, s.version) for s in served)
        kept: list[tuple[str, str, tuple[Resource, ...], bool]] = []
        for s in served:
            resources: list[Resource] = []
            discovered = False
            for r in s.resources:
                seed = self.seed.by_resource(r.group, r.version, r.plural)
                if seed is not None:
                    resources.append(seed)
                elif self.patterns.allows(r.group, r.version, r.plural):
                    resources.append(r)
                    discovered = True
            if resources:
                kept.append((s.group, s.version, tuple(resources), discovered))
        if len(kept) > self.limits.max_group_versions:
            dropped = [_openapi_key(g, v) for g, v, _, _ in kept[self.limits.max_group_versions :]]
            log.warning(
                "discovery: %d group/versions served, keeping the first %d; left out: %s",
                len(kept),
                self.limits.max_group_versions,
                ", ".join(dropped[:20]) + (" ..." if len(dropped) > 20 else ""),
            )
            kept = kept[: self.limits.max_group_versions]
        return kept, seen, seen_gvs

    def _catalog(
        self,
        kept: list[tuple[str, str, tuple[Resource, ...], bool]],
        named: Mapping[GroupVersionKey, tuple[str, str]],
        previous: Catalog,
    ) -> Catalog:
        groups: dict[GroupVersionKey, GroupVersion] = {}
        records: list[Resource] = list(self.seed.values())
        for group, version, served_here, _ in kept:
            digest, url = named.get((group, version), ("", ""))
            groups[(group, version)] = GroupVersion(
                group, version, served_here, openapi_hash=digest, openapi_url=url
            )
            records.extend(r for r in served_here if self.seed.by_resource(*_gvr(r)) is None)
        return Catalog(
            Registry(tuple(records)),
            MappingProxyType(groups),
            previous.generation + 1,
            documents=self.documents,
        )

    # -- group/versions ----------------------------------------------------------------

    async def _served(self, previous: Catalog) -> list[_Served]:
        try:
            core, named = await asyncio.gather(
                self._get("/api", AGGREGATED_ACCEPT, self.limits.max_discovery_bytes, "discovery"),
                self._get("/apis", AGGREGATED_ACCEPT, self.limits.max_discovery_bytes, "discovery"),
            )
        except errors.GatewayError as exc:
            raise DiscoveryFailed(f"cannot read discovery: {exc}") from exc
        served: list[_Served] = []
        legacy: list[tuple[str, str]] = []
        aggregated = True
        for path, body in (("/api", core), ("/apis", named)):
            if not isinstance(body, dict):
                raise DiscoveryFailed(f"discovery {path} answered with something not an object")
            if body.get("kind") == "APIGroupDiscoveryList":
                served.extend(await asyncio.to_thread(parse_aggregated, body))
                continue
            aggregated = False
            if body.get("kind") == "APIVersions":
                legacy.extend(("", v) for v in _strings(body.get("versions")))
            elif body.get("kind") == "APIGroupList":
                for group in body.get("groups") or ():
                    if not isinstance(group, dict) or not isinstance(group.get("name"), str):
                        continue
                    for entry in group.get("versions") or ():
                        version = entry.get("version") if isinstance(entry, dict) else None
                        if isinstance(version, str) and version:
                            legacy.append((group["name"], version))
            else:
                raise DiscoveryFailed(f"discovery {path} answered with kind {body.get('kind')!r}")
        if legacy:
            served.extend(await asyncio.gather(*(self._legacy(g, v) for g, v in legacy)))
        self.aggregated = aggregated
        out: list[_Served] = []
        for s in served:
            if s.fresh:
                out.append(s)
                continue
            before = previous.groups.get((s.group, s.version))
            if before is not None:
                log.warning(
                    "discovery: %s is unavailable right now; keeping what it served before",
                    _openapi_key(s.group, s.version),
                )
                out.append(_Served(s.group, s.version, before.resources))
            else:
                log.warning(
                    "discovery: %s is unavailable right now; not served until it answers",
                    _openapi_key(s.group, s.version),
                )
        return out

    async def _legacy(self, group: str, version: str) -> _Served:
        try:
            body = await self._get(
                _gv_path(group, version),
                "application/json",
                self.limits.max_discovery_bytes,
                "discovery",
            )
        except errors.GatewayError as exc:
            log.warning("discovery: cannot read %s (%s)", _gv_path(group, version), exc)
            return _Served(group, version, (), fresh=False)
        return _Served(group, version, parse_resource_list(group, version, body))

    # -- OpenAPI v3 --------------------------------------------------------------------

    async def _openapi(
        self, wanted: Sequence[GroupVersionKey], previous: Catalog
    ) -> dict[GroupVersionKey, tuple[str, str]]:
        """The hash and URL the OpenAPI v3 index gives each wanted group/version's document
        (``("", "")``: none; the previous ones kept when the index cannot be read)."""

        def kept(key: GroupVersionKey) -> tuple[str, str]:
            before = previous.groups.get(key)
            return (before.openapi_hash, before.openapi_url) if before is not None else ("", "")

        if not wanted:
            return {}
        try:
            index = await self._get(
                "/openapi/v3", "application/json", self.limits.max_discovery_bytes, "openapi"
            )
        except errors.GatewayError as exc:
            self.openapi_served = not isinstance(exc, errors.NotFound)
            if self.openapi_served:
                log.warning("openapi: cannot read the index /openapi/v3 (%s)", exc)
            else:
                log.info("openapi: the upstream serves no /openapi/v3; no documents named")
            return {key: kept(key) for key in wanted}
        self.openapi_served = True
        paths = index.get("paths") if isinstance(index, dict) else None
        paths = paths if isinstance(paths, dict) else {}
        out: dict[GroupVersionKey, tuple[str, str]] = {}
        for key in wanted:
            entry = paths.get(_openapi_key(*key))
            url = entry.get("serverRelativeURL") if isinstance(entry, dict) else None
            if not isinstance(url, str) or not url.startswith(OPENAPI_PREFIX):
                out[key] = ("", "")
                continue
            out[key] = ((parse_qs(urlsplit(url).query).get("hash") or [""])[0], url)
        return out

    async def _document(self, url: str) -> Any:
        """One OpenAPI document, for :attr:`documents` (the reads' limits and gate apply);
        a document another cluster's discovery already holds, byte for byte, is that one
        (:func:`~gateway.core.catalog.openapi_documents.shared_document`)."""
        return await self._get(
            url, "application/json", self.limits.max_openapi_bytes, "openapi", shared=True
        )

    # -- transport ---------------------------------------------------------------------

    async def _get(
        self, path: str, accept: str, limit: int, what: str, *, shared: bool = False
    ) -> Any:
        """GET ``path`` with the gateway's identity, at most ``limit`` bytes, decoded.

        Raises:
            GatewayError: an HTTP error (the tree's error for its status), a transport
                failure or timeout (``Unavailable``/``Timeout``), a body over ``limit``
                (``RequestEntityTooLarge``) or one that is not JSON (``Internal``).
        """
        fetched = await self._get_once(path, accept, limit, what)
        for _ in range(_MAX_REDIRECTS):
            # An OpenAPI document read by the index's hash after it changed: the apiserver
            # redirects to the current hash (301).  Followed on the same upstream only.
            location = fetched.headers.get("location", "")
            if fetched.status not in _REDIRECTS or not _same_origin(location):
                break
            path = location
            fetched = await self._get_once(path, accept, limit, what)
        if fetched.status >= 400:
            raise errors.from_response(fetched.status, fetched.body, fetched.headers)
        try:
            # an OpenAPI document is parsed in a worker thread, in slices: never on the loop
            return await decode(fetched.body, shared=shared)
        except ValueError:
            raise errors.Internal(f"{path}: the upstream sent something that is not JSON") from None

    async def _get_once(self, path: str, accept: str, limit: int, what: str) -> _Fetched:
        async with self._gate:
            self.requests += 1
            started = time.perf_counter()
            code: int | None = None
            try:
                async with asyncio.timeout(self.limits.timeout):
                    fetched = await self._fetch(path, accept, limit)
                code = fetched.status
            except TimeoutError:
                raise errors.Timeout(
                    f"{path}: no answer within {self.limits.timeout:g} s"
                ) from None
            finally:
                if self.metrics is not None:
                    self.metrics.upstream("get", what, code, time.perf_counter() - started)
        return fetched

    async def _fetch(self, path: str, accept: str, limit: int) -> _Fetched:
        try:
            async with self.http.stream("GET", path, headers={"Accept": accept}) as response:
                # the chunks joined once at the end: one copy of a 10 MB document, not
                # a growing buffer's copies and then one more
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > limit:
                        raise errors.RequestEntityTooLarge(
                            f"{_bare(path)}: larger than {limit} bytes; not read"
                        )
                return _Fetched(response.status_code, b"".join(chunks), response.headers)
        except httpx.HTTPError as exc:
            raise errors.Unavailable(f"{_bare(path)}: {type(exc).__name__}") from exc
        except ConfigError as exc:  # the gateway's own credential could not be refreshed
            raise errors.Unavailable("the gateway's upstream credential is unavailable") from exc


#: Redirects a read follows (on the same upstream), and how many in a row.
_REDIRECTS: Final = frozenset((301, 302, 303, 307, 308))
_MAX_REDIRECTS: Final = 3


def _same_origin(location: str) -> bool:
    """A server-relative path (``/openapi/v3/...?hash=``), not another host's URL."""
    return location.startswith("/") and not location.startswith("//")


def _bare(path: str) -> str:
    """A path without its query (an OpenAPI document's ``?hash=``), for messages."""
    return path.split("?", 1)[0]


def _gvr(r: Resource) -> ResourceKey:
    return (r.group, r.version, r.plural)

"""Live reload of the catalog: watch CRDs and APIServices, re-read discovery, swap.

:class:`CatalogReloader` is owned by the lifespan.  It watches
``customresourcedefinitions.apiextensions.k8s.io`` and ``apiservices.apiregistration.k8s.io``
with the gateway's own identity, each through one :class:`~gateway.core.watch.watcher.Watcher`
(resume by resourceVersion, relist and diff after 410: watch rules 6 to 21), and after a
change re-reads discovery and the OpenAPI v3 index
(:class:`~gateway.core.catalog.discovery.Discovery`:
three requests; the documents themselves are read later, by a schema that needs them).  A
burst of changes is one re-read: a change marks the catalog dirty, the reader waits
``settle`` seconds for more, and changes during a read make one more read after it.  A new
catalog is swapped in only when it differs (resources, or a document's hash or URL).

The apiserver updates discovery and OpenAPI a moment after a CRD's ``Established``
condition (and after an APIService becomes available), so each change also records what the
next read must show: the CRD's served versions present (or gone, once deleted), a new
group/version's document named in the OpenAPI index, a changed schema's hash changed.  A
read that does not show it yet is repeated after a short, growing delay (at most
``max_retries`` times), so a CRD appears as soon as the apiserver serves it, without
polling.

Bounded: the watchers keep only what the expectations need of each object (names, served
versions, conditions; never a CRD's schema), one read runs at a time, retries are capped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast

from gateway.core import errors
from gateway.core.catalog import openapi_documents as documents
from gateway.core.catalog.catalog import Catalog, CatalogHolder, GroupVersionKey
from gateway.core.catalog.discovery import Discovery, DiscoveryFailed, ResourceKey, catalog_changed
from gateway.core.model.registry import Registry, Resource, Verb
from gateway.core.model.values import JSON
from gateway.core.process.metrics import Metrics
from gateway.core.upstream.adapter import KubeAdapter
from gateway.core.watch.watcher import Backoff, Watcher, WatchEvent, object_key

log = logging.getLogger(__name__)

__all__ = ["APISERVICES", "CRDS", "CatalogReloader", "Expectations"]

_READ_ONLY: frozenset[Verb] = frozenset(("get", "list", "watch"))

CRDS = Resource(
    group="apiextensions.k8s.io",
    version="v1",
    kind="CustomResourceDefinition",
    plural="customresourcedefinitions",
    singular="customresourcedefinition",
    namespaced=False,
    verbs=_READ_ONLY,
)
APISERVICES = Resource(
    group="apiregistration.k8s.io",
    version="v1",
    kind="APIService",
    plural="apiservices",
    singular="apiservice",
    namespaced=False,
    verbs=_READ_ONLY,
)


@dataclass(slots=True)
class Expectations:
    """What the next discovery read must show, learnt from CRD and APIService events."""

    #: ``(group, version, plural)`` discovery must list, and must no longer list.
    present: set[ResourceKey] = field(default_factory=set)
    absent: set[ResourceKey] = field(default_factory=set)
    #: Group/versions discovery must list, and must no longer list (aggregated APIServices).
    gv_present: set[GroupVersionKey] = field(default_factory=set)
    gv_absent: set[GroupVersionKey] = field(default_factory=set)
    #: Group/versions whose OpenAPI hash must differ from the one given (a changed schema).
    hash_not: dict[GroupVersionKey, str] = field(default_factory=dict)
    #: Group/versions whose OpenAPI document must describe their kinds (a new CRD's): the
    #: apiserver names a new group/version's document in its index before the document
    #: holds the CRD's schema, and nothing announces the moment it does.
    openapi: set[GroupVersionKey] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(
            self.present
            or self.absent
            or self.gv_present
            or self.gv_absent
            or self.hash_not
            or self.openapi
        )

    async def settle(self, discovery: Discovery, catalog: Catalog) -> None:
        """Drop every expectation the last read (``discovery``'s, giving ``catalog``) met.

        A new group/version's document is read to see whether it describes the kinds yet
        (one read per changed group/version, cached by hash: the schema build that follows
        takes the same document)."""
        self.present -= discovery.seen
        self.absent &= discovery.seen
        self.gv_present -= discovery.seen_group_versions
        self.gv_absent &= discovery.seen_group_versions
        for key, old in list(self.hash_not.items()):
            gv = catalog.groups.get(key)
            if gv is None or gv.openapi_hash != old:
                del self.hash_not[key]
        named: list[GroupVersionKey] = []
        awaited = {(group, version) for group, version, _ in self.present}
        for key in list(self.openapi):
            gv = catalog.groups.get(key)
            if gv is None and key in awaited:
                continue  # discovery does not list it yet: its document comes after
            if (
                gv is None  # not served, or not allowed by --resources
                or not discovery.openapi_served
                or all(catalog.is_seed(r) for r in gv.resources)  # no document is named
            ):
                self.openapi.discard(key)
            elif gv.openapi_url or gv.openapi_hash:  # named in the index: read it
                named.append(key)
        if named:
            docs = await documents.load(catalog, named)
            for key in named:
                kinds = [r for r in catalog.groups[key].resources if not catalog.is_seed(r)]
                if _describes(docs.get(key), kinds):
                    self.openapi.discard(key)

    def clear(self) -> None:
        self.present.clear()
        self.absent.clear()
        self.gv_present.clear()
        self.gv_absent.clear()
        self.hash_not.clear()
        self.openapi.clear()


def _without(catalog: Catalog, keys: set[GroupVersionKey]) -> Catalog:
    """``catalog`` less the group/versions ``keys`` (and their resources)."""
    return dataclasses.replace(
        catalog,
        registry=Registry(
            tuple(r for r in catalog.registry.records if (r.group, r.version) not in keys)
        ),
        groups=MappingProxyType({k: v for k, v in catalog.groups.items() if k not in keys}),
        derived={},
    )


def _compared(
    current: Catalog, new: Catalog, pending: set[GroupVersionKey], crd_groups: frozenset[str] | None
) -> tuple[Catalog, bool]:
    """``new`` less ``pending``, with ``crd_groups``, and whether it differs from ``current``."""
    if pending:
        new = _without(new, pending)
    new = dataclasses.replace(new, crd_groups=crd_groups, derived={})  # a new catalog
    return new, catalog_changed(current, new)


def _describes(document: Mapping[str, Any] | None, kinds: list[Resource]) -> bool:
    """Does an OpenAPI v3 document describe the kind of every one of ``kinds``?"""
    if document is None:
        return False
    components = document.get("components")
    schemas = components.get("schemas") if isinstance(components, dict) else None
    described = set()
    for schema in schemas.values() if isinstance(schemas, dict) else ():
        gvks = schema.get("x-kubernetes-group-version-kind") if isinstance(schema, dict) else None
        for g in gvks if isinstance(gvks, list) else ():
            if isinstance(g, dict):
                described.add((g.get("group", ""), g.get("version"), g.get("kind")))
    return all((r.group, r.version, r.kind) in described for r in kinds)


def _conditions(obj: Mapping[str, Any]) -> dict[str, str]:
    status = obj.get("status")
    raw = status.get("conditions") if isinstance(status, dict) else None
    out: dict[str, str] = {}
    for c in raw if isinstance(raw, list) else ():
        if isinstance(c, dict) and isinstance(c.get("type"), str):
            out[c["type"]] = str(c.get("status", ""))
    return out


def crd_served(obj: Mapping[str, Any]) -> frozenset[ResourceKey]:
    """``(group, version, plural)`` a CRD object has the apiserver serve (once Established)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict) or _conditions(obj).get("Established") != "True":
        return frozenset()
    group = spec.get("group")
    names = spec.get("names")
    plural = names.get("plural") if isinstance(names, dict) else None
    if not isinstance(group, str) or not isinstance(plural, str):
        return frozenset()
    return frozenset(
        (group, v["name"], plural)
        for v in spec.get("versions") or ()
        if isinstance(v, dict) and isinstance(v.get("name"), str) and v.get("served") is True
    )


def apiservice_served(obj: Mapping[str, Any]) -> GroupVersionKey | None:
    """The group/version an aggregated APIService serves when available (local: ``None``)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("service") is None:
        return None  # a local APIService: a built-in group or a CRD's, followed elsewhere
    group, version = spec.get("group"), spec.get("version")
    if not isinstance(group, str) or not isinstance(version, str):
        return None
    return (group, version) if _conditions(obj).get("Available") == "True" else None


def _dict(value: Any) -> JSON:
    return value if isinstance(value, dict) else {}


def _slim(obj: JSON) -> JSON:
    """What the reloader needs of a CRD or APIService (never a CRD's schemas)."""
    meta = _dict(obj.get("metadata"))
    spec = _dict(obj.get("spec"))
    names = _dict(spec.get("names"))
    slim_spec: JSON = {
        "group": spec.get("group"),
        "version": spec.get("version"),
        "service": spec.get("service"),
        "names": {"plural": names.get("plural")},
        "versions": [
            {"name": v.get("name"), "served": v.get("served")}
            for v in spec.get("versions") or ()
            if isinstance(v, dict)
        ],
    }
    return {
        "metadata": {
            k: meta.get(k) for k in ("name", "uid", "resourceVersion", "generation") if k in meta
        },
        "spec": slim_spec,
        "status": {"conditions": [{"type": t, "status": s} for t, s in _conditions(obj).items()]},
    }


#: Errors a later attempt may not see (the Watcher retries the same ones).
_TRANSIENT = (
    errors.TooManyRequests,
    errors.Unavailable,
    errors.Timeout,
    errors.ServiceUnavailable,
    errors.Internal,
)


class CatalogReloader:
    """Keeps a :class:`CatalogHolder` current (see the module docstring).

    Args:
        discovery: reads the cluster (with the gateway's identity).
        holder: the catalog everyone reads; swapped whole.
        adapter: the watches' adapter, with the same identity.
        metrics: reloads and served resources are counted here.
        settle: seconds a change waits for more before the read.
        retry: delays between reads that do not yet show what events announced, and
            after a failed read.
        max_retries: reads per announced change before it is given up (and logged).
        failure_backoff: delays between failed reads (retried until one succeeds).

    Attributes:
        reads: discovery reads made since start.
        swaps: catalogs swapped in since start.
    """

    def __init__(
        self,
        discovery: Discovery,
        holder: CatalogHolder,
        adapter: KubeAdapter,
        *,
        metrics: Metrics | None = None,
        settle: float = 0.1,
        retry: Backoff = Backoff(initial=0.1, cap=5.0, jitter=0.2),
        max_retries: int = 12,
        failure_backoff: Backoff = Backoff(initial=1.0, cap=60.0),
    ) -> None:
        self.discovery = discovery
        self.holder = holder
        self.adapter = adapter
        self.metrics = metrics
        self.settle = settle
        self.retry = retry
        self.max_retries = max_retries
        self.failure_backoff = failure_backoff
        self.expect = Expectations()
        self.reads = 0
        self.swaps = 0
        self._dirty = asyncio.Event()
        self._known: dict[str, JSON] = {}
        self._watchers: list[tuple[Watcher, bool]] = []
        #: Have CRDs been listed (or is their watch refused)?  Until then, no catalog
        #: knows which groups CRDs define.
        self._crds_known = False

    # -- start and run -----------------------------------------------------------------

    async def start(self) -> None:
        """List CRDs and APIServices (so later changes are events) and, at the same time,
        read discovery once: a thousand CRDs take seconds to list, and the catalog is served
        meanwhile (its :attr:`~gateway.core.catalog.catalog.Catalog.crd_groups` unknown until the
        CRDs are listed; then discovery is read again, which also catches what changed
        while the lists ran).

        Nothing here raises and nothing waits long: a watch the identity may not make is
        logged and left out, one the upstream does not answer now is tried again by
        :meth:`run`, as is a failed read.
        """

        async def prime(resource: Resource) -> None:
            # CRDs carry their whole schemas (hundreds of KB each): only what the reloader
            # needs is kept, a page of 50 at a time, so a thousand never sit in memory.
            watcher = Watcher(self.adapter, resource, bookmarks=False, keep=_slim, page_size=50)
            primed = await self._prime(watcher)
            if primed is not None:
                self._watchers.append((watcher, primed))
            if resource is CRDS and primed is not False:  # listed, or never to be
                self._crds_known = True

        async def read() -> None:
            try:
                async with asyncio.timeout(self.discovery.limits.timeout):
                    await self.refresh()
            except TimeoutError:
                log.warning("catalog reload: discovery did not answer in time; trying again")

        await asyncio.gather(prime(CRDS), prime(APISERVICES), read())
        self._dirty.set()  # read again: CRD groups known now, and changes during the lists

    async def run(self) -> None:
        """Follow the watches and re-read on changes, until cancelled (the lifespan's task)."""
        async with asyncio.TaskGroup() as tasks:
            for watcher, primed in self._watchers:
                tasks.create_task(
                    self._follow(watcher, primed), name=f"reload-{watcher.resource.plural}"
                )
            tasks.create_task(self._reads(), name="catalog-reload")

    # -- the watches -------------------------------------------------------------------

    async def _prime(self, watcher: Watcher) -> bool | None:
        """List once: ``True`` done, ``False`` to try again later, ``None`` never (refused)."""
        try:
            async with asyncio.timeout(self.discovery.limits.timeout):
                await watcher.prime()
        except TimeoutError:
            return False
        except _TRANSIENT:
            return False
        except errors.NotFound:
            # Not served by this cluster (no aggregation layer, as the demo): nothing there
            # can change, so nothing is missed.
            log.info("catalog reload: %s is not served here", watcher.resource.key)
            return None
        except errors.GatewayError as exc:
            log.warning(
                "catalog reload: not watching %s (%s: %s); a change there shows after a restart",
                watcher.resource.key,
                type(exc).__name__,
                exc,
            )
            return None
        kind = watcher.resource.kind
        for key, obj in list(watcher.state.items()):
            slim = _slim(obj)
            watcher.state[key] = slim  # the watcher keeps only this for its relist diff
            self._known[f"{kind}:{key}"] = slim
        return True

    async def _follow(self, watcher: Watcher, primed: bool) -> None:
        attempt = 0
        while not primed:
            await asyncio.sleep(self.retry.delay(attempt))
            attempt += 1
            result = await self._prime(watcher)
            if result is None:
                return
            primed = result
            if primed:
                if watcher.resource is CRDS:
                    self._crds_known = True
                self._dirty.set()  # what changed before this list: read again
        kind = watcher.resource.kind
        try:
            async with contextlib.aclosing(cast(Any, watcher.events())) as events:
                async for event in events:
                    self._heard(kind, watcher, event)
        except errors.GatewayError as exc:
            log.warning(
                "catalog reload: the watch of %s ended (%s: %s); a change there shows after a "
                "restart",
                watcher.resource.key,
                type(exc).__name__,
                exc,
            )

    def _heard(self, kind: str, watcher: Watcher, event: WatchEvent) -> None:
        if event.type == "RESYNC":
            self._dirty.set()  # changes may have been missed during the gap: read again
            return
        if event.type == "BOOKMARK":
            return
        key = object_key(event.object)
        slim = _slim(event.object)
        if key in watcher.state:
            watcher.state[key] = slim  # the watcher keeps only this for its relist diff
        before = self._known.pop(f"{kind}:{key}", None)
        if event.type != "DELETED":
            self._known[f"{kind}:{key}"] = slim
        if kind == CRDS.kind:
            self._crd_changed(before, None if event.type == "DELETED" else slim)
        else:
            self._apiservice_changed(before, None if event.type == "DELETED" else slim)
        self._dirty.set()

    def _crd_changed(self, before: JSON | None, after: JSON | None) -> None:
        was = crd_served(before) if before is not None else frozenset()
        now = crd_served(after) if after is not None else frozenset()
        self.expect.present |= now
        self.expect.openapi |= {(group, version) for group, version, _ in now - was}
        self.expect.present -= was - now
        self.expect.absent |= was - now
        self.expect.absent -= now
        if before is not None and after is not None:
            generation = (after.get("metadata") or {}).get("generation")
            if generation != (before.get("metadata") or {}).get("generation"):
                catalog = self.holder.current
                for group, version, _ in now & was:
                    gv = catalog.groups.get((group, version))
                    if gv is not None and gv.openapi_hash:  # else no hash can show the change
                        self.expect.hash_not.setdefault((group, version), gv.openapi_hash)

    def _apiservice_changed(self, before: JSON | None, after: JSON | None) -> None:
        was = apiservice_served(before) if before is not None else None
        now = apiservice_served(after) if after is not None else None
        if now is not None:
            self.expect.gv_present.add(now)
            self.expect.gv_absent.discard(now)
        if was is not None and now is None:
            self.expect.gv_absent.add(was)
            self.expect.gv_present.discard(was)

    # -- the reads ---------------------------------------------------------------------

    async def _reads(self) -> None:
        attempt = 0  # reads in a row that did not show what events announced
        failures = 0  # failed reads in a row: retried until one succeeds
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.settle)  # coalesce a burst into one read
            self._dirty.clear()
            try:
                async with asyncio.timeout(self.discovery.limits.timeout * 3):
                    ok = await self.refresh()
            except TimeoutError:
                log.warning("catalog reload: discovery did not answer in time")
                self._count("failed")
                ok = False
            if not ok:
                delay = self.failure_backoff.delay(failures)
                failures += 1
            elif not self.expect:
                attempt = failures = 0
                continue
            elif attempt >= self.max_retries:
                log.warning(
                    "catalog reload: discovery still does not show %s after %d reads; giving up "
                    "until the next change",
                    self._describe_expectations(),
                    attempt + 1,
                )
                self.expect.clear()
                attempt = failures = 0
                with contextlib.suppress(TimeoutError):  # serve what there is, typed or not
                    async with asyncio.timeout(self.discovery.limits.timeout * 3):
                        await self.refresh()
                continue
            else:
                failures = 0
                delay = self.retry.delay(attempt)
                attempt += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._dirty.wait()
            self._dirty.set()

    async def refresh(self) -> bool:
        """Read discovery once and swap in the result if it changed; ``False``: read failed."""
        self.reads += 1
        try:
            new = await self.discovery.read(self.holder.current)
        except DiscoveryFailed as exc:
            log.warning("catalog reload: %s; keeping the current catalog", exc)
            self._count("failed")
            return False
        await self.expect.settle(self.discovery, new)
        # A new group/version whose document does not describe its kinds yet is not served
        # yet: served now, its kinds would be untyped in GraphQL until the next change.
        pending = {k for k in self.expect.openapi if k not in self.holder.current.groups}
        crd_groups = self._crd_groups() if self._crds_known else None
        # Comparing two catalogs walks every resource of both (thousands with a thousand
        # CRDs, milliseconds of Python): a worker thread does it, the loop serves meanwhile.
        new, changed = await asyncio.to_thread(
            _compared, self.holder.current, new, pending, crd_groups
        )
        if not changed:
            self._count("unchanged")
            return True
        old = self.holder.current
        self.holder.swap(new)
        self.swaps += 1
        self._count("swapped")
        added = len(new.registry.records) - len(old.registry.records)
        log.info(
            "catalog: generation %d serves %d resources in %d group/versions (%+d)",
            new.generation,
            len(new.registry.records),
            len(new.groups),
            added,
        )
        return True

    def _crd_groups(self) -> frozenset[str]:
        """The groups of the CRDs the watch knows."""
        prefix = f"{CRDS.kind}:"
        return frozenset(
            group
            for key, obj in self._known.items()
            if key.startswith(prefix)
            and isinstance(group := _dict(obj.get("spec")).get("group"), str)
        )

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.catalog_reload(outcome)

    def _describe_expectations(self) -> str:
        parts = [f"{g}/{v}/{p}" for g, v, p in sorted(self.expect.present)]
        parts += [f"no {g}/{v}/{p}" for g, v, p in sorted(self.expect.absent)]
        parts += [f"{g}/{v}" for g, v in sorted(self.expect.gv_present)]
        parts += [f"no {g}/{v}" for g, v in sorted(self.expect.gv_absent)]
        parts += [f"a new OpenAPI hash of {g}/{v}" for g, v in sorted(self.expect.hash_not)]
        parts += [f"the OpenAPI document of {g}/{v}" for g, v in sorted(self.expect.openapi)]
        return ", ".join(parts) or "nothing"

"""The resource registry: every served Kubernetes resource is one frozen record.

The adapter, both front ends, the protos and the SDL are built from these records, so
adding a resource is a new entry (plus its schema), never new resolver code.  Verbs and
subresources are checked here, once, before any HTTP call is made.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal
from urllib.parse import quote

from gateway.core.errors import MethodNotSupported, UnknownResource

Verb = Literal["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]

ALL_VERBS: frozenset[Verb] = frozenset(
    ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
)


@dataclass(frozen=True, slots=True)
class Subresource:
    """A subresource such as ``pods/status``, with the verbs the Kubernetes API serves for it."""

    name: str
    verbs: frozenset[Verb]
    #: ``json`` subresources take and return objects; ``text`` ones (pod log) stream bytes.
    content: Literal["json", "text"] = "json"


@dataclass(frozen=True, slots=True)
class Resource:
    """One served resource: where it lives upstream and what may be done with it."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    verbs: frozenset[Verb] = ALL_VERBS
    subresources: Mapping[str, Subresource] = field(default_factory=dict)
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` of objects of this kind (``v1``, ``coordination.k8s.io/v1``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def key(self) -> str:
        """Stable registry key: ``plural.group`` (``pods``, ``leases.coordination.k8s.io``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def check(self, verb: Verb, subresource: str | None = None) -> None:
        """Refuse a verb (or subresource verb) this resource does not serve.

        Raises:
            MethodNotSupported: before any request is built.
        """
        if subresource is None:
            if verb not in self.verbs:
                raise MethodNotSupported(f"{self.plural} does not support {verb!r}")
            return
        sub = self.subresources.get(subresource)
        if sub is None:
            raise MethodNotSupported(f"{self.plural} has no subresource {subresource!r}")
        if verb not in sub.verbs:
            raise MethodNotSupported(f"{self.plural}/{subresource} does not support {verb!r}")

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The upstream URL path; ``namespace=None`` on a namespaced list means all namespaces."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{_segment(namespace)}"
        elif self.namespaced and name is not None:
            raise ValueError(f"{self.kind} is namespaced: a namespace is required")
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{_segment(name)}"
            if subresource is not None:
                base += f"/{subresource}"
        return base


def _segment(value: str) -> str:
    # Kubernetes names never contain '/', but a caller-supplied string must not be able to
    # walk the URL space, so every path segment is percent-encoded.
    if not value or value in (".", ".."):
        raise ValueError(f"invalid path segment {value!r}")
    return quote(value, safe="")


_READ_WRITE: frozenset[Verb] = frozenset(("get", "update", "patch"))

POD = Resource(
    group="",
    version="v1",
    kind="Pod",
    plural="pods",
    singular="pod",
    namespaced=True,
    short_names=("po",),
    subresources=MappingProxyType(
        {
            "log": Subresource("log", frozenset(("get",)), content="text"),
            "status": Subresource("status", _READ_WRITE),
            "ephemeralcontainers": Subresource("ephemeralcontainers", _READ_WRITE),
        }
    ),
)
EVENT = Resource(
    group="",
    version="v1",
    kind="Event",
    plural="events",
    singular="event",
    namespaced=True,
    short_names=("ev",),
)
ENDPOINTS = Resource(
    group="",
    version="v1",
    kind="Endpoints",
    plural="endpoints",
    singular="endpoints",
    namespaced=True,
    short_names=("ep",),
)
LEASE = Resource(
    group="coordination.k8s.io",
    version="v1",
    kind="Lease",
    plural="leases",
    singular="lease",
    namespaced=True,
)
IMAGE = Resource(
    group="image.openshift.io",
    version="v1",
    kind="Image",
    plural="images",
    singular="image",
    namespaced=False,
)


class Registry(Mapping[str, Resource]):
    """Resources by key, with lookup by kind, plural or short name.

    A resource served in several versions of one group (``v1`` and ``v1beta1``) has one key
    (``plural.group``): the key, the kind and the plural name the first record given, so
    list the preferred version first.  :attr:`records` keeps every record and
    :meth:`by_resource` finds each one by group, version and plural.
    """

    def __init__(self, resources: tuple[Resource, ...]) -> None:
        #: Every record, in the order given (all versions).
        self.records = resources
        self._by_key: dict[str, Resource] = {}
        for r in resources:
            self._by_key.setdefault(r.key, r)
        self._by_gvr = {(r.group, r.version, r.plural): r for r in resources}
        self._aliases: dict[str, Resource] = {}
        for r in resources:
            for alias in (r.key, r.kind, r.kind.lower(), r.plural, r.singular, *r.short_names):
                self._aliases.setdefault(alias, r)

    def __getitem__(self, key: str) -> Resource:
        return self._by_key[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def lookup(self, name: str) -> Resource:
        """Find a resource by key, kind, plural, singular or short name.

        Raises:
            UnknownResource: the gateway does not serve it.
        """
        try:
            return self._aliases[name]
        except KeyError:
            raise UnknownResource(f"the gateway does not serve resource {name!r}") from None

    def by_resource(self, group: str, version: str, plural: str) -> Resource | None:
        """The resource served at ``group/version/plural``, if any."""
        return self._by_gvr.get((group, version, plural))


REGISTRY = Registry((POD, EVENT, ENDPOINTS, LEASE, IMAGE))

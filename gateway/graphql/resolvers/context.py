"""What every resolver reaches through ``info.context``: the core, the caller, the loaders."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.core import (
    ANONYMOUS,
    Credential,
    KubeAdapter,
    credential_of_authorization,
    credential_of_token,
)
from gateway.graphql.resolvers.loaders import Loaders

if TYPE_CHECKING:
    from gateway.core import Cluster, Views, Visibility, WatchHub

_ids = itertools.count(1)


def credential_from_header(authorization: str | None) -> Credential:
    """The caller's credential from an ``Authorization: Bearer <token>`` value.

    Raises:
        Unauthorized: present but malformed (the same answer on every transport).
    """
    return credential_of_authorization(authorization)


def credential_from_payload(payload: Any) -> Credential:
    """The credential of a WebSocket ``connection_init`` payload.

    Accepted shapes: ``{"Authorization": "Bearer ..."}`` (any case of the key, also nested
    under ``headers``) or ``{"authToken": "..."}``.

    Raises:
        Unauthorized: a credential is there but malformed.
    """
    if not isinstance(payload, Mapping):
        return ANONYMOUS
    headers = payload.get("headers")
    for source in (payload, headers if isinstance(headers, Mapping) else {}):
        for key, value in source.items():
            if isinstance(key, str) and key.lower() == "authorization" and isinstance(value, str):
                return credential_from_header(value)
    token = payload.get("authToken")
    if isinstance(token, str) and token.strip():
        return credential_of_token(token.strip())
    return ANONYMOUS


@dataclass(slots=True)
class Context:
    """The per-operation context (per request; per subscriber for subscriptions).

    Attributes:
        adapter: the shared core adapter.
        credential: the caller's credential; every upstream call carries it.
        watches: the core's shared watch hub (subscriptions join it).
        request_id: for logs (never the token).
        resume_from: a version a watch subscription resumes after whatever its document
            says (an SSE ``Last-Event-ID``).
    """

    adapter: KubeAdapter
    credential: Credential
    watches: WatchHub | None = None
    request_id: str = field(default_factory=lambda: f"gql-{next(_ids)}")
    resume_from: str | None = None
    #: The clusters the gateway serves (the ``clusters`` query lists them).
    clusters: Sequence[Cluster] = ()
    #: Which of :attr:`clusters` the caller may see (``None``: all of them; a gateway
    #: without a fleet).
    visibility: Visibility | None = None
    #: The cluster's view caches (``None``: views are not served here).
    views: Views | None = None
    _loaders: Loaders | None = None

    @property
    def loaders(self) -> Loaders:
        """The DataLoaders of this operation (created on first use)."""
        if self._loaders is None:
            self._loaders = Loaders(self.adapter, self.credential)
        return self._loaders

    def at(self, info: Any) -> Context:
        """The context of the cluster a field's data comes from: this one (a fleet
        operation's context answers per cluster:
        :class:`~gateway.graphql.endpoints.fleet.FleetContext`)."""
        return self

    def reset_loaders(self) -> None:
        """Forget cached loads: a shared subscription calls this between events."""
        self._loaders = None

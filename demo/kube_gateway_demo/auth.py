"""Bearer-token authentication and a small RBAC-like authoriser.

Anonymous requests are refused (401) as by an apiserver with ``--anonymous-auth=false``,
unless the tokens grant the empty token (:data:`ANONYMOUS`): then they are that grant's, as
``system:anonymous`` is on a cluster that lets anonymous requests in.  Denied requests get
the apiserver's exact ``Forbidden`` wording.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal

from kube_gateway_demo.status import DemoApiError, forbidden

READ_VERBS: Final = frozenset(("get", "list", "watch"))


@dataclass(frozen=True, slots=True)
class TokenGrant:
    """What one bearer token may do.

    Attributes:
        user: the user name shown in Forbidden messages.
        namespaces: namespaces whose namespaced resources the user may access, or ``"*"``
            for all of them (needed for lists and watches across all namespaces).
        cluster_scoped: whether cluster-scoped resources (images, namespaces) are allowed.
        read_only: only ``get``, ``list`` and ``watch``.
        groups: groups a TokenReview gives the user besides ``demo:users`` and
            ``system:authenticated`` (rights stay the grant's).
    """

    user: str
    namespaces: frozenset[str] | Literal["*"]
    cluster_scoped: bool = False
    read_only: bool = False
    groups: tuple[str, ...] = ()

    def allows(self, verb: str, *, namespaced: bool, namespace: str | None) -> bool:
        """Whether ``verb`` on a resource in ``namespace`` (None: cluster scope) is allowed."""
        if self.read_only and verb not in READ_VERBS:
            return False
        if not namespaced:
            return self.cluster_scoped
        if self.namespaces == "*":
            return True
        return namespace is not None and namespace in self.namespaces


#: The key of the grant of requests without a token (none by default: they get 401).
ANONYMOUS: Final = ""

ADMIN_TOKEN: Final = "admin-token"
"""The default tokens' administrator: what a gateway serving the demo uses as its own
identity (discovery, shared watches) and puts in GraphiQL's example tabs."""

DEFAULT_TOKENS: Final[Mapping[str, TokenGrant]] = MappingProxyType(
    {
        ADMIN_TOKEN: TokenGrant("admin", "*", cluster_scoped=True),
        "viewer-token": TokenGrant("viewer", "*", cluster_scoped=True, read_only=True),
        "alice-token": TokenGrant("alice", frozenset({"demo"})),
    }
)
"""The tokens a :class:`~kube_gateway_demo.DemoUpstream` accepts when given ``tokens=None``:

* ``admin-token`` - user ``admin``, everything;
* ``viewer-token`` - user ``viewer``, read-only everywhere;
* ``alice-token`` - user ``alice``, everything in namespace ``demo`` only.
"""


@dataclass(frozen=True, slots=True)
class Attributes:
    """The authorisation attributes of a resource request."""

    verb: str
    resource: str
    group: str
    namespace: str | None
    name: str | None = None
    subresource: str | None = None
    namespaced: bool = True


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def denial(grant: TokenGrant, attrs: Attributes) -> DemoApiError:
    """The apiserver's Forbidden error for ``attrs`` (``responsewriters.ForbiddenStatusError``)."""
    resource = attrs.resource
    if attrs.subresource:
        resource = f"{resource}/{attrs.subresource}"
    if attrs.namespace:
        reason = (
            f'User "{grant.user}" cannot {attrs.verb} resource "{resource}" in API group '
            f'"{attrs.group}" in the namespace "{attrs.namespace}"'
        )
    else:
        reason = (
            f'User "{grant.user}" cannot {attrs.verb} resource "{resource}" in API group '
            f'"{attrs.group}" at the cluster scope'
        )
    return forbidden(attrs.resource, attrs.group, attrs.name or "", reason)


def may_impersonate(grant: TokenGrant) -> bool:
    """Whether a token may impersonate (``impersonate`` on users, groups...): the
    administrator's only, as a gateway's identity in impersonate mode would be granted."""
    return grant.namespaces == "*" and grant.cluster_scoped and not grant.read_only


def impersonated(
    grant: TokenGrant, headers: Mapping[str, str], tokens: Mapping[str, TokenGrant]
) -> TokenGrant:
    """The grant a request is served with: its token's, or the user's it impersonates.

    ``Impersonate-User`` names a user; the request is then served with that user's grant
    (the first token of that name), or with no rights at all for a user no token has.
    Groups, uid and extras are accepted and not otherwise used (the demo's rights are per
    user).  Only a token that :func:`may_impersonate` may; others get the apiserver's 403.
    """
    user = headers.get("impersonate-user")
    if user is None:
        if any(name.startswith("impersonate-") for name in headers):
            raise forbidden("", "", "", "requested impersonation without Impersonate-User")
        return grant
    if not may_impersonate(grant):
        raise forbidden(
            "users",
            "",
            user,
            f'User "{grant.user}" cannot impersonate resource "users" in API group "" at the '
            "cluster scope",
        )
    return next((g for g in tokens.values() if g.user == user), TokenGrant(user, frozenset()))


def self_subject_review(grant: TokenGrant, *, anonymous: bool) -> dict[str, object]:
    """The apiserver's answer to a SelfSubjectReview: who the caller is (or, impersonating,
    whom it impersonates).  An anonymous caller is refused as ``system:anonymous`` is on a
    cluster (only ``system:authenticated`` may create selfsubjectreviews)."""
    if anonymous:
        raise forbidden(
            "selfsubjectreviews",
            "authentication.k8s.io",
            "",
            f'User "{grant.user}" cannot create resource "selfsubjectreviews" in API group '
            '"authentication.k8s.io" at the cluster scope',
        )
    return {
        "kind": "SelfSubjectReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "status": {
            "userInfo": {
                "username": grant.user,
                "uid": f"demo-{grant.user}",
                "groups": ["demo:users", *grant.groups, "system:authenticated"],
            }
        },
    }


def token_review(
    grant: TokenGrant, review: object, tokens: Mapping[str, TokenGrant]
) -> dict[str, object]:
    """The apiserver's answer to a TokenReview: who ``spec.token`` is (only a token that
    :func:`may_impersonate` may ask, as ``create tokenreviews`` is the administrator's)."""
    if not may_impersonate(grant):
        raise forbidden(
            "tokenreviews",
            "authentication.k8s.io",
            "",
            f'User "{grant.user}" cannot create resource "tokenreviews" in API group '
            '"authentication.k8s.io" at the cluster scope',
        )
    spec = review.get("spec") if isinstance(review, dict) else None
    token = spec.get("token") if isinstance(spec, dict) else None
    found = tokens.get(token) if isinstance(token, str) else None
    status: dict[str, object] = {"authenticated": found is not None}
    if found is not None:
        status["user"] = {
            "username": found.user,
            "uid": f"demo-{found.user}",
            "groups": ["demo:users", *found.groups, "system:authenticated"],
        }
    else:
        status["error"] = "invalid bearer token"
    return {
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": {"token": ""},
        "status": status,
    }

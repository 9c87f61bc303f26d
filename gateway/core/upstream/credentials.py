"""The caller's identity as it travels upstream, and how a transport's header becomes one.

Every transport (HTTP, WebSocket ``connection_init``, SSE, gRPC metadata) parses the caller's
``Authorization`` value with :func:`credential_of_authorization`, so a malformed one is
refused the same way everywhere; the adapter sends :meth:`Credential.headers` upstream.  A
credential never prints its token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import quote

from gateway.core import errors


@dataclass(frozen=True, slots=True)
class UserInfo:
    """Who a caller is, as the home cluster's TokenReview said (``status.user``).

    In impersonate mode (``--identity impersonate``) this, not the caller's token, travels
    to every cluster, as ``Impersonate-*`` headers next to that cluster's own gateway
    credential, so each cluster's RBAC decides for this user.
    """

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    #: ``(key, values)`` pairs, sorted by key (a stable identity key).
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The impersonation headers of this user: one ``Impersonate-Group`` per group
        (the apiserver does not split a comma-joined one), each extra key percent-encoded
        as the Kubernetes docs ask (a header name cannot carry every character a key may);
        values as UTF-8 bytes, as the apiserver reads them."""
        out = [("Impersonate-User", self.username)]
        out += [("Impersonate-Group", group) for group in self.groups]
        if self.uid:
            out.append(("Impersonate-Uid", self.uid))
        for key, values in self.extra:
            name = "Impersonate-Extra-" + quote(key, safe="")
            out += [(name, value) for value in values]
        return [(name.encode("ascii"), value.encode("utf-8")) for name, value in out]

    def key(self) -> str:
        """Everything that makes this identity, in one unambiguous string: what budgets,
        shared subscriptions and access reviews key on (hashed, see ``budget.scope_of``)."""
        parts = [self.username, self.uid, *self.groups]
        for name, values in self.extra:
            parts += [name, *values]
        return "impersonate\0" + "\0".join(f"{len(p)}:{p}" for p in parts)


class Endable(Protocol):
    """A stream a caller reads (a watch subscription, a followed log) that can be ended."""

    @property
    def closed(self) -> bool: ...

    def end(self, error: errors.GatewayError | None = None) -> None: ...


class Proof(Protocol):
    """How an impersonated caller's authentication is checked again while its streams run
    (:class:`~gateway.core.upstream.identity.TokenProof`): a stream it follows is ended with
    ``Unauthorized`` once the token is refused or expires."""

    def follow(self, stream: Endable) -> None: ...


@dataclass(frozen=True, slots=True)
class Credential:
    """The caller's identity as it travels upstream: a bearer token, or none (anonymous);
    in impersonate mode, once authenticated, the user it was found to be (and no token)."""

    token: str | None = field(default=None, repr=False)
    #: Set in impersonate mode once the home cluster authenticated the token (then
    #: ``token`` is ``None``: the caller's token travels to no cluster).
    user: UserInfo | None = field(default=None, repr=False)
    #: With ``user``: what checks the token again while the caller's streams run (it is
    #: no part of the identity: two tokens of one user are one identity).
    proof: Proof | None = field(default=None, repr=False, compare=False)

    def headers(self) -> dict[str, str] | list[tuple[bytes, bytes]]:
        """What the caller's requests carry upstream: its token, or (impersonate mode) the
        impersonation headers of its user (the cluster's client adds the gateway's own
        credential to those)."""
        if self.user is not None:
            return self.user.headers()
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @property
    def subject(self) -> str | None:
        """What identifies the caller (the token, or the impersonated user's key); ``None``:
        anonymous.  Only ever used hashed."""
        if self.user is not None:
            return self.user.key()
        return self.token

    def __repr__(self) -> str:
        if self.user is not None:
            return "Credential(<impersonated user>)"
        return "Credential(<token>)" if self.token else "Credential(anonymous)"


ANONYMOUS = Credential()

#: What a caller who sent no credential is told when the upstream refuses it (401): which
#: header to send on each transport and where a token comes from, so a first call that
#: fails says how to make the second one work.
NO_CREDENTIAL_HINT = (
    "no credential was sent: send the header 'Authorization: Bearer <token>' "
    "(gRPC: 'authorization' metadata); a token comes from "
    "'kubectl create token <serviceaccount>', an OIDC id-token or a service account token"
)


def refused_without_credential(error: errors.GatewayError) -> errors.GatewayError:
    """``error`` with :data:`NO_CREDENTIAL_HINT` when it is the upstream's refusal of a
    request that carried no credential (the caller decides that it carried none): a 401
    becomes the hint; a 403 (a cluster that lets anonymous requests in, then refuses
    ``system:anonymous``) keeps the upstream's message, the hint appended.  Any other error
    is left as it is; reason and code stay the upstream's."""
    if isinstance(error, errors.Unauthorized):
        message = f"Unauthorized: {NO_CREDENTIAL_HINT}"
    elif isinstance(error, errors.Forbidden):
        message = f"{error.message}; {NO_CREDENTIAL_HINT}"
    else:
        return error
    return type(error)(
        message,
        reason=error.reason,
        causes=error.causes,
        details=error.details,
        code=error.status_code,
    )


#: What a bearer token may contain: visible ASCII (it travels in an HTTP header).
_TOKEN_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F))


def credential_of_token(token: str) -> Credential:
    """A caller's bearer token as a credential.

    Raises:
        Unauthorized: it is empty or has characters no token has (spaces, control
            characters, non-ASCII): refused here rather than sent upstream.
    """
    if not token or not _TOKEN_CHARS.issuperset(token):
        raise errors.Unauthorized(
            "the bearer token is malformed (a token is visible ASCII without spaces)",
            reason="Unauthorized",
        )
    return Credential(token)


def credential_of_authorization(value: str | bytes | None) -> Credential:
    """The caller's credential from an ``Authorization`` header (or gRPC metadata) value.

    No value, or an empty one, is anonymous; ``Bearer <token>`` is that token; anything else
    is refused, the same way on every transport.

    Raises:
        Unauthorized: the value is present but not ``Bearer <token>`` with a well-formed token.
    """
    if value is None:
        return ANONYMOUS
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if not text.strip():
        return ANONYMOUS
    scheme, _, token = text.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise errors.Unauthorized(
            "the Authorization value must be 'Bearer <token>'", reason="Unauthorized"
        )
    return credential_of_token(token.strip())

"""The caller's identity as it travels upstream, and how a transport's header becomes one.

Every transport (HTTP, WebSocket ``connection_init``, SSE, gRPC metadata) parses the caller's
``Authorization`` value with :func:`credential_of_authorization`, so a malformed one is
refused the same way everywhere; the adapter sends :meth:`Credential.headers` upstream.  A
credential never prints its token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.core import errors


@dataclass(frozen=True, slots=True)
class Credential:
    """The caller's identity as it travels upstream: a bearer token, or none (anonymous)."""

    token: str | None = field(default=None, repr=False)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def __repr__(self) -> str:
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

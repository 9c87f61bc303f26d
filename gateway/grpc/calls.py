"""What every call brings along: the caller's credential and its deadline.

The token comes from the ``authorization: Bearer <token>`` metadata and travels upstream as
the caller's own :class:`~gateway.core.upstream.credentials.Credential`; it is never logged.  A
call's
deadline becomes the upstream request timeout, so the upstream gives up when the caller has.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from gateway.core import (
    ANONYMOUS,
    Credential,
    credential_of_authorization,
    errors,
    refuse_impersonation,
)

__all__ = ["credential_of", "timeout_of"]

#: Upstream requests end this much before the caller's deadline, so the caller gets our
#: DEADLINE_EXCEEDED (with details) rather than a bare cancellation.
DEADLINE_MARGIN: Final = 0.05


def credential_of(metadata: Iterable[tuple[str, Any]] | None) -> Credential:
    """The caller's credential from call metadata (no ``authorization``: anonymous).

    Raises:
        Forbidden: a metadata key names an impersonation header (``impersonate-*``):
            callers cannot choose whom the gateway impersonates.
        Unauthorized: ``authorization`` is present but not ``Bearer <token>`` with a
            well-formed token.
    """
    refuse_impersonation((key for key, _ in metadata or ()), "gRPC metadata key")
    for key, value in metadata or ():
        if key.lower() == "authorization":
            return credential_of_authorization(value if isinstance(value, bytes) else str(value))
    return ANONYMOUS


def timeout_of(remaining: float | None) -> float | None:
    """The upstream timeout for a call with ``remaining`` seconds (``None``: no deadline).

    Raises:
        Timeout: the deadline has already passed.
    """
    if remaining is None:
        return None
    if remaining <= DEADLINE_MARGIN:
        raise errors.Timeout("the call's deadline passed before the upstream was asked")
    return remaining - DEADLINE_MARGIN

"""GraphQL errors: the core error tree mapped through ONE table, and the gateway's own errors.

Every error a client sees carries ``extensions {code, httpStatus, reason, causes,
retryAfter}``.  Core :class:`~gateway.core.errors.GatewayError` subclasses are found in
:data:`CODES` by walking the class hierarchy, so a new subclass inherits its parent's code.
Anything unrecognised becomes ``INTERNAL`` with a generic message: no exception text, stack
or token ever reaches a client (the original is logged with a request id instead).
"""

from __future__ import annotations

import logging
from typing import Any

from graphql import GraphQLError

from gateway.core import errors as core

log = logging.getLogger(__name__)

#: The one table: core error class -> GraphQL ``extensions.code``.
CODES: dict[type[core.GatewayError], str] = {
    core.UnknownResource: "NOT_FOUND",
    core.MethodNotSupported: "METHOD_NOT_ALLOWED",
    core.InvalidView: "BAD_USER_INPUT",
    core.BadRequest: "BAD_REQUEST",
    core.Unauthorized: "UNAUTHENTICATED",
    core.Forbidden: "FORBIDDEN",
    core.ClusterRemoved: "CLUSTER_REMOVED",
    core.NotFound: "NOT_FOUND",
    core.MethodNotAllowed: "METHOD_NOT_ALLOWED",
    core.AlreadyExists: "ALREADY_EXISTS",
    core.Conflict: "CONFLICT",
    core.Gone: "GONE",
    core.RequestEntityTooLarge: "PAYLOAD_TOO_LARGE",
    core.UnsupportedMediaType: "UNSUPPORTED_MEDIA_TYPE",
    core.InvalidParameter: "INVALID",
    core.Invalid: "INVALID",
    core.SlowSubscriber: "SLOW_SUBSCRIBER",
    core.ResourceExhausted: "RESOURCE_EXHAUSTED",
    core.TooManyRequests: "TOO_MANY_REQUESTS",
    core.Internal: "INTERNAL",
    core.Draining: "DRAINING",
    core.ServiceUnavailable: "SERVICE_UNAVAILABLE",
    core.Timeout: "TIMEOUT",
    core.Unavailable: "UNAVAILABLE",
    core.GatewayError: "INTERNAL",
}

INTERNAL_MESSAGE = "internal error"


class ApiError(Exception):
    """An error of the GraphQL layer itself (limits, transport, bad requests).

    Args:
        message: safe to show a client.
        code: ``extensions.code``.
        http_status: the HTTP status it stands for.
        extra: further extensions (``resourceVersion`` of a slow subscriber...).
    """

    def __init__(self, message: str, *, code: str, http_status: int = 400, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.http_status = http_status
        self.extra = extra

    def extensions(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "httpStatus": self.http_status,
            "reason": None,
            "causes": [],
            "retryAfter": None,
            **self.extra,
        }


def code_of(exc: core.GatewayError) -> str:
    """The ``extensions.code`` of a core error (the nearest class in :data:`CODES`)."""
    for cls in type(exc).__mro__:
        code = CODES.get(cls)
        if code is not None:
            return code
    return "INTERNAL"


def gateway_extensions(exc: core.GatewayError) -> dict[str, Any]:
    """The extensions of a core error (a slow subscriber's also carry its resume point)."""
    out = {
        "code": code_of(exc),
        "httpStatus": exc.status_code,
        "reason": exc.reason,
        "causes": [c.as_dict() for c in exc.causes],
        "retryAfter": exc.retry_after,
    }
    if isinstance(exc, core.SlowSubscriber | core.Draining):
        out["resourceVersion"] = exc.resource_version
    if exc.cluster is not None:
        out["cluster"] = exc.cluster
    return out


def _internal() -> dict[str, Any]:
    return {
        "code": "INTERNAL",
        "httpStatus": 500,
        "reason": "InternalError",
        "causes": [],
        "retryAfter": None,
    }


def format_error(error: GraphQLError) -> dict[str, Any]:
    """One GraphQL error as it goes on the wire, with the extensions of its cause."""
    original = error.original_error
    out: dict[str, Any]
    if original is None:
        # A GraphQL request error (syntax, validation, variable coercion): the message is
        # the spec's own and is safe.
        out = dict(error.formatted)
        ext = dict(out.get("extensions") or {})
        ext.setdefault("code", "GRAPHQL_VALIDATION_FAILED")
        ext.setdefault("httpStatus", 400)
        ext.setdefault("reason", None)
        ext.setdefault("causes", [])
        ext.setdefault("retryAfter", None)
        out["extensions"] = ext
        return out
    out = {"message": "", "locations": None, "path": error.path}
    if error.locations is not None:
        out["locations"] = [{"line": loc.line, "column": loc.column} for loc in error.locations]
    if isinstance(original, core.GatewayError):
        out["message"] = original.message
        out["extensions"] = gateway_extensions(original)
    elif isinstance(original, ApiError):
        out["message"] = original.message
        out["extensions"] = original.extensions()
    elif isinstance(original, GraphQLError):
        # Scalar coercion and the like raise GraphQLError from inside a resolver.
        out["message"] = original.message
        out["extensions"] = {**_internal(), "code": "BAD_USER_INPUT", "httpStatus": 400}
    else:
        log.error(
            "unexpected error in a GraphQL resolver at %s: %s",
            error.path,
            type(original).__name__,
            exc_info=original,
        )
        out["message"] = INTERNAL_MESSAGE
        out["extensions"] = _internal()
    if out["locations"] is None:
        del out["locations"]
    if out["path"] is None:
        del out["path"]
    return out


def format_exception(exc: Exception) -> dict[str, Any]:
    """An exception raised outside execution (a subscription source, a transport step)."""
    if isinstance(exc, GraphQLError):
        return format_error(exc)
    return format_error(GraphQLError("", original_error=exc))

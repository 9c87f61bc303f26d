"""The one error tree of the gateway.

Upstream ``Status`` objects and transport failures are translated here, in one place,
into typed exceptions; both front ends map this tree to their own wire errors through a
single table each.  Messages never contain credentials.

::

    GatewayError
    ├── BadRequest (400)     ── UnknownResource, MethodNotSupported (refused before any call)
    ├── Unauthorized (401)
    ├── Forbidden (403)
    ├── NotFound (404)
    │   └── ClusterRemoved (the cluster a subscription reads was removed from the gateway)
    ├── MethodNotAllowed (405)
    ├── AlreadyExists (409, reason AlreadyExists)
    ├── Conflict (409)
    ├── Gone (410, reasons Expired / Gone)
    ├── RequestEntityTooLarge (413)
    ├── UnsupportedMediaType (415)
    ├── Invalid (422, with causes)    ── InvalidParameter (request options refused before any call)
    ├── TooManyRequests (429, with retry_after)
    │   └── ResourceExhausted (a gateway budget: upstream streams, subscriptions)
    │       └── SlowSubscriber (a subscriber fell behind; carries its resume point)
    ├── Internal (500 and anything unrecognised)
    ├── ServiceUnavailable (503)
    │   └── Draining (the gateway is shutting down; a subscription's carries its resume point)
    ├── Timeout (504 or reason Timeout)
    └── Unavailable (transport: refused, reset, TLS, upstream unreachable)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson


@dataclass(frozen=True, slots=True)
class Cause:
    """One entry of ``Status.details.causes``: which field is wrong and why."""

    reason: str
    message: str
    field: str

    def as_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}


class GatewayError(Exception):
    """Base of every error the core raises.

    Attributes:
        code: the HTTP status code the apiserver used (or would use).
        reason: the Kubernetes ``StatusReason`` (``NotFound``, ``Invalid``...).
        message: human-readable message, safe to show a caller.
        causes: field-level causes (``Invalid`` mostly).
        retry_after: seconds the caller should wait, when the upstream said so.
        details: ``Status.details`` name / group / kind, when present.
    """

    code: ClassVar[int] = 500
    default_reason: ClassVar[str] = "InternalError"
    #: The cluster whose answer this is, in a fleet operation's per-cluster results.
    cluster: str | None = None

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        causes: tuple[Cause, ...] = (),
        retry_after: float | None = None,
        details: Mapping[str, Any] | None = None,
        code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or self.default_reason
        self.causes = causes
        self.retry_after = retry_after
        self.details: Mapping[str, Any] = details or {}
        self.status_code = code if code is not None else self.code

    def to_status(self) -> dict[str, Any]:
        """This error as a Kubernetes ``Status`` object."""
        details: dict[str, Any] = {k: v for k, v in self.details.items() if k != "causes"}
        if self.causes:
            details["causes"] = [c.as_dict() for c in self.causes]
        if self.retry_after is not None:
            details["retryAfterSeconds"] = int(self.retry_after)
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.status_code,
        }
        if details:
            status["details"] = details
        return status

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, reason={self.reason!r})"


class BadRequest(GatewayError):
    code = 400
    default_reason = "BadRequest"


class UnknownResource(BadRequest):
    default_reason = "NotFound"
    code = 404


class MethodNotSupported(BadRequest):
    default_reason = "MethodNotAllowed"
    code = 405


class InvalidView(BadRequest):
    """A view (filter, search, sort, page, cursor, counts) the caller got wrong: refused
    before any work, with a message naming the field (``BAD_USER_INPUT`` in GraphQL,
    ``INVALID_ARGUMENT`` in gRPC)."""


class Unauthorized(GatewayError):
    code = 401
    default_reason = "Unauthorized"


class Forbidden(GatewayError):
    code = 403
    default_reason = "Forbidden"


class NotFound(GatewayError):
    code = 404
    default_reason = "NotFound"


class ClusterRemoved(NotFound):
    """The cluster a subscription or stream reads was removed from the gateway's clusters
    (its kubeconfig left ``--clusters-dir``); what it streamed from there is over."""

    def __init__(self, name: str) -> None:
        super().__init__(f'cluster "{name}" was removed from this gateway')
        self.cluster = name


class MethodNotAllowed(GatewayError):
    code = 405
    default_reason = "MethodNotAllowed"


class AlreadyExists(GatewayError):
    code = 409
    default_reason = "AlreadyExists"


class Conflict(GatewayError):
    code = 409
    default_reason = "Conflict"


class Gone(GatewayError):
    code = 410
    default_reason = "Expired"


class RequestEntityTooLarge(GatewayError):
    code = 413
    default_reason = "RequestEntityTooLarge"


class UnsupportedMediaType(GatewayError):
    code = 415
    default_reason = "UnsupportedMediaType"


class Invalid(GatewayError):
    code = 422
    default_reason = "Invalid"


class InvalidParameter(Invalid):
    """Request options the apiserver would reject (422 with causes), refused before sending."""


class TooManyRequests(GatewayError):
    code = 429
    default_reason = "TooManyRequests"


class ResourceExhausted(TooManyRequests):
    """A budget of the gateway itself is spent (refused at once, before any upstream call)."""

    default_reason = "TooManyRequests"


class SlowSubscriber(ResourceExhausted):
    """A subscriber that stopped reading while live events piled up was ended.

    ``resource_version`` is the resume point after the last event it was given, or
    ``None`` when it was ended before its initial state was complete.
    """

    def __init__(self, message: str, *, resource_version: str | None) -> None:
        super().__init__(message)
        self.resource_version = resource_version


class Internal(GatewayError):
    code = 500
    default_reason = "InternalError"


def of_failure(exc: Exception, what: str, log: logging.Logger, of: str = "") -> GatewayError:
    """What ends the subscribers of a background task (an upstream watch, a view's cache,
    a live view) that raised ``exc``: ``exc`` itself if it is of this tree; anything else
    is a bug, logged with its traceback on ``log`` ("``what`` of ``of`` failed") and ended
    as :class:`Internal`, whose message says no more than that ``what`` failed."""
    if isinstance(exc, GatewayError):
        return exc
    log.error("%s%s failed", what, f" of {of}" if of else "", exc_info=exc)
    return Internal(f"{what} failed")


class ServiceUnavailable(GatewayError):
    code = 503
    default_reason = "ServiceUnavailable"


class Draining(ServiceUnavailable):
    """The gateway is shutting down (SIGTERM): new work is refused, open subscriptions end.

    ``resource_version`` is where an ended watch resumes without loss (on another
    replica), or ``None`` when it has none (a log follow, a snapshot not yet complete, a
    request refused before it started).  ``retry_after`` is 1 s: retry at once elsewhere.
    """

    def __init__(
        self,
        message: str = "the gateway is shutting down; retry on another replica",
        *,
        resource_version: str | None = None,
    ) -> None:
        super().__init__(message, retry_after=1)
        self.resource_version = resource_version


class Timeout(GatewayError):
    code = 504
    default_reason = "Timeout"


class Unavailable(GatewayError):
    """The upstream could not be reached or the connection broke."""

    code = 503
    default_reason = "ServiceUnavailable"


_BY_REASON: dict[str, type[GatewayError]] = {
    "AlreadyExists": AlreadyExists,
    "Conflict": Conflict,
    "Invalid": Invalid,
    "Expired": Gone,
    "Gone": Gone,
    "Timeout": Timeout,
    "ServerTimeout": Timeout,
    "TooManyRequests": TooManyRequests,
    "Forbidden": Forbidden,
    "Unauthorized": Unauthorized,
    "NotFound": NotFound,
}

_BY_CODE: dict[int, type[GatewayError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    406: BadRequest,
    409: Conflict,
    410: Gone,
    413: RequestEntityTooLarge,
    415: UnsupportedMediaType,
    422: Invalid,
    429: TooManyRequests,
    500: Internal,
    503: ServiceUnavailable,
    504: Timeout,
}


def _parse_retry_after(value: str | None, status: Mapping[str, Any]) -> float | None:
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            pass  # an HTTP-date: fall back to the Status details
    details = status.get("details")
    if isinstance(details, Mapping):
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, int | float) and not isinstance(seconds, bool):
            return float(seconds)
    return None


def _causes(status: Mapping[str, Any]) -> tuple[Cause, ...]:
    details = status.get("details")
    if not isinstance(details, Mapping):
        return ()
    raw = details.get("causes")
    if not isinstance(raw, list):
        return ()
    return tuple(
        Cause(str(c.get("reason", "")), str(c.get("message", "")), str(c.get("field", "")))
        for c in raw
        if isinstance(c, Mapping)
    )


def from_status(
    status: Mapping[str, Any], *, http_status: int, retry_after: str | None = None
) -> GatewayError:
    """Translate an upstream ``Status`` (possibly malformed) into the error tree.

    The reason decides where it is known; otherwise the code (from the Status, else the
    HTTP response) does.  Anything else becomes :class:`Internal`.
    """
    reason = status.get("reason") if isinstance(status.get("reason"), str) else None
    raw_code = status.get("code")
    code = raw_code if isinstance(raw_code, int) and raw_code >= 400 else http_status
    cls = _BY_REASON.get(reason or "") or _BY_CODE.get(code)
    if cls is None:
        cls = Internal if code >= 500 or code < 400 else BadRequest
    message = status.get("message")
    if not isinstance(message, str) or not message:
        message = f"upstream returned HTTP {code}" + (f" ({reason})" if reason else "")
    details = status.get("details")
    return cls(
        message,
        reason=reason,
        causes=_causes(status),
        retry_after=_parse_retry_after(retry_after, status),
        details={k: v for k, v in details.items() if k in ("name", "group", "kind", "uid")}
        if isinstance(details, Mapping)
        else None,
        code=code,
    )


def from_response(http_status: int, body: bytes, headers: Mapping[str, str]) -> GatewayError:
    """Translate an upstream error response whose body may or may not be a ``Status``."""
    status: Mapping[str, Any] = {}
    if body:
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, dict) and decoded.get("kind") == "Status":
            status = decoded
        elif body and http_status < 500:
            # Plain-text errors (e.g. pod log 400s from old servers) keep their text.
            text = body[:1024].decode("utf-8", "replace").strip()
            status = {"message": text}
    return from_status(status, http_status=http_status, retry_after=headers.get("retry-after"))

"""Kubernetes ``Status`` errors, worded exactly as kube-apiserver words them.

Every failure the demo upstream returns is an :class:`DemoApiError`; the constructors below
reproduce the messages of ``k8s.io/apimachinery/pkg/api/errors`` so a client (or the gateway
under test) sees the same bytes it would see from a real server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kube_gateway_demo.fielderrors import FieldError, aggregate


class DemoApiError(Exception):
    """A failed request, rendered as a ``Status`` object.

    Attributes:
        code: HTTP status code.
        reason: the ``StatusReason`` (empty for ``StatusReasonUnknown``).
        message: human-readable message.
        details: ``Status.details`` (name, group, kind, uid, causes, retryAfterSeconds).
        list_meta: ``Status.metadata`` (an expired list carries a fresh ``continue`` here).
    """

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        list_meta: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.list_meta = list_meta or {}

    def to_status(self) -> dict[str, Any]:
        """The ``Status`` object, fields in the order the apiserver serialises them."""
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.list_meta),
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            status["reason"] = self.reason
        if self.details is not None:
            status["details"] = self.details
        status["code"] = self.code
        return status

    @property
    def retry_after(self) -> int | None:
        """Seconds for a ``Retry-After`` header, when the details carry one."""
        if self.details and isinstance(self.details.get("retryAfterSeconds"), int):
            value: int = self.details["retryAfterSeconds"]
            return value if value > 0 else None
        return None

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def _details(
    name: str = "", group: str = "", kind: str = "", uid: str = "", **extra: Any
) -> dict[str, Any]:
    # StatusDetails fields are all omitempty; keep the apiserver's field order.
    out: dict[str, Any] = {}
    if name:
        out["name"] = name
    if group:
        out["group"] = group
    if kind:
        out["kind"] = kind
    if uid:
        out["uid"] = uid
    out.update({k: v for k, v in extra.items() if v})
    return out


def qualified(resource: str, group: str) -> str:
    """``GroupResource.String()``: ``pods``, ``leases.coordination.k8s.io``."""
    return f"{resource}.{group}" if group else resource


def _about_object(
    code: int, reason: str, message: str, *, resource: str, group: str, name: str
) -> DemoApiError:
    # An error about one object: its details name the object by resource, group and name.
    return DemoApiError(
        code, reason, message, details=_details(name=name, group=group, kind=resource)
    )


def not_found(resource: str, group: str, name: str) -> DemoApiError:
    """``NewNotFound``: ``pods "x" not found``."""
    message = f"{qualified(resource, group)} {_quote(name)} not found"
    return _about_object(404, "NotFound", message, resource=resource, group=group, name=name)


def already_exists(resource: str, group: str, name: str) -> DemoApiError:
    """``NewAlreadyExists``: ``pods "x" already exists``."""
    message = f"{qualified(resource, group)} {_quote(name)} already exists"
    return _about_object(409, "AlreadyExists", message, resource=resource, group=group, name=name)


def conflict(resource: str, group: str, name: str, err: str) -> DemoApiError:
    """``NewConflict``: ``Operation cannot be fulfilled on pods "x": <err>``."""
    message = f"Operation cannot be fulfilled on {qualified(resource, group)} {_quote(name)}: {err}"
    return _about_object(409, "Conflict", message, resource=resource, group=group, name=name)


OPTIMISTIC_LOCK = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid(
    kind: str, group: str, name: str, errors: Sequence[FieldError], *, code: int = 422
) -> DemoApiError:
    """``NewInvalid``: ``Pod "x" is invalid: spec.containers: Required value``."""
    gk = f"{kind}.{group}" if group else kind
    causes = [e.cause() for e in errors]
    message = f"{gk} {_quote(name)} is invalid"
    if errors:
        message += f": {aggregate(errors)}"
    details: dict[str, Any] = _details(name=name, group=group, kind=kind)
    details["causes"] = causes
    return DemoApiError(code, "Invalid", message, details=details)


def options_invalid(kind: str, errors: Sequence[FieldError]) -> DemoApiError:
    """Invalid request options (``ListOptions.meta.k8s.io "" is invalid: ...``)."""
    return invalid(kind, "meta.k8s.io", "", errors)


def bad_request(message: str) -> DemoApiError:
    """``NewBadRequest``."""
    return DemoApiError(400, "BadRequest", message, details=None)


def unauthorized() -> DemoApiError:
    """What an apiserver with anonymous auth disabled answers an unauthenticated request."""
    return DemoApiError(401, "Unauthorized", "Unauthorized")


def forbidden(resource: str, group: str, name: str, reason: str) -> DemoApiError:
    """``NewForbidden``: ``pods "x" is forbidden: User "u" cannot get resource ...``."""
    gr = qualified(resource, group)
    if not resource:
        message = f"forbidden: {reason}"
    elif name:
        message = f"{gr} {_quote(name)} is forbidden: {reason}"
    else:
        message = f"{gr} is forbidden: {reason}"
    return _about_object(403, "Forbidden", message, resource=resource, group=group, name=name)


def gone(message: str, *, continue_token: str = "") -> DemoApiError:
    """``NewResourceExpired`` (410, reason ``Expired``)."""
    meta = {"continue": continue_token} if continue_token else None
    return DemoApiError(410, "Expired", message, list_meta=meta)


def too_large_resource_version(
    requested: int, current: int, retry_seconds: int = 1
) -> DemoApiError:
    """``storage.NewTooLargeResourceVersionError`` (504 Timeout with a cause)."""
    return DemoApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        details={
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": retry_seconds,
        },
    )


def method_not_allowed() -> DemoApiError:
    """go-restful's answer to a method the route does not serve."""
    return DemoApiError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        details={},
    )


def path_not_found() -> DemoApiError:
    """``NewGenericServerResponse(404)`` for a path no API group serves."""
    return DemoApiError(
        404, "NotFound", "the server could not find the requested resource", details={}
    )


def entity_too_large(limit: int) -> DemoApiError:
    """``NewRequestEntityTooLargeError``."""
    return DemoApiError(
        413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}", details=None
    )


def unsupported_media_type(content_type: str, accepted: Sequence[str]) -> DemoApiError:
    """``negotiation.NewUnsupportedMediaTypeError``."""
    return DemoApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(accepted)}",
        details=None,
    )


def not_acceptable(accepted: Sequence[str]) -> DemoApiError:
    """go-restful's 406 for an ``Accept`` header no route produces."""
    return DemoApiError(
        406,
        "NotAcceptable",
        f"406: Not Acceptable\n\nAvailable representations: {', '.join(accepted)}",
        details={},
    )


def media_not_acceptable(accepted: Sequence[str]) -> DemoApiError:
    """The apiserver's own 406 (content negotiation of discovery, not a go-restful route)."""
    return DemoApiError(
        406,
        "NotAcceptable",
        f"only the following media types are accepted: {', '.join(accepted)}",
    )


def route_unsupported_media_type() -> DemoApiError:
    """go-restful's 415 for a ``Content-Type`` no route consumes (PATCH)."""
    return DemoApiError(415, "UnsupportedMediaType", "415: Unsupported Media Type", details={})


def internal(message: str, *, reason: str = "InternalError") -> DemoApiError:
    """``NewInternalError`` (or, with ``reason=""``, a non-Status error the server wrapped)."""
    if reason:
        return DemoApiError(
            500,
            reason,
            f"Internal error occurred: {message}",
            details={"causes": [{"message": message}]},
        )
    return DemoApiError(500, "", message)


def unprocessable(server_message: str) -> DemoApiError:
    """``NewGenericServerResponse(422, ...)``: a patch that could not be applied.

    The apiserver drops ``server_message`` (it is not an unexpected response), so the
    caller only learns that the patch did not apply.
    """
    del server_message
    return DemoApiError(
        422,
        "Invalid",
        "the server rejected our request due to an error in our request",
        details={},
    )


def generic(code: int, message: str | None = None, retry_after: int | None = None) -> DemoApiError:
    """A canned failure for fault injection, shaped like the apiserver's own for that code."""
    reasons: dict[int, tuple[str, str]] = {
        400: ("BadRequest", "the server rejected our request for an unknown reason"),
        401: ("Unauthorized", "Unauthorized"),
        403: ("Forbidden", "forbidden"),
        404: ("NotFound", "the server could not find the requested resource"),
        409: ("Conflict", "the server reported a conflict"),
        410: ("Expired", "the resource version is too old"),
        429: ("TooManyRequests", "Too many requests, please try again later."),
        500: (
            "InternalError",
            "Internal error occurred: an error on the server has prevented "
            "the request from succeeding",
        ),
        502: (
            "",
            "the server responded with the status code 502 but did not return more information",
        ),
        503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
        504: (
            "Timeout",
            "Timeout: request did not complete within requested timeout - context "
            "deadline exceeded",
        ),
    }
    reason, default = reasons.get(code, ("", f"the server responded with the status code {code}"))
    details: dict[str, Any] | None = None
    if retry_after is not None:
        details = {"retryAfterSeconds": retry_after}
    elif code in (429, 504):
        details = {}
    return DemoApiError(code, reason, message or default, details=details)


def success(name: str, group: str, kind: str, uid: str) -> dict[str, Any]:
    """The ``Status`` a generic registry returns for a delete that completed."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": _details(name=name, group=group, kind=kind, uid=uid),
    }


def _quote(value: str) -> str:
    # Go's %q for the ASCII names Kubernetes allows.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

"""Core errors as gRPC statuses: ONE table, and rich ``google.rpc.Status`` details.

Every :class:`gateway.core.errors.GatewayError` maps to a status code through :data:`CODES`
(the most specific class in the error's MRO wins).  The status carries, as details:

* ``google.rpc.ErrorInfo``: ``reason`` is the Kubernetes ``StatusReason`` (``NotFound``,
  ``AlreadyExists``, ``Invalid``...), ``domain`` is :data:`DOMAIN`, ``metadata`` holds
  ``httpStatus`` and the ``Status.details`` ``kind`` / ``name`` / ``group`` / ``uid``;
* ``google.rpc.BadRequest``: one field violation per ``Status.details.causes`` entry (field,
  description = message, reason = the cause's reason);
* ``google.rpc.RetryInfo``: when the upstream said how long to wait (``Retry-After``);
* ``kubegateway.v1.Status``: the Kubernetes ``Status`` itself.

``Gone`` (410: the resourceVersion or continue token expired) maps to ``OUT_OF_RANGE``: the
request points past the range the server still holds, as etcd's own gRPC API reports a
compacted revision (``ErrCompacted`` is ``OutOfRange``); retrying the same request cannot
succeed, relisting can.

Anything that is not a ``GatewayError`` is a bug: it is logged with its stack trace and the
caller gets ``INTERNAL`` with a generic message (no stack, no upstream text, no token).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from gateway.core import errors
from gateway.grpc.codec import codec

__all__ = [
    "CODES",
    "DOMAIN",
    "FleetDraining",
    "code_for",
    "internal_status",
    "status_message",
    "to_status",
]

#: ``ErrorInfo.domain`` of every error the gateway reports.
DOMAIN: Final = "kube-gateway.io"

CODES: Final[Mapping[type[errors.GatewayError], grpc.StatusCode]] = {
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.UnknownResource: grpc.StatusCode.NOT_FOUND,
    errors.AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.Conflict: grpc.StatusCode.ABORTED,
    errors.Invalid: grpc.StatusCode.INVALID_ARGUMENT,
    errors.BadRequest: grpc.StatusCode.INVALID_ARGUMENT,
    errors.UnsupportedMediaType: grpc.StatusCode.INVALID_ARGUMENT,
    errors.MethodNotSupported: grpc.StatusCode.UNIMPLEMENTED,
    errors.MethodNotAllowed: grpc.StatusCode.UNIMPLEMENTED,
    errors.Forbidden: grpc.StatusCode.PERMISSION_DENIED,
    errors.Unauthorized: grpc.StatusCode.UNAUTHENTICATED,
    errors.Gone: grpc.StatusCode.OUT_OF_RANGE,
    errors.TooManyRequests: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.RequestEntityTooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.Timeout: grpc.StatusCode.DEADLINE_EXCEEDED,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    errors.ServiceUnavailable: grpc.StatusCode.UNAVAILABLE,
    errors.Internal: grpc.StatusCode.INTERNAL,
}


def code_for(error: errors.GatewayError) -> grpc.StatusCode:
    """The status code of a core error (``INTERNAL`` for anything the table does not name)."""
    for cls in type(error).__mro__:
        code = CODES.get(cls)
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL


def _pack(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


class FleetDraining(errors.Draining):
    """A fleet ``Watch`` ended by a drain: it resumes from one point per cluster, the
    ``ErrorInfo`` metadata ``resumeFrom`` (``{"cluster": "resourceVersion", ...}`` as JSON:
    what ``WatchResourcesRequest.resume_from`` takes)."""

    def __init__(self, resume_from: str | None) -> None:
        super().__init__()
        self.resume_from = resume_from


def to_status(error: errors.GatewayError) -> grpc.Status:
    """The ``grpc.Status`` (code, message, rich details) for a core error."""
    return rpc_status.to_status(status_message(error))


def status_message(error: errors.GatewayError) -> status_pb2.Status:
    """The ``google.rpc.Status`` of a core error: its code, message and rich details (what
    a fleet call's per-cluster error carries too)."""
    code = code_for(error)
    metadata = {"httpStatus": str(error.status_code)}
    for key in ("kind", "name", "group", "uid"):
        value = error.details.get(key)
        if isinstance(value, str) and value:
            metadata[key] = value
    if isinstance(error, errors.SlowSubscriber | errors.Draining) and error.resource_version:
        metadata["resourceVersion"] = error.resource_version
    if isinstance(error, FleetDraining) and error.resume_from:
        metadata["resumeFrom"] = error.resume_from
    details = [
        _pack(error_details_pb2.ErrorInfo(reason=error.reason, domain=DOMAIN, metadata=metadata))
    ]
    if error.causes:
        details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=c.field, description=c.message, reason=c.reason
                        )
                        for c in error.causes
                    ]
                )
            )
        )
    if error.retry_after is not None:
        seconds = max(0, math.ceil(error.retry_after))
        details.append(
            _pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds)))
        )
    details.append(_pack(codec().message("Status", error.to_status())))
    return status_pb2.Status(code=code.value[0], message=error.message, details=details)


def internal_status() -> grpc.Status:
    """The status of an unexpected failure: ``INTERNAL`` and nothing else."""
    return rpc_status.to_status(
        status_pb2.Status(
            code=code_pb2.INTERNAL,
            message="internal error",
            details=[_pack(error_details_pb2.ErrorInfo(reason="InternalError", domain=DOMAIN))],
        )
    )

from __future__ import annotations

import logging

import orjson
import pytest

from gateway.core import errors


def status(code: int, reason: str, **extra: object) -> bytes:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": f"{reason} happened",
        **extra,
    }
    return orjson.dumps(body)


@pytest.mark.parametrize(
    ("code", "reason", "cls"),
    [
        (400, "BadRequest", errors.BadRequest),
        (401, "Unauthorized", errors.Unauthorized),
        (403, "Forbidden", errors.Forbidden),
        (404, "NotFound", errors.NotFound),
        (405, "MethodNotAllowed", errors.MethodNotAllowed),
        (409, "AlreadyExists", errors.AlreadyExists),
        (409, "Conflict", errors.Conflict),
        (410, "Expired", errors.Gone),
        (410, "Gone", errors.Gone),
        (413, "RequestEntityTooLarge", errors.RequestEntityTooLarge),
        (415, "UnsupportedMediaType", errors.UnsupportedMediaType),
        (422, "Invalid", errors.Invalid),
        (429, "TooManyRequests", errors.TooManyRequests),
        (500, "InternalError", errors.Internal),
        (503, "ServiceUnavailable", errors.ServiceUnavailable),
        (504, "Timeout", errors.Timeout),
        (500, "Timeout", errors.Timeout),  # reason wins over code (server timeout in a 500)
    ],
)
def test_each_status_maps_to_its_error(
    code: int, reason: str, cls: type[errors.GatewayError]
) -> None:
    err = errors.from_response(code, status(code, reason), {})
    assert type(err) is cls
    assert err.reason == reason
    assert err.status_code == code
    assert err.message == f"{reason} happened"


def test_invalid_keeps_causes_and_round_trips_to_status() -> None:
    body = status(
        422,
        "Invalid",
        details={
            "name": "p",
            "kind": "pods",
            "causes": [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value",
                    "field": "spec.containers",
                }
            ],
        },
    )
    err = errors.from_response(422, body, {})
    assert isinstance(err, errors.Invalid)
    assert err.causes == (errors.Cause("FieldValueRequired", "Required value", "spec.containers"),)
    assert err.details == {"name": "p", "kind": "pods"}
    st = err.to_status()
    assert st["details"]["causes"][0]["field"] == "spec.containers"
    assert st["code"] == 422 and st["reason"] == "Invalid"


def test_retry_after_from_header_or_details() -> None:
    err = errors.from_response(429, status(429, "TooManyRequests"), {"retry-after": "3"})
    assert isinstance(err, errors.TooManyRequests) and err.retry_after == 3.0
    err = errors.from_response(
        429, status(429, "TooManyRequests", details={"retryAfterSeconds": 7}), {}
    )
    assert err.retry_after == 7.0


def test_non_status_bodies_are_handled_defensively() -> None:
    err = errors.from_response(502, b"<html>bad gateway</html>", {})
    assert isinstance(err, errors.Internal) and "502" in err.message
    err = errors.from_response(400, b"a container name must be specified", {})
    assert (
        isinstance(err, errors.BadRequest) and err.message == "a container name must be specified"
    )
    err = errors.from_response(404, b"", {})
    assert isinstance(err, errors.NotFound)
    err = errors.from_status({"code": "weird", "reason": 5}, http_status=418)
    assert isinstance(err, errors.BadRequest)


def test_a_background_failure_is_the_tree_error_itself_or_a_logged_internal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``of_failure``: a failure of the tree ends subscribers as it is, unlogged; a bug is
    logged once with its traceback and ends them as ``Internal`` saying only what failed
    (not the bug's text: it may hold anything)."""
    log = logging.getLogger("test.of_failure")
    forbidden = errors.Forbidden("pods is forbidden")
    with caplog.at_level(logging.ERROR, logger="test.of_failure"):
        assert errors.of_failure(forbidden, "the upstream watch", log, of="pods") is forbidden
        assert caplog.records == []
        bug = KeyError("secret-ish detail")
        ended = errors.of_failure(bug, "the view's cache", log, of="v1/pods")
    assert type(ended) is errors.Internal
    assert str(ended) == "the view's cache failed"
    (record,) = caplog.records
    assert record.getMessage() == "the view's cache of v1/pods failed"
    assert record.exc_info is not None and record.exc_info[1] is bug

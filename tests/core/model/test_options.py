from __future__ import annotations

import pytest

from gateway.core.errors import InvalidParameter
from gateway.core.model.options import (
    DeleteOptions,
    ListOptions,
    LogOptions,
    PatchOptions,
    PatchType,
    Preconditions,
    WriteOptions,
)


def causes(exc: pytest.ExceptionInfo[InvalidParameter]) -> set[str]:
    return {c.field for c in exc.value.causes}


@pytest.mark.parametrize(
    ("opts", "watch", "field"),
    [
        (
            ListOptions(send_initial_events=True, resource_version_match="NotOlderThan"),
            False,
            "sendInitialEvents",
        ),
        (ListOptions(resource_version_match="NotOlderThan"), False, "resourceVersionMatch"),
        (
            ListOptions(resource_version="5", resource_version_match="Sometimes"),
            False,
            "resourceVersionMatch",
        ),
        (
            ListOptions(resource_version="0", resource_version_match="Exact"),
            False,
            "resourceVersionMatch",
        ),
        (ListOptions(continue_="abc", resource_version="12"), False, "resourceVersion"),
        (ListOptions(limit=-1), False, "limit"),
        (
            ListOptions(resource_version_match="NotOlderThan", resource_version="1"),
            True,
            "resourceVersionMatch",
        ),
        (ListOptions(send_initial_events=True), True, "resourceVersionMatch"),
        (ListOptions(limit=5), True, "limit"),
        (ListOptions(continue_="x"), True, "continue"),
        (ListOptions(timeout_seconds=-3), True, "timeoutSeconds"),
    ],
)
def test_list_and_watch_combinations_the_apiserver_refuses(
    opts: ListOptions, watch: bool, field: str
) -> None:
    with pytest.raises(InvalidParameter) as exc:
        opts.validate(watch=watch)
    assert field in causes(exc)
    assert exc.value.status_code == 422 and exc.value.reason == "Invalid"


def test_valid_combinations_pass_and_serialise() -> None:
    watchlist = ListOptions(
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        resource_version="",
        allow_watch_bookmarks=True,
        timeout_seconds=300,
        label_selector="app=web",
    )
    watchlist.validate(watch=True)
    assert watchlist.to_query(watch=True) == [
        ("labelSelector", "app=web"),
        ("resourceVersion", ""),
        ("resourceVersionMatch", "NotOlderThan"),
        ("sendInitialEvents", "true"),
        ("watch", "true"),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", "300"),
    ]
    paged = ListOptions(limit=10, continue_="tok", field_selector="status.phase=Running")
    paged.validate(watch=False)
    assert ("continue", "tok") in paged.to_query() and ("limit", "10") in paged.to_query()
    ListOptions(resource_version="10", resource_version_match="Exact").validate(watch=False)


def test_write_patch_delete_and_log_validation() -> None:
    with pytest.raises(InvalidParameter) as exc:
        WriteOptions(field_validation="Loose").validate()
    assert causes(exc) == {"fieldValidation"}
    with pytest.raises(InvalidParameter) as exc:
        PatchOptions(PatchType.APPLY).validate(WriteOptions())
    assert causes(exc) == {"fieldManager"}
    with pytest.raises(InvalidParameter) as exc:
        PatchOptions(PatchType.MERGE, force=True).validate(WriteOptions())
    assert causes(exc) == {"force"}
    PatchOptions(PatchType.APPLY, force=True).validate(WriteOptions(field_manager="me"))
    with pytest.raises(InvalidParameter) as exc:
        DeleteOptions(orphan_dependents=True, propagation_policy="Background").validate()
    assert causes(exc) == {"propagationPolicy"}
    with pytest.raises(InvalidParameter):
        DeleteOptions(propagation_policy="Sideways").validate()
    with pytest.raises(InvalidParameter) as exc:
        LogOptions(since_seconds=5, since_time="2026-01-01T00:00:00Z").validate()
    assert causes(exc) == {"sinceTime"}
    with pytest.raises(InvalidParameter):
        LogOptions(tail_lines=-1).validate()
    with pytest.raises(InvalidParameter):
        LogOptions(limit_bytes=0).validate()
    body = DeleteOptions(
        grace_period_seconds=0,
        propagation_policy="Foreground",
        preconditions=Preconditions(uid="u1", resource_version="9"),
        dry_run=True,
    ).body()
    assert body == {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "gracePeriodSeconds": 0,
        "propagationPolicy": "Foreground",
        "preconditions": {"uid": "u1", "resourceVersion": "9"},
        "dryRun": ["All"],
    }
    assert LogOptions(
        container="c",
        follow=True,
        tail_lines=3,
        limit_bytes=9,
        timestamps=True,
        previous=True,
        since_seconds=4,
        insecure_skip_tls_verify_backend=True,
    ).to_query() == [
        ("container", "c"),
        ("follow", "true"),
        ("previous", "true"),
        ("timestamps", "true"),
        ("tailLines", "3"),
        ("sinceSeconds", "4"),
        ("limitBytes", "9"),
        ("insecureSkipTLSVerifyBackend", "true"),
    ]

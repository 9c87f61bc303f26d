"""JSON <-> message conversion: exact, tolerant of newer upstreams, and never mutating input."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2

from gateway.core import errors
from gateway.core.lists.protowire import StructCache, encode_struct
from gateway.core.watch.watcher import WatchEvent
from gateway.grpc import mask as masks
from gateway.grpc.codec import codec
from gateway.grpc.contract import contract
from gateway.grpc.messages import message_class
from tests.bench.realistic import pod, pod_list


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _ports_as_strings(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for c in out["spec"]["containers"]:
        for probe in ("livenessProbe", "readinessProbe"):
            for action in ("httpGet", "tcpSocket"):
                port = c.get(probe, {}).get(action, {}).get("port")
                if isinstance(port, int):
                    c[probe][action]["port"] = str(port)
    return out


def test_a_realistic_pod_converts_exactly_and_round_trips() -> None:
    c = codec()
    original = pod(3)
    before = copy.deepcopy(original)
    message = c.parse("Pod", c.object_bytes("Pod", original))
    assert original == before  # the input is never mutated
    reference = json_format.ParseDict(
        _without_nulls(_ports_as_strings(original)), message_class("Pod")()
    )
    assert message == reference
    container = message.spec.containers[0]
    assert container.livenessProbe.httpGet.port == "8080"
    assert container.readinessProbe.tcpSocket.port == "http"
    assert message.metadata.labels["app"] == "app-3"
    assert container.resources.requests["cpu"] == "100m"
    assert message.metadata.managedFields[1].subresource == "status"
    fields_v1 = json_format.MessageToDict(message.metadata.managedFields[0].fieldsV1)
    assert fields_v1 == original["metadata"]["managedFields"][0]["fieldsV1"]
    assert message.spec.terminationGracePeriodSeconds == 30
    # back to the upstream's JSON: ints where int-or-string held digits, ints in Structs
    assert c.to_json(message) == _without_nulls(original)


def test_a_list_converts_every_item_and_its_list_metadata() -> None:
    c = codec()
    listed = pod_list(20)
    message = c.parse("PodList", c.list_bytes("Pod", listed))
    assert message.metadata.resourceVersion == "200020"
    assert [p.metadata.name for p in message.items] == [
        i["metadata"]["name"] for i in listed["items"]
    ]
    assert message.kind == "PodList" and message.apiVersion == "v1"


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"a": 1, "b": -2.5, "c": "x", "d": True, "e": False, "f": None},
        {"nested": {"deeper": {"list": [1, "two", None, {"k": []}, [3.25]]}}},
        {"unicode": "ünïcødé ✓", "big": 2**40, "empty": "", 'k:{"name":"app"}': {".": {}}},
    ],
)
def test_struct_wire_encoding_matches_the_protobuf_implementation(value: dict[str, Any]) -> None:
    reference = struct_pb2.Struct()
    reference.update(value)
    assert struct_pb2.Struct.FromString(encode_struct(value)) == reference
    cache = StructCache(size=1)
    assert cache.encode(value) == cache.encode(copy.deepcopy(value)) == encode_struct(value)
    assert (cache.hits, cache.misses) == (1, 1)


def test_unknown_fields_from_a_newer_upstream_are_dropped_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = codec()
    newer = pod(1)
    newer["futureTopLevel"] = {"x": 1}
    newer["spec"]["futureSpecField"] = True
    newer["spec"]["containers"][0]["futureContainerField"] = ["a"]
    newer["metadata"]["managedFields"][0]["futureEntryField"] = 7
    newer["status"]["conditions"][0]["observedFuture"] = 3
    before = copy.deepcopy(newer)
    with caplog.at_level(logging.INFO, logger="gateway.grpc.codec"):
        message = c.parse("Pod", c.object_bytes("Pod", newer))
        again = c.parse("Pod", c.object_bytes("Pod", newer))
    assert newer == before
    assert message == again
    expected = c.parse("Pod", c.object_bytes("Pod", pod(1)))
    assert message == expected  # everything known survived, nothing unknown did
    dropped = [r.getMessage() for r in caplog.records if "dropping" in r.getMessage()]
    for name in (
        "Pod.futureTopLevel",
        "PodSpec.futureSpecField",
        "Container.futureContainerField",
        "ManagedFieldsEntry.futureEntryField",
        "PodCondition.observedFuture",
    ):
        assert sum(name in m for m in dropped) == 1, (name, dropped)  # logged once


def test_unknown_fields_in_one_list_item_only_cost_that_item() -> None:
    c = codec()
    listed = pod_list(5)
    listed["items"][2]["spec"]["brandNew"] = {"a": 1}
    listed["metadata"]["futureListMeta"] = "x"
    message = c.parse("PodList", c.list_bytes("Pod", listed))
    assert len(message.items) == 5
    assert message.items[2].spec.containers[0].name == "app"
    assert message.metadata.resourceVersion == "200005"


def test_values_of_the_wrong_json_type_are_coerced_or_dropped() -> None:
    c = codec()
    odd = pod(2)
    odd["spec"]["priority"] = "5"  # a numeric string in an int32 field
    odd["spec"]["terminationGracePeriodSeconds"] = 30.0  # a whole float in an int64 field
    odd["metadata"]["labels"] = ["not", "a", "map"]
    odd["spec"]["containers"][0]["resources"]["requests"]["cpu"] = 1  # a numeric quantity
    odd["spec"]["hostNetwork"] = "yes"  # not a bool
    odd["spec"]["activeDeadlineSeconds"] = 2**70  # out of range
    odd["metadata"]["managedFields"][0]["fieldsV1"] = ["not", "an", "object"]
    message = c.parse("Pod", c.object_bytes("Pod", odd))
    assert message.spec.priority == 5
    assert message.spec.terminationGracePeriodSeconds == 30
    assert dict(message.metadata.labels) == {}
    assert message.spec.containers[0].resources.requests["cpu"] == "1"
    assert not message.spec.HasField("hostNetwork")
    assert not message.spec.HasField("activeDeadlineSeconds")
    assert not message.metadata.managedFields[0].HasField("fieldsV1")
    assert message.metadata.name == odd["metadata"]["name"]


def test_int_or_string_goes_back_upstream_as_json_numbers_when_it_holds_digits() -> None:
    c = codec()
    cls = message_class("HTTPGetAction")
    assert c.to_json(cls(port="8080", path="/")) == {"port": 8080, "path": "/"}
    assert c.to_json(cls(port="http")) == {"port": "http"}
    assert c.to_json(cls(port="-1")) == {"port": -1}
    assert c.to_json(cls(port="50%")) == {"port": "50%"}


def test_read_masks_select_fields_through_lists_and_accept_snake_case() -> None:
    c = contract()
    tree = masks.parse(
        ["metadata.name", "metadata.resource_version", "spec.containers.image", "status"], "Pod", c
    )
    assert tree == {
        "metadata": {"name": None, "resourceVersion": None},
        "spec": {"containers": {"image": None}},
        "status": None,
    }
    projected = masks.project(pod(4), tree)  # type: ignore[arg-type]
    assert set(projected) == {"metadata", "spec", "status"}
    assert projected["spec"] == {"containers": [{"image": "quay.io/demo/app-4:1.4.2"}]}
    assert masks.parse([], "Pod", c) is None
    # a whole field wins over a deeper path, in any order
    assert masks.parse(["metadata", "metadata.name"], "Pod", c) == {"metadata": None}


def test_invalid_read_mask_paths_are_refused_with_one_cause_each() -> None:
    with pytest.raises(errors.InvalidParameter) as refused:
        masks.parse(
            ["metadata.name", "spec.nope", "metadata.labels.app", "status.phase.x"],
            "Pod",
            contract(),
        )
    assert [cause.field for cause in refused.value.causes] == [
        "read_mask.paths[1]",
        "read_mask.paths[2]",
        "read_mask.paths[3]",
    ]
    assert "PodSpec has no field 'nope'" in refused.value.causes[0].message


def test_watch_events_carry_type_object_and_resume_point_and_keep_markers_whole() -> None:
    c = codec()
    obj = {"apiVersion": "v1", "kind": "Pod", **pod(5)}
    tree = masks.parse(["metadata.name"], "Pod", contract())
    modified = c.parse(
        "WatchEvent", c.watch_event_bytes("Pod", WatchEvent("MODIFIED", obj, "42"), tree)
    )
    assert modified.WhichOneof("object") == "pod"
    assert modified.type == modified.MODIFIED and modified.resource_version == "42"
    assert modified.pod.metadata.name == obj["metadata"]["name"]
    assert not modified.pod.HasField("spec")
    marker = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "43", "annotations": {"kube-gateway.io/resync": "begin"}},
    }
    resync = c.parse(
        "WatchEvent", c.watch_event_bytes("Pod", WatchEvent("RESYNC", marker, "43"), tree)
    )
    assert resync.type == resync.RESYNC
    assert resync.pod.metadata.annotations["kube-gateway.io/resync"] == "begin"

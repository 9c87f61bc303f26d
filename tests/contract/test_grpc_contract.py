"""The gRPC contract: generated from the schema, numbers locked, stubs in sync."""

from __future__ import annotations

import dataclasses
import importlib
import json
import re

from gateway.core.model import schema
from gateway.core.model.registry import REGISTRY
from gateway.grpc import protogen
from gateway.grpc.contract import PACKAGE, ProtoField, contract
from gateway.grpc.messages import message_class
from gateway.grpc.numbering import LOCK_FILE, FieldNumbers


def test_committed_protos_lock_and_stubs_match_a_fresh_generation() -> None:
    # Fails when gateway/core/model/schema.py, the registry or the generator changed without
    # `make protos`, or when protos/ or gateway/grpc/gen/ were edited by hand.
    problems = protogen.check()
    assert problems == [], "\n".join(problems) + "\nrun: make protos"


def test_every_field_of_every_reachable_type_is_a_message_field_with_its_json_name() -> None:
    c = contract()
    kinds = schema.kinds()
    for r in REGISTRY.values():
        for root in (kinds[r.kind].name, schema.list_type(r.kind).name):
            for t in schema.reachable(root):
                descriptor = message_class(t.short_name).DESCRIPTOR
                assert descriptor.full_name == f"{PACKAGE}.{t.short_name}"
                names = {f.name for f in descriptor.fields}
                assert names == {f.json_name for f in t.fields}, t.short_name
                for f in descriptor.fields:
                    # the JSON mapping of the message is the Kubernetes JSON itself
                    assert f.json_name == f.name
    for shared in ("ObjectMeta", "ListMeta", "Status", "DeleteOptions", "WatchEvent"):
        assert shared in c.messages


def test_the_complete_pod_is_in_the_contract() -> None:
    pod = schema.kinds()["Pod"]
    reachable = schema.reachable(pod.name)
    assert len(reachable) > 100
    spec = message_class("PodSpec").DESCRIPTOR
    assert {"containers", "initContainers", "ephemeralContainers", "volumes", "affinity"} <= set(
        spec.fields_by_name
    )
    probe = message_class("HTTPGetAction").DESCRIPTOR.fields_by_name["port"]
    assert probe.type == probe.TYPE_STRING  # int-or-string travels as a string
    fields_v1 = message_class("ManagedFieldsEntry").DESCRIPTOR.fields_by_name["fieldsV1"]
    assert fields_v1.message_type.full_name == "google.protobuf.Struct"
    termination = spec.fields_by_name["terminationGracePeriodSeconds"]
    assert termination.type == termination.TYPE_INT64 and termination.has_presence


def test_one_service_per_resource_with_every_rpc() -> None:
    c = contract()
    assert {s.resource.key for s in c.services} == set(REGISTRY)
    basic = ["Get", "List", "Watch", "Create", "Replace", "Patch", "Delete", "DeleteCollection"]
    by_kind = {s.resource.kind: s for s in c.services}
    for kind, svc in by_kind.items():
        names = [r.name for r in svc.rpcs]
        assert names[:8] == basic, kind
        assert [r.name for r in svc.rpcs if r.streaming] == (
            ["Watch", "GetLog"] if kind == "Pod" else ["Watch"]
        )
    assert [r.name for r in by_kind["Pod"].rpcs][8:] == [
        "GetLog",
        "GetStatus",
        "ReplaceStatus",
        "PatchStatus",
        "GetEphemeralContainers",
        "ReplaceEphemeralContainers",
        "PatchEphemeralContainers",
    ]
    # cluster-scoped Image requests have no namespace
    assert "namespace" not in message_class("GetImageRequest").DESCRIPTOR.fields_by_name
    assert "namespace" in message_class("GetPodRequest").DESCRIPTOR.fields_by_name


def test_field_numbers_are_assigned_once_and_retired_never_reused() -> None:
    numbers = FieldNumbers()
    assert numbers.assign("M", ["a", "b", "c"]) == {"a": 1, "b": 2, "c": 3}
    # a new field in the middle gets the next free number; the others keep theirs
    assert numbers.assign("M", ["a", "new", "b", "c"]) == {"a": 1, "new": 4, "b": 2, "c": 3}
    # a removed field is retired: its number is never reused
    assert numbers.assign("M", ["a", "c", "later"]) == {"a": 1, "c": 3, "later": 5}
    assert numbers.retired("M") == {"new": 4, "b": 2}
    # ...and comes back with its old number
    assert numbers.assign("M", ["a", "b", "c", "later"])["b"] == 2
    reloaded = FieldNumbers.loads(numbers.dumps())
    assert reloaded.dumps() == numbers.dumps()


def test_a_field_removed_from_the_schema_is_reserved_in_the_proto() -> None:
    c = contract()
    lock = (protogen.PROTO_ROOT / LOCK_FILE).read_text("utf-8")
    numbers = FieldNumbers.loads(lock)
    lease_spec = c.messages["LeaseSpec"]
    trimmed = dataclasses.replace(
        lease_spec, fields=tuple(f for f in lease_spec.fields if f.name != "holderIdentity")
    )
    grown = dataclasses.replace(
        trimmed, fields=(*trimmed.fields, ProtoField("newerField", "string", "optional"))
    )
    files = [
        dataclasses.replace(
            f, messages=tuple(grown if m.name == "LeaseSpec" else m for m in f.messages)
        )
        for f in c.files
    ]
    rendered = protogen.render(dataclasses.replace(c, files=tuple(files)), numbers)
    text = rendered["kubegateway/v1/coordination.proto"]
    block = text[text.index("message LeaseSpec {") :]
    block = block[: block.index("\n}\n")]
    old = json.loads(lock)["messages"]["LeaseSpec"]["fields"]
    assert f"reserved {old['holderIdentity']};" in block
    assert 'reserved "holderIdentity";' in block
    new_number = int(re.search(r"optional string newerField = (\d+);", block).group(1))  # type: ignore[union-attr]
    assert new_number == max(old.values()) + 1
    for name, number in old.items():
        if name != "holderIdentity":
            assert re.search(rf"\b{name} = {number};", block), name


def test_the_lock_records_every_field_of_every_message() -> None:
    recorded = json.loads((protogen.PROTO_ROOT / LOCK_FILE).read_text("utf-8"))["messages"]
    for name in contract().messages:
        descriptor = message_class(name).DESCRIPTOR
        assert {f.name: f.number for f in descriptor.fields} == recorded[name]["fields"], name


def test_every_contract_file_names_its_go_and_java_package() -> None:
    # Clients in Go and Java generate from protos/ as it is: every file, generated or written
    # by hand, must put its code in the same Go package and the same Java package.
    gen = protogen.GEN_DIR / "kubegateway" / "v1"
    modules = sorted(p.stem for p in gen.glob("*_pb2.py"))
    assert len(modules) == len(list(protogen.PROTO_ROOT.rglob("*.proto")))
    outer_classes, messages = set(), set()
    for name in modules:
        module = importlib.import_module(f"{protogen.GEN_PACKAGE}.kubegateway.v1.{name}")
        options = module.DESCRIPTOR.GetOptions()
        assert options.go_package == "kube-gateway.local/gen/go/kubegateway/v1;kubegatewayv1"
        assert options.java_package == "local.kubegateway.v1"
        assert options.java_multiple_files, name
        outer_classes.add(options.java_outer_classname)
        messages |= set(module.DESCRIPTOR.message_types_by_name)
        messages |= set(module.DESCRIPTOR.enum_types_by_name)
        messages |= set(module.DESCRIPTOR.services_by_name)
    # One Java class per file and per message in one package: no name may be taken twice
    # (protoc's default outer class of endpoints.proto, Endpoints, is a message's name).
    assert len(outer_classes) == len(modules)
    assert outer_classes.isdisjoint(messages), outer_classes & messages

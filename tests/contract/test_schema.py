from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import pytest

from gateway.core.model import schema
from gateway.core.model.registry import REGISTRY
from gateway.core.model.schema import Field, ListOf, MapOf, ObjectType, Ref, Scalar, SchemaError
from scripts import kube_definitions as _extract

META = "io.k8s.apimachinery.pkg.apis.meta.v1."


def _target(field: Field) -> ObjectType:
    assert isinstance(field.type, Ref), field
    return schema.object_type(field.type.type_name)


def test_the_committed_kubernetes_definitions_match_a_fresh_extraction() -> None:
    # The drift test: kubernetes-validate (a dev dependency) regenerates the trimmed file.
    committed = (_extract.SCHEMA_DIR / _extract.KUBERNETES_FILE).read_text("utf-8")
    assert _extract.generate() == committed, "run: .venv/bin/python scripts/extract_schemas.py"
    assert _extract.main(["--check"]) == 0


@pytest.mark.parametrize("name", schema.SCHEMA_FILES)
def test_definition_files_are_in_canonical_form(name: str) -> None:
    text = (schema.SCHEMA_DIR / name).read_text("utf-8")
    assert _extract.render(json.loads(text)) == text


def test_every_registered_resource_has_a_kind_and_a_list_kind() -> None:
    kinds = schema.kinds()
    assert set(kinds) == {r.kind for r in REGISTRY.values()}
    for r in REGISTRY.values():
        obj = kinds[r.kind]
        assert schema.kind_type(r.group, r.version, r.kind) is obj
        assert any(g.api_version == r.api_version and g.kind == r.kind for g in obj.gvks)
        assert obj.field("apiVersion").enum == (r.api_version,)
        assert obj.field("kind").enum == (r.kind,)
        assert obj.field("metadata").type == Ref(META + "ObjectMeta")
        lst = schema.list_type(r.kind)
        assert lst.short_name == r.list_kind
        assert lst.field("items").type == ListOf(Ref(obj.name))
        assert lst.field("items").required
        assert lst.field("metadata").type == Ref(META + "ListMeta")


def test_pod_has_the_complete_spec_and_status() -> None:
    pod = schema.kinds()["Pod"]
    assert pod.name == "io.k8s.api.core.v1.Pod"
    assert pod.field("spec").type == Ref("io.k8s.api.core.v1.PodSpec")
    assert pod.field("status").type == Ref("io.k8s.api.core.v1.PodStatus")

    spec = schema.object_type("PodSpec")
    containers = spec.field("containers")
    assert containers.type == ListOf(Ref("io.k8s.api.core.v1.Container"))
    assert containers.required
    assert containers.patch_merge_key == "name"
    assert containers.patch_strategy == "merge"
    assert containers.list_type == "map"
    assert containers.list_map_keys == ("name",)
    assert spec.field("nodeSelector").type == MapOf(Scalar("string"))
    assert spec.field("nodeSelector").map_type == "atomic"
    for name in ("resources", "resourceClaims", "schedulingGates", "os", "hostUsers", "overhead"):
        spec.field(name)
    assert spec.field("overhead").type == MapOf(Scalar("quantity"))

    container = schema.object_type("Container")
    probe = container.field("livenessProbe").type
    assert probe == Ref("io.k8s.api.core.v1.Probe")
    http_get = _target(_target(container.field("livenessProbe")).field("httpGet"))
    assert http_get.field("port").type == Scalar("int-or-string")
    assert schema.object_type("HTTPGetAction").field("port").required
    limits = _target(container.field("resources")).field("limits")
    assert limits.type == MapOf(Scalar("quantity"))
    for name in ("resizePolicy", "restartPolicy", "restartPolicyRules", "securityContext"):
        container.field(name)

    affinity = _target(spec.field("affinity"))
    node_affinity = affinity.field("nodeAffinity").type
    assert node_affinity == Ref("io.k8s.api.core.v1.NodeAffinity")
    required = schema.object_type("NodeAffinity").field(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    terms = _target(required).field("nodeSelectorTerms")
    assert terms.type == ListOf(Ref("io.k8s.api.core.v1.NodeSelectorTerm"))

    status = schema.object_type("PodStatus")
    for name in ("conditions", "containerStatuses", "resize", "resourceClaimStatuses", "podIPs"):
        status.field(name)
    assert status.field("startTime").type == Scalar("time")
    assert schema.object_type("ContainerStatus").field("allocatedResources").type == MapOf(
        Scalar("quantity")
    )


def test_volume_has_every_volume_source_of_v1_36() -> None:
    volume = schema.object_type("Volume")
    sources = {f.json_name for f in volume.fields} - {"name"}
    assert sources == {
        "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "configMap",
        "csi", "downwardAPI", "emptyDir", "ephemeral", "fc", "flexVolume", "flocker",
        "gcePersistentDisk", "gitRepo", "glusterfs", "hostPath", "image", "iscsi", "nfs",
        "persistentVolumeClaim", "photonPersistentDisk", "portworxVolume", "projected",
        "quobyte", "rbd", "scaleIO", "secret", "storageos", "vsphereVolume",
    }  # fmt: skip
    for name in sources:
        assert isinstance(volume.field(name).type, Ref)
    assert volume.field("image").type == Ref("io.k8s.api.core.v1.ImageVolumeSource")
    ephemeral = schema.object_type("EphemeralVolumeSource").field("volumeClaimTemplate")
    assert ephemeral.type == Ref("io.k8s.api.core.v1.PersistentVolumeClaimTemplate")
    projection = schema.object_type("VolumeProjection")
    assert {f.json_name for f in projection.fields} >= {
        "clusterTrustBundle", "configMap", "downwardAPI", "podCertificate", "secret",
        "serviceAccountToken",
    }  # fmt: skip


def test_meta_event_endpoints_and_lease_types() -> None:
    meta = schema.object_type("ObjectMeta")
    assert meta.field("creationTimestamp").type == Scalar("time")
    assert meta.field("labels").type == MapOf(Scalar("string"))
    assert meta.field("generation").type == Scalar("int64")
    assert meta.field("ownerReferences").type == ListOf(Ref(META + "OwnerReference"))
    assert meta.field("managedFields").type == ListOf(Ref(META + "ManagedFieldsEntry"))
    assert schema.object_type("ManagedFieldsEntry").field("fieldsV1").type == Scalar("json")
    assert schema.object_type("ListMeta").field("continue").type == Scalar("string")
    status = schema.object_type("Status")
    assert status.field("code").type == Scalar("int32")
    details = _target(status.field("details"))
    assert details.field("causes").type == ListOf(Ref(META + "StatusCause"))
    delete = schema.object_type("DeleteOptions")
    assert delete.field("preconditions").type == Ref(META + "Preconditions")
    assert delete.field("dryRun").type == ListOf(Scalar("string"))
    assert schema.object_type("WatchEvent").field("object").type == Scalar("json")

    event = schema.kinds()["Event"]
    assert event.field("eventTime").type == Scalar("microtime")
    assert event.field("involvedObject").required
    assert event.field("count").type == Scalar("int32")
    assert event.field("series").type == Ref("io.k8s.api.core.v1.EventSeries")
    assert schema.object_type("EventSeries").field("lastObservedTime").type == Scalar("microtime")

    endpoints = schema.kinds()["Endpoints"]
    subsets = endpoints.field("subsets").type
    assert subsets == ListOf(Ref("io.k8s.api.core.v1.EndpointSubset"))
    assert schema.object_type("EndpointPort").field("port").type == Scalar("int32")

    lease_spec = schema.object_type("LeaseSpec")
    assert schema.kinds()["Lease"].field("spec").type == Ref(lease_spec.name)
    assert lease_spec.field("renewTime").type == Scalar("microtime")
    assert lease_spec.field("acquireTime").type == Scalar("microtime")
    assert lease_spec.field("leaseDurationSeconds").type == Scalar("int32")


def test_openshift_image_follows_the_seed() -> None:
    image = schema.kinds()["Image"]
    assert image.name == "com.github.openshift.api.image.v1.Image"
    layers = image.field("dockerImageLayers")
    assert layers.required
    assert layers.type == ListOf(Ref("com.github.openshift.api.image.v1.ImageLayer"))
    layer = schema.object_type("ImageLayer")
    assert {f.json_name: f.required for f in layer.fields} == {
        "name": True,
        "size": True,
        "mediaType": True,
    }
    assert layer.field("size").type == Scalar("int64")
    assert image.field("dockerImageMetadata").type == Scalar("json")
    assert image.field("dockerImageSignatures").type == ListOf(Scalar("bytes"))
    assert image.field("dockerImageManifests").type == ListOf(
        Ref("com.github.openshift.api.image.v1.ImageManifest")
    )
    assert schema.object_type("ImageManifest").field("manifestSize").type == Scalar("int64")
    assert schema.strategic_merge_keys("Image") == {"signatures": "name"}

    signature = schema.object_type("ImageSignature")
    assert [f.json_name for f in signature.fields if f.required] == ["content", "type"]
    assert signature.field("content").type == Scalar("bytes")
    assert signature.field("created").type == Scalar("time")
    assert signature.field("signedClaims").type == MapOf(Scalar("string"))
    assert signature.field("issuedBy").type == Ref(
        "com.github.openshift.api.image.v1.SignatureIssuer"
    )
    assert signature.field("issuedTo").type == Ref(
        "com.github.openshift.api.image.v1.SignatureSubject"
    )
    assert schema.strategic_merge_keys("ImageSignature") == {"conditions": "type"}
    condition = schema.object_type("SignatureCondition")
    assert [f.json_name for f in condition.fields if f.required] == ["status", "type"]
    assert condition.field("lastProbeTime").type == Scalar("time")
    assert schema.object_type("SignatureSubject").field("publicKeyID").required
    assert {f.json_name for f in schema.object_type("SignatureIssuer").fields} == {
        "commonName",
        "organization",
    }


def test_names_are_unique_and_valid_identifiers() -> None:
    types = schema.all_types()
    shorts = [t.short_name for t in types]
    assert len(set(shorts)) == len(shorts)
    assert [t.name for t in types] == sorted(t.name for t in types)
    for t in types:
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]*", t.short_name), t.name
        assert schema.object_type(t.short_name) is schema.object_type(t.name) is t
        names = [f.json_name for f in t.fields]
        assert names == sorted(names)
        # Generators rely on these: every field name is a GraphQL and proto identifier, and
        # no two differ only in case (protoc rejects clashing JSON names).
        for name in names:
            assert re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name), (t.name, name)
        assert len({n.lower() for n in names}) == len(names), t.name
        for ref in t.refs():
            schema.object_type(ref)  # every reference resolves


def test_wrappers_are_scalars_not_object_types() -> None:
    for name in schema.WRAPPERS:
        with pytest.raises(SchemaError):
            schema.object_type(name)
    with pytest.raises(SchemaError):
        schema.object_type("NoSuchType")
    with pytest.raises(SchemaError):
        schema.list_type("Deployment")
    with pytest.raises(SchemaError):
        schema.kind_type("apps", "v1", "Deployment")


def test_reachable_lists_dependencies_first() -> None:
    order = schema.reachable("Pod")
    names = [t.short_name for t in order]
    assert names[-1] == "Pod"
    assert len(names) == len(set(names))
    for t in order:
        for ref in t.refs():
            assert names.index(schema.object_type(ref).short_name) < names.index(t.short_name)
    assert {"Container", "Probe", "HTTPGetAction", "ObjectMeta", "OwnerReference"} <= set(names)
    assert schema.reachable("io.k8s.api.core.v1.Pod") == order
    image = {t.short_name for t in schema.reachable("Image")}
    assert image == {
        "Image", "ImageLayer", "ImageManifest", "ImageSignature", "SignatureCondition",
        "SignatureIssuer", "SignatureSubject", "ObjectMeta", "ManagedFieldsEntry",
        "OwnerReference",
    }  # fmt: skip


def test_strategic_merge_keys() -> None:
    keys = schema.strategic_merge_keys("PodSpec")
    assert keys["containers"] == keys["volumes"] == keys["initContainers"] == "name"
    assert keys["ephemeralContainers"] == "name"
    assert schema.strategic_merge_keys("Container")["ports"] == "containerPort"
    assert schema.strategic_merge_keys("ObjectMeta")["ownerReferences"] == "uid"
    assert schema.strategic_merge_keys("LeaseSpec") == {}


def _write(tmp_path: Path, definitions: dict[str, object]) -> None:
    (tmp_path / "defs.json").write_text(json.dumps({"definitions": definitions}), "utf-8")


def test_recursive_schemas_terminate(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "x.v1.Node": {
                "type": "object",
                "properties": {
                    "children": {"type": "array", "items": {"$ref": "#/definitions/x.v1.Node"}},
                    "leaf": {"$ref": "#/definitions/x.v1.Leaf"},
                },
            },
            "x.v1.Leaf": {
                "type": "object",
                "properties": {"parent": {"$ref": "#/definitions/x.v1.Node"}},
            },
        },
    )
    model = schema._build(tmp_path, ("defs.json",))
    node = model.types["x.v1.Node"]
    assert node.field("children").type == ListOf(Ref("x.v1.Node"))
    order = [t.short_name for t in schema._post_order(model.types, "x.v1.Node")]
    assert order == ["Leaf", "Node"]


def test_colliding_short_names_are_prefixed(tmp_path: Path) -> None:
    obj = {"type": "object", "properties": {"a": {"type": "string"}}}
    _write(
        tmp_path,
        {
            "io.k8s.api.core.v1.Status": obj,
            "io.k8s.apimachinery.pkg.apis.meta.v1.Status": obj,
            "com.github.openshift.api.image.v1.Status": obj,
        },
    )
    model = schema._build(tmp_path, ("defs.json",))
    assert {t.name: t.short_name for t in model.types.values()} == {
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status": "Status",
        "io.k8s.api.core.v1.Status": "CoreV1Status",
        "com.github.openshift.api.image.v1.Status": "ImageV1Status",
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"properties": {"a": {"$ref": "#/definitions/x.v1.Missing"}}},
        {"properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}},
        {"properties": {"a": {"type": "string"}}, "required": ["b"]},
        {"properties": {"a": {"type": "array", "x-kubernetes-list-type": "bag"}}},
    ],
)
def test_inconsistent_definitions_are_refused(tmp_path: Path, bad: dict[str, object]) -> None:
    _write(tmp_path, {"x.v1.T": {"type": "object", **bad}})
    with pytest.raises(SchemaError):
        schema._build(tmp_path, ("defs.json",))


def test_extractor_normalises_and_refuses_unknown_shapes() -> None:
    node = {
        "type": ["array", "null"],
        "items": {"$ref": "/api/_definitions.json#/$defs/io.k8s.api.core.v1.Container"},
        "x-kubernetes-unions": [],
    }
    assert _extract.normalize(node, "t") == {
        "type": "array",
        "items": {"$ref": "#/definitions/io.k8s.api.core.v1.Container"},
    }
    int_or_string = {"oneOf": [{"type": ["string", "null"]}, {"type": ["integer", "null"]}]}
    assert _extract.normalize(int_or_string, "t") == {"type": "string", "format": "int-or-string"}
    with pytest.raises(_extract.ExtractError):
        _extract.normalize({"type": "string", "pattern": "^a$"}, "t")
    with pytest.raises(_extract.ExtractError):
        _extract.normalize({"oneOf": [{"type": "string"}, {"type": "boolean"}]}, "t")


def test_loading_the_model_does_work_in_proportion_to_the_schema() -> None:
    # Counted, not timed: when written, loading made 9 Python and 16 C function calls per
    # field; twice that leaves room for change, and anything superlinear is far past it.
    calls = _calls_made_by(schema._build)
    fields = sum(len(t.fields) for t in schema.all_types())
    assert fields > 500
    assert calls["call"] <= 20 * fields, calls
    assert calls["c_call"] <= 32 * fields, calls


def _calls_made_by(work: Callable[[], object]) -> dict[str, int]:
    """How many Python (``call``) and C (``c_call``) function calls ``work()`` made."""
    counts = {"call": 0, "c_call": 0}

    def count(frame: FrameType, event: str, arg: object) -> None:
        if event in counts:
            counts[event] += 1

    previous = sys.getprofile()
    sys.setprofile(count)
    try:
        work()
    finally:
        sys.setprofile(previous)
    return counts

from __future__ import annotations

import pytest

from gateway.core.errors import InvalidParameter, MethodNotSupported, UnknownResource
from gateway.core.model.registry import ALL_VERBS, REGISTRY
from gateway.core.upstream.adapter import build_request


def test_the_five_seed_resources_are_registered_as_the_seeds_list_them() -> None:
    got = {(r.group, r.version, r.kind, r.plural, r.namespaced) for r in REGISTRY.values()}
    assert got == {
        ("", "v1", "Pod", "pods", True),
        ("", "v1", "Event", "events", True),
        ("", "v1", "Endpoints", "endpoints", True),
        ("coordination.k8s.io", "v1", "Lease", "leases", True),
        ("image.openshift.io", "v1", "Image", "images", False),
    }
    for r in REGISTRY.values():
        assert r.verbs == ALL_VERBS  # deletecollection included
    pod = REGISTRY.lookup("Pod")
    assert set(pod.subresources) == {"log", "status", "ephemeralcontainers"}
    assert pod.subresources["log"].verbs == {"get"}
    assert pod.subresources["status"].verbs == {"get", "update", "patch"}


def test_lookup_by_alias_and_refusal_of_unknown() -> None:
    assert REGISTRY.lookup("po") is REGISTRY.lookup("pods") is REGISTRY.lookup("Pod")
    assert REGISTRY.lookup("leases.coordination.k8s.io").kind == "Lease"
    with pytest.raises(UnknownResource) as exc:
        REGISTRY.lookup("secrets")
    assert exc.value.status_code == 404


@pytest.mark.parametrize(
    ("kind", "ns", "name", "sub", "path"),
    [
        ("pods", None, None, None, "/api/v1/pods"),
        ("pods", "default", "web-1", "log", "/api/v1/namespaces/default/pods/web-1/log"),
        (
            "leases",
            "kube-system",
            "x",
            None,
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x",
        ),
        ("images", None, "sha256:abc", None, "/apis/image.openshift.io/v1/images/sha256%3Aabc"),
        ("events", "a b", None, None, "/api/v1/namespaces/a%20b/events"),
    ],
)
def test_paths(kind: str, ns: str | None, name: str | None, sub: str | None, path: str) -> None:
    assert REGISTRY.lookup(kind).path(ns, name, sub) == path


def test_verbs_and_scope_are_checked_before_any_request() -> None:
    pod = REGISTRY.lookup("pods")
    with pytest.raises(MethodNotSupported):
        build_request(pod, "update", namespace="d", name="p", subresource="log")
    with pytest.raises(MethodNotSupported):
        build_request(pod, "get", namespace="d", name="p", subresource="exec")
    with pytest.raises(InvalidParameter):
        build_request(pod, "get", name="p")  # namespaced without a namespace
    with pytest.raises(InvalidParameter):
        build_request(REGISTRY.lookup("images"), "get", namespace="d", name="i")
    with pytest.raises(InvalidParameter):
        build_request(pod, "get", namespace="d", name="..")  # no walking the URL space

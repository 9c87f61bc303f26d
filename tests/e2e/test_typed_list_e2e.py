"""A large typed gRPC list (``PodService/List``) from the real kube-apiserver: the body it
gzips goes to two list workers as it came, each inflates it and writes its half of the
items, and the answer is the bytes a gateway without workers writes, on the wire (with a
read mask too)."""

from __future__ import annotations

import httpx

from gateway.grpc.messages import message_class
from tests.e2e.apiserver import KubeAPIServer
from tests.e2e.test_large_list_e2e import NS, PODS, big_pods
from tests.support.graphql import serve_app
from tests.support.grpc import pod_list_bytes

__all__ = ["big_pods"]  # the fixture, used here


async def test_a_large_typed_list_is_written_by_two_workers_exactly(
    kube_apiserver: KubeAPIServer, big_pods: httpx.AsyncClient
) -> None:
    token = kube_apiserver.tokens["admin"]
    masked = {"namespace": NS, "read_mask": {"paths": ["metadata.name", "metadata.annotations"]}}
    async with (
        serve_app(kube_apiserver.gateway_settings(list_workers="2")) as (_, app),
        serve_app(kube_apiserver.gateway_settings(list_workers="0")) as (_, plain),
    ):
        port, plain_port = app.state.runtime.grpc_port, plain.state.runtime.grpc_port
        workers = app.state.runtime.cluster.adapter.large_lists.workers
        assert workers is not None
        got = await pod_list_bytes(port, token, namespace=NS)
        assert workers.projected == 2  # two workers, each its half
        # The second list at the first's resourceVersion: a write anywhere in the cluster
        # meanwhile (the apiserver's own lease, renewed every ten seconds) moves the
        # current one, and a list says which it was read at.
        at = {
            "resource_version": message_class("PodList").FromString(got).metadata.resourceVersion,
            "resource_version_match": "Exact",
        }
        want = await pod_list_bytes(plain_port, token, namespace=NS, **at)
        got_masked = await pod_list_bytes(port, token, **masked)
        assert workers.projected == 4
        at["resource_version"] = (
            message_class("PodList").FromString(got_masked).metadata.resourceVersion
        )
        want_masked = await pod_list_bytes(plain_port, token, **masked, **at)
    assert got == want
    assert got_masked == want_masked
    listed = message_class("PodList").FromString(got)
    assert sorted(p.metadata.name for p in listed.items) == [f"big-{i}" for i in range(PODS)]
    assert listed.items[0].spec.containers[0].image.startswith("example.com/app:")
    cut = message_class("PodList").FromString(got_masked).items[0]
    assert len(cut.metadata.annotations) == 10 and not cut.spec.containers

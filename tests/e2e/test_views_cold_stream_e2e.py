"""A cold view of a list the real kube-apiserver streams (gzipped as it encodes it): the
gateway names the view's compact job with the body it feeds to a list worker, which makes
the job's parts as the body comes (gateway.core.lists.compacting.Streaming); the view's
answer is the same bytes as a gateway without list workers gives, and the apiserver's own
bytes are a list Streaming takes (not one it gives up on): the very parts of the job on the
whole body."""

from __future__ import annotations

import httpx

from gateway.core.lists.compacting import Streaming, compact, read_list, written_parts
from tests.e2e.apiserver import KubeAPIServer
from tests.e2e.test_large_list_e2e import FED_NS, PODS, asked_with_and_without_workers, fed_pods

__all__ = ["fed_pods"]  # (the fixture, used here)

VIEW = (
    "query($ns: String) { podsView(namespace: $ns, first: 5, "
    'sort: [{field: "metadata.name", order: DESC}]) { total '
    "nodes { metadata { name uid annotations } } } }"
)


async def test_a_cold_view_of_a_list_the_apiserver_streams_is_made_as_it_comes_exactly(
    kube_apiserver: KubeAPIServer, fed_pods: httpx.AsyncClient
) -> None:
    raw = await fed_pods.get(
        f"/api/v1/namespaces/{FED_NS}/pods", headers={"Accept-Encoding": "gzip"}
    )
    assert raw.headers.get("content-encoding") == "gzip"
    body = raw.content  # (inflated by the client)
    job = compact("v1", "Pod", [(("metadata", "name"), "string")])
    streaming = Streaming(job)
    made = []
    grown = bytearray()
    for at in range(0, len(body), 65_536):  # as a worker is fed it
        grown += body[at : at + 65_536]
        made += streaming.step(grown)
    last = streaming.finish(grown)
    assert last is not None, "the apiserver's list is one Streaming takes"
    value = read_list(body)
    assert value is not None
    assert [b"".join(p) for p in made + last] == [
        b"".join(p) for p in written_parts(value, *job[1:])
    ]

    ask = {"query": VIEW, "variables": {"ns": FED_NS}}
    got, want, workers = await asked_with_and_without_workers(kube_apiserver, ask)
    assert (workers["fed"], workers["feeding"], workers["returned"]) == (1, 0, 0)
    assert got.status_code == want.status_code == 200
    assert got.content == want.content
    assert got.json()["data"]["podsView"]["total"] == PODS

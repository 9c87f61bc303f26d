"""The demo upstream gzips a large answer for a client that accepts it, as the apiserver
does (APIResponseCompression: over 128 KiB, when ``Accept-Encoding`` names gzip)."""

from __future__ import annotations

import gzip

import httpx
import orjson
import pytest

from gateway.core.model.registry import POD
from kube_gateway_demo import DemoUpstream
from kube_gateway_demo.http import COMPRESS_ABOVE, accepts_gzip
from kube_gateway_demo.sample import make_pods

NS = "zipped"


@pytest.mark.parametrize(
    ("header", "accepted"),
    [
        ("gzip", True),
        ("gzip, deflate", True),
        ("br;q=1.0, GZIP;q=0.5", True),
        ("gzip;q=0", False),
        ("gzip;q=0.000", False),
        ("deflate, identity", False),
        ("", False),
    ],
)
def test_accept_encoding_names_gzip(header: str, accepted: bool) -> None:
    assert accepts_gzip({"accept-encoding": header} if header else {}) is accepted


async def _get(demo: DemoUpstream, path: str, encoding: str) -> tuple[httpx.Headers, bytes]:
    """The answer's headers and its body as it came (not inflated)."""
    headers, pieces = await _pieces(demo, path, encoding)
    return headers, b"".join(pieces)


async def _pieces(
    demo: DemoUpstream, path: str, encoding: str
) -> tuple[httpx.Headers, list[bytes]]:
    """The answer's headers and its body as it came (not inflated), in the pieces read."""
    async with httpx.AsyncClient(base_url=demo.url, timeout=30) as raw:
        request = raw.build_request(
            "GET",
            path,
            headers={"Authorization": "Bearer admin-token", "Accept-Encoding": encoding},
        )
        response = await raw.send(request, stream=True)
        pieces = [chunk async for chunk in response.aiter_raw()]
        assert response.status_code == 200, b"".join(pieces)[:200]
        return response.headers, pieces


async def test_a_large_list_is_sent_as_it_is_encoded_and_compressed(demo: DemoUpstream) -> None:
    """As the apiserver's streaming list encoder (Kubernetes 1.33+) sends one, through its
    gzip writer: chunked, no ``Content-Length``, the JSON the whole list encodes to (orjson's,
    byte for byte), gzipped as it goes for a client that accepts it; a list of a few
    objects is sent whole, as before."""
    await demo.store.bulk_create(POD, make_pods(2400, NS), namespace=NS)
    path = f"/api/v1/namespaces/{NS}/pods"
    headers, pieces = await _pieces(demo, path, "identity")
    plain = b"".join(pieces)
    assert headers["transfer-encoding"] == "chunked" and "content-length" not in headers
    assert orjson.dumps(orjson.loads(plain)) == plain  # orjson's JSON, byte for byte
    assert len(orjson.loads(plain)["items"]) == 2400 and len(pieces) > 1
    headers, pieces = await _pieces(demo, path, "gzip")
    assert headers["content-encoding"] == "gzip" and "content-length" not in headers
    assert gzip.decompress(b"".join(pieces)) == plain and len(pieces) > 1
    # a page of a few: whole, with its length; a page past the first: the same bytes
    headers, small = await _get(demo, f"{path}?limit=3", "gzip")
    assert "content-encoding" not in headers and int(headers["content-length"]) == len(small)
    listed = orjson.loads(plain)["items"]
    assert orjson.loads(small)["items"] == listed[:3]
    token = orjson.loads(small)["metadata"]["continue"]
    _, rest = await _get(demo, f"{path}?limit=2000&continue={token}", "gzip")
    assert orjson.loads(gzip.decompress(rest))["items"] == listed[3:2003]


async def test_a_large_answer_is_gzipped_only_for_a_client_that_accepts_it(
    demo: DemoUpstream,
) -> None:
    await demo.store.bulk_create(POD, make_pods(300, NS), namespace=NS)
    path = f"/api/v1/namespaces/{NS}/pods"
    headers, plain = await _get(demo, path, "identity")
    assert "content-encoding" not in headers
    assert len(plain) > COMPRESS_ABOVE
    headers, zipped = await _get(demo, path, "gzip")
    assert headers["content-encoding"] == "gzip"
    assert len(zipped) < len(plain) // 4  # (sent as it is compressed: no Content-Length)
    assert orjson.loads(gzip.decompress(zipped))["items"] == orjson.loads(plain)["items"]
    # A small answer is not compressed; nor a large one with compression turned off.
    name = orjson.loads(plain)["items"][0]["metadata"]["name"]
    headers, _ = await _get(demo, f"{path}/{name}", "gzip")
    assert "content-encoding" not in headers
    demo.app.compress = False
    headers, body = await _get(demo, path, "gzip")
    assert "content-encoding" not in headers
    assert orjson.loads(body)["items"] == orjson.loads(plain)["items"]

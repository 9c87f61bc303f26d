"""The corpus of real CRDs on the real kube-apiserver: every group served, every kind usable.

The operators' CRDs of :data:`tests.support.crdcorpus.CORPUS` (prometheus-operator,
cert-manager, KEDA, Gateway API, Istio, Argo CD, Knative Serving, Cluster API: their Go
module zips, pinned, cached in ``tests/bench/.crds``) are installed at once.  Through a
discovering gateway, every group's endpoint builds (no 500, no kind left out) and every kind
answers a list, a get, a create from an example made from its own schema
(:mod:`tests.support.crdexample`) and the subscription event of that create.  The apiserver
may refuse an example for a CEL rule (``x-kubernetes-validations``) the generator cannot
satisfy: such kinds are named, with the apiserver's message as the gateway relayed it, and
counted; any other refusal fails the test.  A second gateway, a process of its own started
after, serves an identical schema (equal introspection) for every group.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from graphql import get_introspection_query

from gateway.graphql.schemas.schema import group_scopes
from tests.e2e import crdkinds
from tests.e2e.apiserver import KubeAPIServer
from tests.support import crdcorpus, crdexample
from tests.support.graphql import serve_app
from tests.support.serve_process import serve_process_async

pytestmark = pytest.mark.e2e

NS = "crd-corpus"
#: Kinds exercised at once (each holds a WebSocket and a few requests).
CONCURRENCY = 8


def _schema_of(crd: dict[str, Any], version: str) -> dict[str, Any]:
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return (served.get("schema") or {}).get("openAPIV3Schema") or {}  # type: ignore[no-any-return]


async def _introspect(http: httpx.AsyncClient, group: str) -> dict[str, Any]:
    response = await http.post(
        f"/apis/{group}/graphql",
        json={"query": get_introspection_query(descriptions=True, schema_description=True)},
    )
    assert response.status_code == 200, (group, response.text[:500])
    body = response.json()
    assert "errors" not in body, (group, body["errors"])
    return body["data"]  # type: ignore[no-any-return]


# The corpus is the suite's longest test: 269-275 s alone on a quiet 2-core machine (20
# group schemas built and fully introspected, with descriptions, by two gateways: 100 s
# each, the introspections paced at half a core by design, docs/security.md), over the
# default 300 s beside other work.
@pytest.mark.timeout(900)
async def test_every_crd_of_the_corpus_is_served_by_every_gateway(
    kube_apiserver: KubeAPIServer, tmp_path: Path
) -> None:
    kube = kube_apiserver
    token = kube.tokens["admin"]
    started = time.monotonic()
    crds = [crdcorpus.without_webhook(copy.deepcopy(c)) for c in crdcorpus.load(crdcorpus.CORPUS)]
    groups = crdcorpus.groups(crds)
    by_kind = {(c["spec"]["group"], c["spec"]["names"]["kind"]): c for c in crds}
    installed = await crdcorpus.install(kube.url, token, kube.ca_file, crds)
    await crdcorpus.wait_openapi(kube.url, token, kube.ca_file, crds)
    # One identity watches every kind of the corpus in turn, and a watch is given back a
    # moment after its subscription ends: room for all of them at once.
    settings = kube.gateway_settings(
        discovery_token_file=kube.token_files["admin"],
        upstream_max_streams_per_identity=256,
        upstream_max_streams=512,
    )
    try:
        async with contextlib.AsyncExitStack() as stack:
            admin = await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=kube.url, verify=kube.ssl_context(), headers=kube.headers("admin"),
                    timeout=120,
                )
            )  # fmt: skip
            made = await admin.post("/api/v1/namespaces", json={"metadata": {"name": NS}})
            assert made.status_code in (201, 409), made.text
            url, app = await stack.enter_async_context(serve_app(settings))
            gql = await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, headers=kube.headers("admin"), timeout=120)
            )
            live = app.state.runtime.live_schema
            plurals = {(c["spec"]["group"], c["spec"]["names"]["plural"]) for c in crds}
            await live.wait_catalog(
                lambda c: (
                    set(groups) <= group_scopes(c)
                    and plurals <= {(r.group, r.plural) for r in c.registry.values()}
                )
            )
            served_at = time.monotonic()

            # Every group's endpoint builds with every kind (no description: none left out).
            first: dict[str, dict[str, Any]] = {}
            names: list[crdkinds.Names] = []
            for group in groups:
                first[group] = await _introspect(gql, group)
                assert first[group]["__schema"]["description"] is None, group
                found = await crdkinds.group_names(live, group)
                assert {n.resource.kind for n in found} == {
                    kind for g, kind in by_kind if g == group
                }, group
                names += found
            built_at = time.monotonic()

            gate = asyncio.Semaphore(CONCURRENCY)

            async def one(n: crdkinds.Names) -> crdkinds.Outcome:
                r = n.resource
                crd = by_kind[(r.group, r.kind)]
                manifest = crdexample.example(crd, r.version, f"corpus-{r.kind.lower()}")
                async with gate:
                    return await crdkinds.exercise(
                        gql=gql, admin=admin, url=url, token=token, at=f"/apis/{r.group}/graphql",
                        names=n, manifest=manifest, namespace=NS,
                    )  # fmt: skip

            outcomes = await asyncio.gather(*(one(n) for n in names))
            exercised_at = time.monotonic()
            refused = {(n.resource.group, o.kind): o.refused for n, o in zip(names, outcomes, strict=True) if not o.created}  # fmt: skip  # noqa: E501
            for (group, kind), why in sorted(refused.items()):
                print(f"not created from a generated example: {kind}.{group}: {why}")
            for (group, kind), why in refused.items():
                assert why is not None
                code, message = why
                crd = by_kind[(group, kind)]
                version = next(n.resource.version for n in names if n.resource.kind == kind and n.resource.group == group)  # fmt: skip  # noqa: E501
                # Only a CEL rule the example cannot satisfy may refuse it, as the apiserver's
                # 422 relayed as INVALID with its message.
                assert code == "INVALID", (kind, why)
                assert crdexample.has_cel(_schema_of(crd, version)), (kind, why)
                assert "is invalid" in message, (kind, why)
                # ...and not a pattern, a missing field or a type the generator got wrong
                assert not any(
                    what in message
                    for what in (
                        "should match",
                        "Required value",
                        "Unsupported value",
                        "must be of type",
                    )
                ), (kind, why)

            # A second gateway, a process of its own: the same schema for every group.
            second = await stack.enter_async_context(
                serve_process_async(
                    tmp_path, "--server", kube.url, "--ca-file", kube.ca_file,
                    "--discovery-token-file", kube.token_files["admin"], "--log-level", "info",
                )
            )  # fmt: skip
            other = await stack.enter_async_context(
                httpx.AsyncClient(base_url=second.http, headers=kube.headers("admin"), timeout=120)
            )
            for _ in range(6000):
                if (await other.get("/readyz")).status_code == 200:
                    break
                await asyncio.sleep(0.02)  # a probe's cadence, not a synchronisation
            else:
                raise AssertionError("the second gateway never became ready")
            for group in groups:
                assert await _introspect(other, group) == first[group], group
            log = second.log
            assert "Traceback" not in log and "could not be built" not in log, log[-3000:]
            compared_at = time.monotonic()
    finally:
        await crdcorpus.delete(kube.url, token, kube.ca_file, crds)
        async with httpx.AsyncClient(
            base_url=kube.url, verify=kube.ssl_context(), headers=kube.headers("admin")
        ) as admin:
            await admin.delete(f"/api/v1/namespaces/{NS}")
    print(
        f"corpus: {len(crds)} CRDs in {len(groups)} groups; installed in {installed:.1f}s, "
        f"served {served_at - started:.1f}s after the start, {len(groups)} group schemas "
        f"built and introspected in {built_at - served_at:.1f}s, {len(names)} kinds "
        f"exercised in {exercised_at - built_at:.1f}s ({len(names) - len(refused)} created, "
        f"{len(refused)} refused for CEL rules), second gateway compared in "
        f"{compared_at - exercised_at:.1f}s; {time.monotonic() - started:.1f}s in all"
    )

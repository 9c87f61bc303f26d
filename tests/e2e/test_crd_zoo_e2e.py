"""The CRD zoo on the real kube-apiserver: every shape a structural schema allows, served.

The zoo's CRDs (:mod:`tests.support.crdzoo`) are installed; the OpenAPI v3 document the
apiserver publishes for them types exactly the schema the fast tests' document does
(:mod:`tests.support.crdopenapi`); then, through a discovering gateway, each kind (``Zoo``
with every shape, and kinds named ``Query``, ``Float``, ``JSON``, ``Pod``, ``String``)
answers a create from an example with every field set, a get, a list and a subscription
event, and every value comes back exactly: ``raw`` is the apiserver's object, and the typed
fields (numbers, int64 beyond 2^53, int-or-string, preserve-unknown-fields subtrees as
JSON, maps, odd names...) are the apiserver's values.
"""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import pytest
from graphql import GraphQLObjectType, get_named_type

from gateway.graphql.schemas._library import graphql_schema
from gateway.graphql.schemas.schema import group_scopes, printed, schema_for_catalog
from tests.e2e import crdkinds
from tests.e2e.apiserver import KubeAPIServer
from tests.support import crdcorpus, crdopenapi, crdzoo
from tests.support.graphql import serve_app

pytestmark = pytest.mark.e2e

GROUP = crdzoo.GROUP
AT = f"/apis/{GROUP}/graphql"
NS = "team-a"
#: Nesting a document may have (the gateway's limit is 16: the root field, the kind and
#: ``spec`` take three); deeper levels are read through ``raw``.
LEVELS = 11
#: Of the 2,000-property object, the fields selected by name (the rest through ``raw``).
WIDE_FIELDS = ("p0", "p1", "p1998", "p1999")


def _walk(t: GraphQLObjectType, value: Any, levels: int) -> tuple[str, Any]:
    """A selection of ``t``'s fields (``raw`` included, links left out) and what the gateway
    must answer for ``value`` (the apiserver's JSON of that type)."""
    if not isinstance(value, dict):
        value = None
    parts, expected = ["raw"], {"raw": value}
    for name, f in t.fields.items():
        if name == "raw" or f.args or f.resolve is None:
            continue
        if t.name == "ZooSpecWide" and name not in WIDE_FIELDS:
            continue
        inner = get_named_type(f.type)
        v = value.get(name) if value is not None else None
        if isinstance(inner, GraphQLObjectType):
            if levels == 0:
                continue
            if isinstance(v, list):
                sel = _walk(inner, None, levels - 1)[0]
                parts.append(f"{name} {sel}")
                expected[name] = [_walk(inner, i, levels - 1)[1] for i in v]
            else:
                sel, exp = _walk(inner, v, levels - 1)
                parts.append(f"{name} {sel}")
                expected[name] = exp if v is not None else None
        else:
            parts.append(name)
            expected[name] = v
    return "{ " + " ".join(parts) + " }", expected


async def _document(admin: httpx.AsyncClient, gv: str) -> dict[str, Any]:
    """The apiserver's OpenAPI v3 document of ``gv`` (the index's hash may be a moment
    old: the apiserver redirects to the current one)."""
    index = (await admin.get("/openapi/v3")).json()["paths"]
    response = await admin.get(index[gv]["serverRelativeURL"], follow_redirects=True)
    assert response.status_code == 200, response.status_code
    return response.json()  # type: ignore[no-any-return]


async def test_the_zoo_is_served_and_every_value_comes_back_exactly(
    kube_apiserver: KubeAPIServer,
) -> None:
    kube = kube_apiserver
    token = kube.tokens["admin"]
    crds = crdzoo.crds()
    await crdcorpus.install(kube.url, token, kube.ca_file, crds)
    await crdcorpus.wait_openapi(kube.url, token, kube.ca_file, crds)
    settings = kube.gateway_settings(discovery_token_file=kube.token_files["admin"])
    try:
        async with contextlib.AsyncExitStack() as stack:
            admin = await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=kube.url, verify=kube.ssl_context(), headers=kube.headers("admin"),
                    timeout=60,
                )
            )  # fmt: skip
            # The apiserver's document and the fast tests' one type the same schema.
            published = await _document(admin, f"apis/{GROUP}/{crdzoo.VERSION}")
            catalog = crdopenapi.catalog(crds)
            made = schema_for_catalog(catalog, scope=GROUP)
            theirs = schema_for_catalog(
                catalog, scope=GROUP, documents={(GROUP, crdzoo.VERSION): published}
            )
            assert printed(theirs.schema) == printed(made.schema)

            url, app = await stack.enter_async_context(serve_app(settings))
            gql = await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, headers=kube.headers("admin"), timeout=120)
            )
            live = app.state.runtime.live_schema
            plurals = {c["spec"]["names"]["plural"] for c in crds}
            await live.wait_catalog(
                lambda c: (
                    GROUP in group_scopes(c)
                    and plurals <= {r.plural for r in c.registry.values() if r.group == GROUP}
                )
            )
            names = await crdkinds.group_names(live, GROUP)
            assert sorted(n.resource.kind for n in names) == sorted(
                c["spec"]["names"]["kind"] for c in crds
            )
            schema = graphql_schema(live.groups[GROUP].built.schema)
            assert schema.description is None  # no kind left out
            for n in names:
                kind = n.resource.kind
                manifest = crdzoo.example(kind, f"every-{kind.lower()}")
                t = schema.get_type(n.type_name)
                assert isinstance(t, GraphQLObjectType)
                spec_type = get_named_type(t.fields["spec"].type)
                assert isinstance(spec_type, GraphQLObjectType)
                selection = _walk(spec_type, manifest["spec"], LEVELS)[0]
                outcome = await crdkinds.exercise(
                    gql=gql, admin=admin, url=url, token=token, at=AT, names=n,
                    manifest=manifest, namespace=NS,
                    typed=f"spec {selection}",
                    typed_expected=lambda direct, st=spec_type: {
                        "metadata": {"name": direct["metadata"]["name"]},
                        "spec": _walk(st, direct["spec"], LEVELS)[1],
                    },
                )  # fmt: skip
                assert outcome.created, outcome
            # The apiserver kept what was sent, so "the apiserver's value" is the example's.
            zoo = (await admin.get(f"/apis/{GROUP}/v1/namespaces/{NS}/zoos/every-zoo")).json()
            assert zoo["spec"] == crdzoo.spec_example()
    finally:
        await crdcorpus.delete(kube.url, token, kube.ca_file, crds)

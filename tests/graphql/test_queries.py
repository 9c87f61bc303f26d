"""GraphQL queries over HTTP for every resource: get, list (selectors, paging, resource
versions), pod subresources and logs, GET transport, GraphiQL page."""

from __future__ import annotations

import httpx

from kube_gateway_demo import DemoUpstream
from tests.support.graphql import NAMESPACE, data, error_of, gql


async def test_get_and_list_every_resource(client: httpx.AsyncClient) -> None:
    body = data(
        await gql(
            client,
            """{
              pods(namespace: "demo") { metadata { resourceVersion } items { metadata { name } } }
              events(namespace: "demo") { items { metadata { name } involvedObject { kind name } } }
              endpointsList(namespace: "demo") {
                items { metadata { name } subsets { ports { port } } }
              }
              leases {
                items { metadata { name namespace } spec { holderIdentity leaseDurationSeconds } }
              }
              images { items { metadata { name } dockerImageReference } }
            }""",
        )
    )
    for field in ("pods", "events", "endpointsList", "leases", "images"):
        assert body[field]["items"], field
    assert body["pods"]["metadata"]["resourceVersion"]
    pod_name = body["pods"]["items"][0]["metadata"]["name"]
    ep_name = body["endpointsList"]["items"][0]["metadata"]["name"]
    lease = body["leases"]["items"][0]["metadata"]
    image = body["images"]["items"][0]["metadata"]["name"]
    event = body["events"]["items"][0]["metadata"]["name"]
    one = data(
        await gql(
            client,
            """query($pod: String!, $ep: String!, $leaseNs: String!, $lease: String!,
                     $image: String!, $event: String!) {
              pod(namespace: "demo", name: $pod) { kind apiVersion metadata { name } raw }
              endpoints(namespace: "demo", name: $ep) { metadata { name } }
              lease(namespace: $leaseNs, name: $lease) { metadata { name } }
              image(name: $image) { metadata { name } dockerImageMetadata }
              event(namespace: "demo", name: $event) { metadata { name } }
            }""",
            {
                "pod": pod_name,
                "ep": ep_name,
                "leaseNs": lease["namespace"],
                "lease": lease["name"],
                "image": image,
                "event": event,
            },
        )
    )
    assert one["pod"]["metadata"]["name"] == pod_name
    assert one["pod"]["kind"] == "Pod"
    assert one["pod"]["raw"]["metadata"]["name"] == pod_name  # the object as sent upstream
    assert one["endpoints"]["metadata"]["name"] == ep_name
    assert one["lease"]["metadata"]["name"] == lease["name"]
    assert one["image"]["metadata"]["name"] == image
    assert one["event"]["metadata"]["name"] == event


async def test_list_selectors_paging_and_resource_version(
    client: httpx.AsyncClient, demo: DemoUpstream
) -> None:
    for i in range(5):
        await demo.store.create(
            "pods",
            {
                "metadata": {"name": f"paged-{i}", "labels": {"suite": "paging"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
            namespace=NAMESPACE,
        )
    query = """query($continue: String) {
      pods(namespace: "demo", labelSelector: "suite=paging", limit: 2, continue: $continue) {
        metadata { continue remainingItemCount resourceVersion }
        items { metadata { name } }
      }
    }"""
    names: list[str] = []
    token = None
    pages = 0
    while True:
        page = data(await gql(client, query, {"continue": token}))["pods"]
        names += [i["metadata"]["name"] for i in page["items"]]
        pages += 1
        token = page["metadata"]["continue"]
        if not token:
            break
    assert sorted(names) == [f"paged-{i}" for i in range(5)]
    assert pages == 3
    by_field = data(
        await gql(
            client,
            '{ pods(namespace: "demo", fieldSelector: "metadata.name=paged-3") '
            "{ items { metadata { name } } } }",
        )
    )["pods"]["items"]
    assert [i["metadata"]["name"] for i in by_field] == ["paged-3"]
    rv = data(await gql(client, '{ pods(namespace: "demo") { metadata { resourceVersion } } }'))[
        "pods"
    ]["metadata"]["resourceVersion"]
    at = data(
        await gql(
            client,
            """query($rv: String!) { pods(namespace: "demo", resourceVersion: $rv,
                resourceVersionMatch: NOT_OLDER_THAN) { metadata { resourceVersion } } }""",
            {"rv": rv},
        )
    )
    assert at["pods"]["metadata"]["resourceVersion"]
    every = data(await gql(client, "{ pods { items { metadata { namespace } } } }"))
    assert len({i["metadata"]["namespace"] for i in every["pods"]["items"]}) > 1


async def _running_pod(client: httpx.AsyncClient) -> tuple[str, str]:
    pods = data(
        await gql(
            client,
            '{ pods(namespace: "demo", fieldSelector: "status.phase=Running") '
            "{ items { metadata { name } spec { containers { name } } } } }",
        )
    )["pods"]["items"]
    pod = next(p for p in pods if len(p["spec"]["containers"]) == 1)
    return pod["metadata"]["name"], pod["spec"]["containers"][0]["name"]


async def test_pod_subresources_and_log(client: httpx.AsyncClient, demo: DemoUpstream) -> None:
    name, container = await _running_pod(client)
    await demo.store.append_log(NAMESPACE, name, container, "one", "two", "three")
    body = data(
        await gql(
            client,
            """query($name: String!, $c: String!) {
              podStatus(namespace: "demo", name: $name) { metadata { name } status { phase } }
              podEphemeralContainers(namespace: "demo", name: $name) {
                metadata { name } spec { ephemeralContainers { name } }
              }
              all: podLog(namespace: "demo", name: $name)
              tail: podLog(namespace: "demo", name: $name, container: $c, tailLines: 2)
              limited: podLog(namespace: "demo", name: $name, limitBytes: 5)
              stamped: podLog(namespace: "demo", name: $name, timestamps: true, sinceSeconds: 3600)
            }""",
            {"name": name, "c": container},
        )
    )
    assert body["podStatus"]["metadata"]["name"] == name
    assert body["podStatus"]["status"]["phase"] == "Running"
    assert body["podEphemeralContainers"]["metadata"]["name"] == name
    async with httpx.AsyncClient(
        base_url=demo.url, headers={"Authorization": "Bearer admin-token"}
    ) as upstream:
        path = f"/api/v1/namespaces/demo/pods/{name}/log"
        assert body["all"] == (await upstream.get(path)).text
        assert body["all"].endswith("one\ntwo\nthree\n")
        assert body["tail"] == "two\nthree\n"
        assert body["limited"] == (await upstream.get(path, params={"limitBytes": 5})).text
        assert len(body["limited"]) == 5
    assert body["stamped"].splitlines()[-1].endswith("Z three")
    err = error_of(
        await gql(
            client,
            'query($n: String!) { podLog(namespace: "demo", name: $n, sinceSeconds: 5, '
            'sinceTime: "2024-01-01T00:00:00Z") }',
            {"n": name},
        )
    )
    assert err["extensions"]["code"] == "INVALID"
    assert err["extensions"]["causes"][0]["field"] == "sinceTime"


async def test_get_transport_runs_queries_only(client: httpx.AsyncClient) -> None:
    response = await client.get(
        "/graphql",
        params={"query": '{ pods(namespace: "demo", limit: 1) { items { metadata { name } } } }'},
    )
    assert response.status_code == 200
    assert len(response.json()["data"]["pods"]["items"]) == 1
    response = await client.get(
        "/graphql",
        params={
            "query": 'mutation { deletePod(namespace: "demo", name: "x") { raw } }',
        },
    )
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["errors"][0]["extensions"]["code"] == "METHOD_NOT_ALLOWED"
    page = await client.get("/graphql", headers={"Accept": "text/html"})
    assert page.status_code == 200
    assert "graphiql.min.js" in page.text
    asset = await client.get("/graphql/static/graphiql.min.js")
    assert asset.status_code == 200
    assert len(asset.content) > 1_000_000


def test_unary_root_fields_with_scalar_arguments_call_their_runner_directly() -> None:
    """graphql-core calls the runner of ``pod`` and ``pods`` straight (no strawberry
    resolver in between); a field taking an input object (``createPod``'s ``object``,
    ``deletePod``'s ``preconditions``) keeps strawberry's conversion."""
    from gateway.graphql.schemas._library import graphql_schema
    from gateway.graphql.schemas.seed import gateway_schema

    built = graphql_schema(gateway_schema())
    query, mutation = built.query_type, built.mutation_type
    assert query is not None and mutation is not None
    direct = "_direct.<locals>.resolve"
    for field in (query.fields["pod"], query.fields["pods"], query.fields["podLog"]):
        assert field.resolve is not None and field.resolve.__qualname__ == direct
    for field in (mutation.fields["createPod"], mutation.fields["deletePod"]):
        assert field.resolve is not None and field.resolve.__qualname__ != direct

"""``/metrics`` on a real kube-apiserver: served to a caller RBAC allows ``get`` on the
non-resource URL ``/metrics`` (the rule docs/operations.md gives a scraper), refused to
everyone else."""

from __future__ import annotations

import httpx

from tests.e2e.apiserver import KubeAPIServer
from tests.support.graphql import serve_app

RBAC = "/apis/rbac.authorization.k8s.io/v1"
GROUP = "rbac.authorization.k8s.io"
SCRAPER = "kube-gateway-e2e-metrics-scraper"


async def _grant_alice_the_scraper_rule(kube: KubeAPIServer) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": SCRAPER},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": SCRAPER},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": SCRAPER,
        },
        "subjects": [{"apiGroup": GROUP, "kind": "User", "name": "alice"}],
    }
    async with httpx.AsyncClient(
        base_url=kube.url, headers=kube.headers("admin"), verify=kube.ssl_context(), timeout=30
    ) as admin:
        for path, obj in (("clusterroles", role), ("clusterrolebindings", binding)):
            created = await admin.post(f"{RBAC}/{path}", json=obj)
            assert created.status_code in (201, 409), created.text  # 409: a re-run


async def test_metrics_are_served_to_the_callers_rbac_allows(kube_apiserver: KubeAPIServer) -> None:
    await _grant_alice_the_scraper_rule(kube_apiserver)
    async with (
        serve_app(kube_apiserver.gateway_settings()) as (url, _),
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        anonymous = await client.get("/metrics")
        assert anonymous.status_code == 401 and "kube_gateway" not in anonymous.text
        nobody = await client.get("/metrics", headers=kube_apiserver.headers("nobody"))
        assert nobody.status_code == 403 and "kube_gateway" not in nobody.text
        for scraper in ("alice", "admin"):  # the scraper rule; system:masters
            served = await client.get("/metrics", headers=kube_apiserver.headers(scraper))
            assert served.status_code == 200, (scraper, served.text)
            assert "kube_gateway_operations_total" in served.text

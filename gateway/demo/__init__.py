"""The demo upstream: a real HTTP server speaking the Kubernetes API wire protocol.

It serves the five resources of the gateway (core/v1 pods with ``log``, ``status`` and
``ephemeralcontainers``, events, endpoints; coordination.k8s.io/v1 leases;
image.openshift.io/v1 images) with the apiserver's semantics: resourceVersions, watches with
bookmarks and 410s, pagination, every patch type including server-side apply, dry runs,
graceful pod deletion, pod logs with follow, bearer-token auth and RBAC-style Forbidden
errors.  It backs ``kube-gateway serve --demo`` and the test suites::

    async with DemoUpstream() as demo:
        async with httpx.AsyncClient(base_url=demo.url,
                                     headers={"Authorization": "Bearer admin-token"}) as c:
            pods = (await c.get("/api/v1/namespaces/demo/pods")).json()
        await demo.store.create("pods", {...}, namespace="demo")   # in-process, emits events
        demo.faults.expire_watches(1)                             # the next watch gets 410

Run standalone with ``python -m gateway.demo --port 8001 --animate``.
"""

from __future__ import annotations

from gateway.demo.auth import DEFAULT_TOKENS, TokenGrant
from gateway.demo.faults import Faults
from gateway.demo.inprocess import DemoStore
from gateway.demo.options import DeleteOptions, ListQuery, WriteOptions
from gateway.demo.status import ApiError
from gateway.demo.upstream import DemoUpstream

__all__ = [
    "DEFAULT_TOKENS",
    "ApiError",
    "DeleteOptions",
    "DemoStore",
    "DemoUpstream",
    "Faults",
    "ListQuery",
    "TokenGrant",
    "WriteOptions",
]

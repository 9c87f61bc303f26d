"""The demo upstream: a real HTTP server speaking the Kubernetes API wire protocol.

It serves every resource of the registry (:mod:`gateway.core.model.registry`), with the fields of
the product's schema (:mod:`gateway.core.model.schema`), and the apiserver's semantics:
resourceVersions, watches with bookmarks and 410s, pagination, every patch type including
server-side apply, dry runs, bearer-token auth and RBAC-style Forbidden errors.  What some
resources do beyond that (graceful pod deletion and pod logs, Event and Lease rules, Image
served as a custom resource) is kept per registry key in :mod:`kube_gateway_demo.strategy`.  It
backs ``kube-gateway serve --demo`` and the fast test suite, and ships apart from the gateway
(the ``kube-gateway-demo`` distribution), so that a production install holds no fake API
server and none of its tokens::

    async with DemoUpstream() as demo:
        async with httpx.AsyncClient(base_url=demo.url,
                                     headers={"Authorization": "Bearer admin-token"}) as c:
            pods = (await c.get("/api/v1/namespaces/demo/pods")).json()
        await demo.store.create("pods", {...}, namespace="demo")   # in-process, emits events
        demo.faults.expire_watches(1)                             # the next watch gets 410

Its types are named ``Demo*`` (:class:`DemoApiError`, :class:`DemoWriteOptions`, ...) so that
they are never mistaken for the core's.
"""

from __future__ import annotations

from kube_gateway_demo.auth import ADMIN_TOKEN, DEFAULT_TOKENS, TokenGrant
from kube_gateway_demo.faults import Faults
from kube_gateway_demo.inprocess import DemoStore
from kube_gateway_demo.options import DemoDeleteOptions, DemoWriteOptions, ListQuery
from kube_gateway_demo.status import DemoApiError
from kube_gateway_demo.upstream import DemoUpstream

__all__ = [
    "ADMIN_TOKEN",
    "DEFAULT_TOKENS",
    "DemoApiError",
    "DemoDeleteOptions",
    "DemoStore",
    "DemoUpstream",
    "DemoWriteOptions",
    "Faults",
    "ListQuery",
    "TokenGrant",
]

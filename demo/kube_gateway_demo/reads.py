"""Reads: one object, and lists with the apiserver's resourceVersion, limit and continue
semantics (a paginated list is consistent: its later pages are read from the history, at
the first page's resourceVersion)."""

from __future__ import annotations

from gateway.core.model.registry import Resource
from kube_gateway_demo import fielderrors as fe
from kube_gateway_demo import listing
from kube_gateway_demo.cluster import Cluster
from kube_gateway_demo.options import ListQuery
from kube_gateway_demo.status import (
    DemoApiError,
    bad_request,
    gone,
    internal,
    not_found,
    too_large_resource_version,
)
from kube_gateway_demo.storage import Obj, typed

_CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)


def read_rv(rv: str, *, watch: bool = False) -> int | None:
    """The numeric resourceVersion a read must reach, or None when any state will do.

    Raises:
        DemoApiError: for a resourceVersion that is not a number: 400 on a list, and (as the
            watch cache reports it) a bare 500 on a watch.
    """
    if rv in ("", "0"):
        return None
    if rv.isascii() and rv.isdigit() and len(rv) <= 20 and int(rv) < 2**64:
        return int(rv)
    detail = str(
        fe.invalid(
            "resourceVersion",
            rv,
            f"strconv.ParseUint: parsing {fe.go_quote(rv)}: invalid syntax",
        )
    )
    if watch:
        raise internal(detail, reason="")
    raise bad_request(f"invalid resource version: {detail}")


class Reads:
    """GET and LIST of the cluster's objects."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def get(self, res: Resource, name: str, *, namespace: str | None) -> Obj:
        """GET one object (typed).

        Raises:
            DemoApiError: 404.
        """
        obj = self.cluster.storage.get(res, self.cluster.key(res, namespace, name))
        if obj is None:
            raise not_found(res.plural, res.group, name)
        return typed(res, obj)

    def list(
        self,
        res: Resource,
        query: ListQuery,
        *,
        resource_version: str = "",
        resource_version_match: str = "",
        limit: int = 0,
        continue_token: str = "",
    ) -> Obj:
        """LIST with the apiserver's resourceVersion, limit and continue semantics.

        Raises:
            DemoApiError: 400 (bad continue), 410 (snapshot compacted), 504 (future RV).
        """
        storage = self.cluster.storage
        strat = self.cluster.strategy(res)
        col = storage.collection(res)
        prefix = f"{query.namespace}/" if res.namespaced and query.namespace else ""
        start = ""
        if continue_token:
            list_rv, relative = listing.decode_continue(continue_token)
            start = prefix + relative.lstrip("/")
            if resource_version and resource_version != "0":
                raise bad_request("specifying resource version is not allowed when using continue")
            if list_rv <= 0:
                list_rv = storage.rv
            try:
                state = storage.state_at(res, list_rv)
            except DemoApiError:
                raise gone(
                    _CONTINUE_TOO_OLD, continue_token=listing.encode_continue(0, relative)
                ) from None
        else:
            wanted = read_rv(resource_version)
            if wanted is not None and wanted > storage.rv:
                raise too_large_resource_version(wanted, storage.rv)
            if resource_version_match == "Exact" and wanted is not None:
                list_rv = wanted
                state = storage.state_at(res, wanted)
            else:
                list_rv = storage.rv
                state = col.objects
        keys = col.sorted_keys() if state is col.objects else sorted(state)
        pg = listing.page(
            state,
            keys,
            prefix=prefix,
            start=start,
            limit=limit,
            rv=list_rv,
            labels=query.labels,
            fields=query.fields,
            field_func=strat.fields,
        )
        meta: Obj = {"resourceVersion": str(list_rv)}
        if pg.continue_token:
            meta["continue"] = pg.continue_token
        if pg.remaining is not None:
            meta["remainingItemCount"] = pg.remaining
        if strat.custom_resource:
            # an unstructured list: items carry their kind, ListMeta always has "continue"
            meta.setdefault("continue", "")
            return {
                "apiVersion": res.api_version,
                "items": [typed(res, item) for item in pg.items],
                "kind": res.list_kind,
                "metadata": {k: meta[k] for k in sorted(meta)},
            }
        return {
            "kind": res.list_kind,
            "apiVersion": res.api_version,
            "metadata": meta,
            "items": pg.items,
        }

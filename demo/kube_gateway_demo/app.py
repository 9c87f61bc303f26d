"""The ASGI application: authentication, authorisation, routing, discovery, faults, lifespan.

The API groups, their resources and discovery are the store's registry; what a particular
resource adds (a deprecation warning, discovery categories) is data keyed by registry key.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import orjson

from gateway.core.model.registry import ENDPOINTS, POD, Resource
from kube_gateway_demo import animate, openapi
from kube_gateway_demo import fielderrors as fe
from kube_gateway_demo.apiextensions import version_priority
from kube_gateway_demo.auth import (
    Attributes,
    TokenGrant,
    bearer_token,
    denial,
    impersonated,
    self_subject_review,
    token_review,
)
from kube_gateway_demo.catalog import CRD, DEPLOYMENT, REPLICASET, SERVICE, CustomResource, crd_of
from kube_gateway_demo.faults import Faults
from kube_gateway_demo.handlers import ResourceHandlers, Target
from kube_gateway_demo.http import (
    DropConnection,
    Receive,
    Request,
    Responder,
    Scope,
    Send,
    accepts_gzip,
    mark_dropped,
)
from kube_gateway_demo.inprocess import DemoStore
from kube_gateway_demo.status import (
    DemoApiError,
    bad_request,
    internal,
    invalid,
    media_not_acceptable,
    method_not_allowed,
    not_acceptable,
    not_found,
    path_not_found,
    unauthorized,
)

log = logging.getLogger("kube_gateway_demo")

Groups = Mapping[tuple[str, str], tuple[Resource, ...]]

WARNINGS: Final[Mapping[str, str]] = {
    ENDPOINTS.key: "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice",
}
"""The ``Warning`` every request of a resource gets, by registry key."""
CATEGORIES: Final[Mapping[str, list[str]]] = {
    POD.key: ["all"],
    DEPLOYMENT.key: ["all"],
    REPLICASET.key: ["all"],
    SERVICE.key: ["all"],
    CRD.key: ["api-extensions"],
}
"""Discovery categories by registry key."""
_HEALTH: Final = frozenset(("healthz", "livez", "readyz"))
VERSION: Final = {
    "major": "1",
    "minor": "36",
    "emulationMajor": "1",
    "emulationMinor": "36",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "35",
    "gitVersion": "v1.36.3",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.26.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def api_groups(resources: Iterable[Resource]) -> Groups:
    """The served resources by ``(group, version)``, the core group first."""
    groups: dict[tuple[str, str], tuple[Resource, ...]] = {}
    for r in sorted(resources, key=lambda r: r.group != ""):
        groups[(r.group, r.version)] = (*groups.get((r.group, r.version), ()), r)
    return groups


def _resource_verb(method: str, name: str | None, watch: bool) -> str:
    if method in ("GET", "HEAD"):
        if watch:
            return "watch"
        return "get" if name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return method.lower()


def parse_resource_path(segments: list[str]) -> tuple[str, str, list[str]] | None:
    """``(group, version, rest)`` for ``/api/v1/...`` and ``/apis/g/v/...`` resource paths."""
    if len(segments) >= 3 and segments[0] == "api":
        return "", segments[1], segments[2:]
    if len(segments) >= 4 and segments[0] == "apis":
        return segments[1], segments[2], segments[3:]
    return None


class DemoApp:
    """The demo upstream's ASGI application.

    Args:
        store: the cluster state.
        faults: the fault switchboard.
        tokens: accepted bearer tokens.
        bookmark_interval: seconds between progress bookmarks on watches that asked for them.
        max_body_bytes: request bodies above this answer 413 (the apiserver's is 3 MiB).
        animate: keep the sample data changing in the background (owned by the lifespan).
        animate_interval: seconds between animation steps.
    """

    def __init__(
        self,
        store: DemoStore,
        faults: Faults,
        tokens: Mapping[str, TokenGrant],
        *,
        bookmark_interval: float = 60.0,
        max_body_bytes: int = 3 * 1024 * 1024,
        animate: bool = False,
        animate_interval: float = 1.5,
        compress: bool = True,
    ) -> None:
        self.store = store
        #: Gzip large responses to clients that accept it (the apiserver's default).
        self.compress = compress
        self._groups = api_groups(store.resources)
        self._served_generation = store.generation
        self.faults = faults
        self.tokens = dict(tokens)
        self.animate = animate
        self.animate_interval = animate_interval
        self.handlers = ResourceHandlers(
            store, faults, bookmark_interval=bookmark_interval, max_body_bytes=max_body_bytes
        )
        self._builtin_docs: dict[str, bytes] = {}
        self._custom_docs: dict[str, tuple[str, bytes]] = {}
        self.closing = asyncio.Event()
        self._animator: asyncio.Task[None] | None = None
        self.server_address = "127.0.0.1:0"

    @property
    def groups(self) -> Groups:
        """The served resources by ``(group, version)``: the store's registry now (a CRD
        created, changed or deleted changes it)."""
        if self._served_generation != self.store.generation:
            self._groups = api_groups(self.store.resources)
            self._served_generation = self.store.generation
        return self._groups

    def _categories(self, res: Resource) -> list[str] | None:
        return CATEGORIES.get(res.key) or self.store.categories.get(res.key) or None

    def close(self) -> None:
        """Begin shutdown: end every watch, follow and delayed response promptly."""
        self.closing.set()
        self.store.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    # --- lifespan ----------------------------------------------------------------------------

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.animate:
                    self._animator = asyncio.create_task(
                        animate.run(self.store, self.animate_interval), name="demo-animate"
                    )
                    self._animator.add_done_callback(_log_failure)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop_animation()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def stop_animation(self) -> None:
        """Cancel the animation task and wait for it."""
        task, self._animator = self._animator, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --- requests ----------------------------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        req = Request.from_scope(scope, receive)
        resp = Responder(
            send, audit_id=req.audit_id, gzip=self.compress and accepts_gzip(req.headers)
        )
        try:
            resp.pretty = bool(req.flag("pretty"))
            await self._dispatch(req, resp)
        except DemoApiError as err:
            if resp.started:
                mark_dropped()  # an error after the headers: abandon the response
                return
            await resp.error(err)
        except DropConnection:
            mark_dropped()
        except Exception:
            # A bug in the demo: answer as the apiserver answers a panic, log the details.
            log.exception("demo upstream failed on %s %s", req.method, req.path)
            if resp.started:
                mark_dropped()
                return
            await resp.error(
                internal("an error on the server has prevented the request from succeeding")
            )

    async def _dispatch(self, req: Request, resp: Responder) -> None:
        segments = [s for s in req.path.split("/") if s]
        if len(segments) == 1 and segments[0] in _HEALTH:
            await self._plain(resp, 200, b"ok")
            return
        token = bearer_token(req.headers.get("authorization"))
        # No token: the grant of the empty token, when the tokens have one (a cluster that
        # lets anonymous requests in as system:anonymous), else 401.
        grant = self.tokens.get(token or "")
        if grant is None:
            raise unauthorized()
        if segments == _TOKEN_REVIEW:
            await self._token_review(req, resp, grant)
            return
        grant = impersonated(grant, req.headers, self.tokens)
        if segments == _SELF_SUBJECT_REVIEW:
            if req.method != "POST":
                raise method_not_allowed()
            # fail_requests(verb="create", resource="selfsubjectreviews", status=404) plays
            # a cluster older than 1.28, which has no such API
            failure = self.faults.take_failure("create", "selfsubjectreviews")
            if failure is not None:
                raise failure
            await resp.json(201, self_subject_review(grant, anonymous=not token))
            return
        if segments == _ACCESS_REVIEW:
            await self._access_review(req, resp, grant)
            return
        if segments[:2] == ["openapi", "v3"]:
            await self._openapi(req, resp, segments[2:])
            return
        parsed = parse_resource_path(segments)
        if parsed is None:
            await self._discovery(req, resp, segments)
            return
        group, version, rest = parsed
        target, attrs = self._target(req, group, version, rest)
        if not grant.allows(attrs.verb, namespaced=attrs.namespaced, namespace=attrs.namespace):
            raise denial(grant, attrs)
        if target is None:
            raise path_not_found()
        if target.res.key in WARNINGS:
            resp.warnings.append(WARNINGS[target.res.key])
        if target.subresource != "log" and not _accepts_json(req.headers.get("accept", "")):
            resp.pretty = True  # go-restful indents this one
            raise not_acceptable(
                (
                    "application/json",
                    "application/yaml",
                    "application/vnd.kubernetes.protobuf",
                    "application/json;stream=watch",
                    "application/vnd.kubernetes.protobuf;stream=watch",
                )
            )
        await self._faults_before(attrs, resp)
        await self._route(req, resp, target)

    def _target(
        self, req: Request, group: str, version: str, rest: list[str]
    ) -> tuple[Target | None, Attributes]:
        watch_path = rest[0] == "watch"
        if watch_path:
            rest = rest[1:]
        namespace: str | None = None
        if (
            rest
            and rest[0] == "namespaces"
            and len(rest) >= 3
            and rest[2] not in ("status", "finalize")
        ):
            namespace, rest = rest[1], rest[2:]
        plural = rest[0] if rest else ""
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        res = next((r for r in self.groups.get((group, version), ()) if r.plural == plural), None)
        watch = watch_path or (req.method == "GET" and name is None and bool(req.flag("watch")))
        verb = _resource_verb(req.method, name, watch)
        namespaced = res.namespaced if res is not None else namespace is not None
        attrs = Attributes(verb, plural, group, namespace, name, sub, namespaced=namespaced)
        valid = (
            res is not None
            and len(rest) <= 3
            and not (res.namespaced and name is not None and namespace is None)
            and not (not res.namespaced and namespace is not None)
            and (sub is None or sub in res.subresources or self._custom(res))
            and not (watch_path and sub is not None)
        )
        if not valid or res is None:
            return None, attrs
        return Target(res, namespace, name, sub, watch_path), attrs

    def _custom(self, res: Resource) -> bool:
        return self.store.strategies[res.key].custom_resource

    async def _hold(self, verb: str) -> None:
        """Wait while requests of ``verb`` are held (until released, or the server closes)."""
        if self.faults.holding(verb):
            held = asyncio.ensure_future(self.faults.held(verb))
            closing = asyncio.ensure_future(self.closing.wait())
            await asyncio.wait({held, closing}, return_when=asyncio.FIRST_COMPLETED)
            held.cancel()
            closing.cancel()

    async def _faults_before(self, attrs: Attributes, resp: Responder) -> None:
        resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
        await self._hold(attrs.verb)
        delay = self.faults.delay_for(attrs.verb)
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.closing.wait(), delay)
        failure = self.faults.take_failure(attrs.verb, resource)
        if failure is not None:
            raise failure
        budget = self.faults.take_drop(attrs.verb, resource)
        if budget is not None:
            resp.drop_after = budget

    async def _route(self, req: Request, resp: Responder, t: Target) -> None:
        h = self.handlers
        method = req.method
        if (
            t.subresource is not None
            and t.name
            and self._custom(t.res)
            and t.subresource not in t.res.subresources
        ):
            # a custom resource without that subresource: the lookup finds nothing
            raise not_found(t.res.plural, t.res.group, t.name)
        if t.subresource == "scale" and isinstance(t.res, CustomResource):
            await h.scale(req, resp, t)
            return
        if t.subresource == "log":
            if method != "GET":
                raise method_not_allowed()
            await h.log(req, resp, t)
            return
        if t.subresource is not None:
            handler = {"GET": h.get, "PUT": h.update, "PATCH": h.patch}.get(method)
        elif t.watch_path:
            handler = h.watch if method == "GET" else None
        elif t.name is None:
            if method == "GET":
                handler = h.watch if req.flag("watch") else h.list
            else:
                handler = {"POST": h.create, "DELETE": h.delete_collection}.get(method)
        else:
            handler = {"GET": h.get, "PUT": h.update, "PATCH": h.patch, "DELETE": h.delete}.get(
                method
            )
        if handler is None:
            raise method_not_allowed()
        await handler(req, resp, t)

    # --- non-resource endpoints --------------------------------------------------------------

    async def _plain(self, resp: Responder, code: int, body: bytes) -> None:
        await resp.start(
            code,
            [
                ("content-type", "text/plain; charset=utf-8"),
                ("x-content-type-options", "nosniff"),
                ("content-length", str(len(body))),
            ],
        )
        await resp.write(body, more=False)

    async def _discovery(self, req: Request, resp: Responder, segments: list[str]) -> None:
        if req.method != "GET":
            raise method_not_allowed()
        if segments in (["api"], ["apis"]):
            aggregated = openapi.wants_aggregated(req.headers.get("accept", ""))
            if aggregated is None:
                resp.pretty = True
                raise media_not_acceptable(openapi.NOT_ACCEPTABLE)
            if aggregated:
                await self._aggregated(resp, core=segments == ["api"])
                return
        body: Any
        if not segments:
            body = {
                "paths": sorted(
                    {
                        "/api",
                        "/api/v1",
                        "/apis",
                        "/healthz",
                        "/livez",
                        "/openapi/v3",
                        "/readyz",
                        "/version",
                        *(f"/apis/{g}" for g, _ in self.groups if g),
                        *(f"/apis/{g}/{v}" for g, v in self.groups if g),
                    }
                )
            }
        elif segments == ["version"]:
            body = VERSION
        elif segments == ["api"]:
            body = {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": self.server_address}
                ],
            }
        elif segments == ["apis"]:
            versions = _group_versions(self.groups)
            body = {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [_group(g, vs) for g, vs in versions.items() if g],
            }
        elif (
            len(segments) == 2
            and segments[0] == "apis"
            and any(g == segments[1] for g, _ in self.groups)
        ):
            body = {
                "kind": "APIGroup",
                "apiVersion": "v1",
                **_group(segments[1], _group_versions(self.groups)[segments[1]]),
            }
        elif (len(segments) == 2 and segments[0] == "api" and ("", segments[1]) in self.groups) or (
            len(segments) == 3
            and segments[0] == "apis"
            and (segments[1], segments[2]) in self.groups
        ):
            group = "" if segments[0] == "api" else segments[1]
            version = segments[-1]
            body = _resource_list(group, version, self.groups[(group, version)], self._categories)
        else:
            raise path_not_found()
        await resp.json(200, body)

    async def _aggregated(self, resp: Responder, *, core: bool) -> None:
        """Aggregated discovery (apidiscovery.k8s.io/v2) of ``/api`` or ``/apis``."""
        by_group: dict[str, list[dict[str, Any]]] = {}
        groups = self.groups
        ordered = sorted(
            groups, key=lambda gv: (_first_seen(groups, gv[0]), version_priority(gv[1]))
        )
        for group, version in ordered:
            resources = groups[(group, version)]
            if (group == "") != core:
                continue
            entries = [
                openapi.discovery_resource(r, self._categories(r), custom=self._custom(r))
                for r in sorted(resources, key=lambda r: r.plural)
            ]
            by_group.setdefault(group, []).append(
                {"version": version, "resources": entries, "freshness": "Current"}
            )
        items = [
            {"metadata": {"name": g} if g else {}, "versions": versions}
            for g, versions in by_group.items()
        ]
        body = orjson.dumps(openapi.discovery_list(items))
        await resp.start(
            200,
            [
                ("cache-control", "public"),
                ("content-type", openapi.AGGREGATED),
                ("etag", f'"{openapi.document_hash(body)}"'),
                ("vary", "Accept"),
                ("content-length", str(len(body))),
            ],
        )
        await resp.write(body, more=False)

    # --- OpenAPI v3 ---------------------------------------------------------------------------

    def openapi_documents(self) -> dict[str, bytes]:
        """The OpenAPI v3 documents served now, by index key (``apis/apps/v1``)."""
        docs: dict[str, bytes] = {}
        for (group, version), resources in self.groups.items():
            key = openapi.gv_path(group, version)
            custom = [
                r
                for r in resources
                if self._custom(r) and (crd_of(r) is not None or isinstance(r, CustomResource))
            ]
            if not custom:
                if key not in self._builtin_docs:
                    doc = openapi.builtin_document(group, version, resources)
                    self._builtin_docs[key] = openapi.render(doc)
                docs[key] = self._builtin_docs[key]
                continue
            crds = []
            for res in custom:
                found = self.store.storage.get(CRD, f"{res.plural}.{res.group}")
                if found is not None:
                    crds.append(found)
            if not crds:
                continue  # the definition is gone: nothing to describe
            rv = ",".join(str(c["metadata"]["resourceVersion"]) for c in crds)
            cached = self._custom_docs.get(key)
            if cached is None or cached[0] != rv:
                cached = (rv, openapi.render(openapi.custom_document(crds, version)))
                self._custom_docs[key] = cached
            docs[key] = cached[1]
        for gone in set(self._custom_docs) - set(docs):
            del self._custom_docs[gone]
        return docs

    async def _openapi(self, req: Request, resp: Responder, rest: list[str]) -> None:
        if req.method != "GET":
            raise method_not_allowed()
        docs = self.openapi_documents()
        if not rest:
            index = {
                "paths": {
                    key: {"serverRelativeURL": f"/openapi/v3/{key}?hash={openapi.document_hash(b)}"}
                    for key, b in sorted(docs.items())
                }
            }
            body = orjson.dumps(index)
            await resp.start(
                200,
                [
                    ("cache-control", "no-cache, private"),
                    ("content-type", "text/plain; charset=utf-8"),
                    ("content-length", str(len(body))),
                ],
            )
            await resp.write(body, more=False)
            return
        key = "/".join(rest)
        await self._hold("openapi")  # a document (not the index) may be held, as a verb
        doc = docs.get(key)
        if doc is None:
            await resp.start(404, [("cache-control", "no-cache, private"), ("content-length", "0")])
            await resp.write(b"", more=False)
            return
        digest = openapi.document_hash(doc)
        asked = req.param("hash")
        common = [("etag", f'"{digest}"'), ("vary", "Accept")]
        if asked is not None and asked != digest:
            await resp.start(
                301,
                [
                    ("cache-control", "no-cache, private"),
                    ("content-type", "application/json"),
                    *common,
                    ("location", f"/openapi/v3/{key}?hash={digest}"),
                    ("content-length", "0"),
                ],
            )
            await resp.write(b"", more=False)
            return
        cache = "public, immutable" if asked is not None else "no-cache, private"
        await resp.start(
            200,
            [
                ("cache-control", cache),
                ("content-type", "application/json"),
                *common,
                ("content-length", str(len(doc))),
            ],
        )
        await resp.write(doc, more=False)

    async def _token_review(self, req: Request, resp: Responder, grant: TokenGrant) -> None:
        """``tokenreviews``: who is this token?  (The administrator may ask.)"""
        if req.method != "POST":
            raise method_not_allowed()
        try:
            review = orjson.loads(await req.body(64 * 1024) or b"{}")
        except orjson.JSONDecodeError as exc:
            raise bad_request(str(exc)) from None
        await resp.json(201, token_review(grant, review, self.tokens))

    async def _access_review(self, req: Request, resp: Responder, grant: TokenGrant) -> None:
        """``selfsubjectaccessreviews``: may the caller do this? (Answered from its grant.)"""
        if req.method != "POST":
            raise method_not_allowed()
        raw = await req.body(64 * 1024)
        try:
            review = orjson.loads(raw or b"{}")
        except orjson.JSONDecodeError as exc:
            raise bad_request(str(exc)) from None
        await resp.json(201, _access_review_answer(grant, review, self.groups))


_ACCESS_REVIEW: Final = ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"]
_TOKEN_REVIEW: Final = ["apis", "authentication.k8s.io", "v1", "tokenreviews"]
_SELF_SUBJECT_REVIEW: Final = ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"]


def _access_review_answer(grant: TokenGrant, review: Any, groups: Groups) -> dict[str, Any]:
    """The apiserver's answer to a SelfSubjectAccessReview (resource attributes, or a
    non-resource URL)."""
    spec = review.get("spec") if isinstance(review, dict) else None
    url = spec.get("nonResourceAttributes") if isinstance(spec, dict) else None
    if isinstance(url, dict):
        # A non-resource URL (/metrics, /healthz): a grant over the whole cluster covers it.
        verb = str(url.get("verb") or "")
        allowed = bool(verb) and grant.allows(verb, namespaced=False, namespace=None)
        return {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": {"allowed": allowed},
        }
    attrs = spec.get("resourceAttributes") if isinstance(spec, dict) else None
    if not isinstance(attrs, dict):
        raise invalid(
            "SelfSubjectAccessReview",
            "authorization.k8s.io",
            "",
            [fe.required("spec.resourceAttributes", "resourceAttributes is required")],
        )
    group = str(attrs.get("group") or "")
    plural = str(attrs.get("resource") or "")
    namespace = str(attrs.get("namespace") or "") or None
    verb = str(attrs.get("verb") or "")
    res = next(
        (r for (g, _), rs in groups.items() if g == group for r in rs if r.plural == plural), None
    )
    namespaced = res.namespaced if res is not None else namespace is not None
    allowed = bool(verb) and grant.allows(verb, namespaced=namespaced, namespace=namespace)
    status: dict[str, Any] = {"allowed": allowed}
    if allowed:
        status["reason"] = f'demo: allowed by the grant of user "{grant.user}"'
    return {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": status,
    }


def _accepts_json(accept: str) -> bool:
    """Whether an ``Accept`` header admits JSON (the only encoding the demo serves)."""
    if not accept.strip():
        return True
    for part in accept.split(","):
        media = part.split(";", 1)[0].strip().lower()
        if media in (
            "*/*",
            "application/*",
            "application/json",
            "application/yaml",
            "application/json-seq",
            "application/jsonl",
        ):
            return True
    return False


def _first_seen(groups: Groups, group: str) -> int:
    return next(i for i, (g, _) in enumerate(groups) if g == group)


def _group_versions(groups: Groups) -> dict[str, list[str]]:
    """Each group's served versions, the preferred (highest priority) first."""
    out: dict[str, list[str]] = {}
    for g, v in groups:
        out.setdefault(g, []).append(v)
    return {g: sorted(vs, key=version_priority) for g, vs in out.items()}


def _group(group: str, versions: list[str]) -> dict[str, Any]:
    gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}


def _resource_list(
    group: str,
    version: str,
    resources: tuple[Resource, ...],
    categories: Callable[[Resource], list[str] | None],
) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for r in resources:
        entry: dict[str, Any] = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": sorted(r.verbs),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        found = categories(r)
        if found:
            entry["categories"] = found
        items.append(entry)
        for sub in sorted(r.subresources.values(), key=lambda s: (s.name != "status", s.name)):
            item: dict[str, Any] = {
                "name": f"{r.plural}/{sub.name}",
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": sorted(sub.verbs),
            }
            if sub.name == "scale" and isinstance(r, CustomResource):
                item = {**item, "group": "autoscaling", "version": "v1", "kind": "Scale"}
            items.append(item)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": items}


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("demo animation stopped: %s", task.exception(), exc_info=task.exception())

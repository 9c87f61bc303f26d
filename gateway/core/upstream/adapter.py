"""The one I/O seam: every upstream call goes through :class:`KubeAdapter`.

Request building (:func:`build_request`) and line splitting (:class:`LineSplitter`) are
pure (bodies are decoded by :mod:`gateway.core.lists.large`); only ``_send`` and the two
stream methods await.  Every call takes the caller's :class:`Credential` and uses it
upstream, so the apiserver's RBAC decides what the caller may do.  "Watch rule N" refers
to ``docs/watch-semantics.md``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple, TypeVar

import httpx
import orjson

from gateway.core import errors
from gateway.core.lists.body import Undecoded
from gateway.core.lists.compacting import sections
from gateway.core.lists.jobs import Job
from gateway.core.lists.large import LargeLists
from gateway.core.lists.pool import FEED_FROM, FEED_FROM_GZIPPED, Feed, ListWorkers
from gateway.core.model.options import (
    DeleteOptions,
    ListOptions,
    LogOptions,
    PatchOptions,
    PatchType,
    Query,
    WriteOptions,
)
from gateway.core.model.registry import REGISTRY, Registry, Resource, Verb
from gateway.core.model.values import JSON
from gateway.core.process import tracing
from gateway.core.process.metrics import Metrics
from gateway.core.support import deepjson
from gateway.core.upstream.budget import Budget, scope_of
from gateway.core.upstream.client import UpstreamClient
from gateway.core.upstream.config import ConfigError
from gateway.core.upstream.credentials import ANONYMOUS, Credential, refused_without_credential
from gateway.core.upstream.identity import FORWARDING, OWN_REQUEST, TOKEN_REVIEW_PATH, Identity
from gateway.core.upstream.lean import READ_WHOLE

log = logging.getLogger(__name__)
T = TypeVar("T")

Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]

#: Margin added to ``timeoutSeconds`` (or the bookmark interval) before a silent watch
#: counts as half-open.
WATCH_IDLE_MARGIN = 30.0
#: How often the apiserver sends progress bookmarks to a watch that asked for them.
BOOKMARK_INTERVAL = 60.0
#: The most of a pod log read at once (without follow) the gateway holds.
MAX_LOG_BYTES = 16 * 1024 * 1024
#: The most objects one list without ``limit`` returns (beyond: a clear error).
MAX_LIST_ITEMS = 10_000


@dataclass(frozen=True, slots=True)
class Request:
    """A fully built upstream request (pure data; nothing is sent yet)."""

    method: Method
    path: str
    params: Query
    content: bytes | None = None
    content_type: str | None = None
    accept: str = "application/json"
    #: For metrics: the verb and the registry key of what the request is about.
    verb: str = ""
    resource: str = ""
    #: The gateway's own request (a TokenReview), sent as the gateway itself on a client
    #: whose callers are impersonated (:data:`~gateway.core.upstream.identity.OWN_REQUEST`).
    own: bool = False


#: Where :meth:`KubeAdapter._request` keeps a list body read for a list worker
#: (``Response.extensions``): a :class:`_Read`.
_READ = "kube_gateway.list_body"


#: A list's pages as :meth:`KubeAdapter.list_compact` gives them: a list worker's answer
#: (``bytes``), or a page decoded here.
CompactPages = list[bytes | JSON]


class _Read(NamedTuple):
    """A list body read for a list worker (:func:`read_body`)."""

    data: bytes
    #: ``data`` is the body as the upstream gzipped it.
    gzipped: bool
    #: The worker it was fed to as it arrived, if any.
    feed: Feed | None


def read_body(response: httpx.Response) -> _Read:
    """The body of ``response``: as the upstream gzipped it, when it was read so, and the
    list worker it was fed to, if any (:meth:`KubeAdapter._request`)."""
    read: _Read | None = response.extensions.get(_READ)
    return _Read(response.content, False, None) if read is None else read


async def _read_for_workers(
    response: httpx.Response, workers: ListWorkers | None, *, gzipped: bool, job: Job | None = None
) -> _Read:
    """The body of ``response`` (``gzipped``: as it came), fed to a list worker as it arrives
    (:class:`~gateway.core.lists.pool.Feed`) when it is long enough to be a list for one
    (from its first piece where ``Content-Length`` says so; else once that much has come),
    and one is free (``job``: the job to come on it, when known).

    Whatever ends the read before its end (the upstream breaks off, the caller goes) ends
    the worker's part too; the error is the read's, as without a worker."""
    least = FEED_FROM_GZIPPED if gzipped else FEED_FROM
    may_feed = workers is not None and workers.enabled
    length = response.headers.get("content-length")
    if may_feed and length is not None and length.isdigit():
        # said long: fed from its first piece (a worker taken, or started, meanwhile);
        # said short: read whole, as before
        may_feed, least = int(length) >= least, 0
    # An answer read whole already (the lean transport's small one without a content
    # encoding, whose bytes are the raw ones) is taken as it is, unless it is for a worker.
    whole = response.is_stream_consumed and not gzipped
    if whole and not (may_feed and len(response.content) >= least):
        return _Read(response.content, False, None)
    pieces: list[bytes] = []
    size = 0
    feed: Feed | None = None
    try:
        async for piece in response.aiter_bytes() if whole else response.aiter_raw():
            pieces.append(piece)
            size += len(piece)
            if feed is not None:
                await feed.send(piece)
            elif may_feed and size >= least:
                may_feed = False
                assert workers is not None
                feed = await workers.feed(gzipped, job)
                if feed is not None:
                    await feed.send(b"".join(pieces))
        if feed is not None:
            feed.end()
    except BaseException:
        if feed is not None:
            feed.abandon()
        raise
    return _Read(pieces[0] if len(pieces) == 1 else b"".join(pieces), gzipped, feed)


#: The HTTP method of each verb.
_METHODS: dict[str, Method] = {
    "get": "GET",
    "list": "GET",
    "watch": "GET",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}


def build_request(
    resource: Resource,
    verb: Verb,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
    params: Query | None = None,
    body: Any = None,
    content_type: str = "application/json",
) -> Request:
    """Check the verb against the registry and build the request for it.

    Raises:
        MethodNotSupported: the resource (or subresource) does not serve ``verb``.
        InvalidParameter: the namespace does not fit the resource's scope.
    """
    resource.check(verb, subresource)
    if resource.namespaced:
        if namespace is None and verb not in ("list", "watch"):
            raise errors.InvalidParameter(
                f"{resource.kind} is namespaced: a namespace is required for {verb}",
                causes=(errors.Cause("FieldValueRequired", "Required value", "namespace"),),
            )
    elif namespace is not None:
        raise errors.InvalidParameter(
            f"{resource.kind} is cluster-scoped: namespace must not be set",
            causes=(errors.Cause("FieldValueForbidden", "Forbidden: cluster-scoped", "namespace"),),
        )
    try:
        path = resource.path(namespace, name, subresource)
    except ValueError as exc:
        raise errors.InvalidParameter(str(exc)) from None
    method = _METHODS[verb]
    content: bytes | None
    if body is None:
        content = None
    elif isinstance(body, bytes):
        content = body
    elif isinstance(body, str):
        content = body.encode()
    else:
        content = orjson.dumps(body)
    accept = "text/plain, */*" if subresource == "log" else "application/json"
    return Request(
        method,
        path,
        params or [],
        content,
        content_type if content is not None else None,
        accept,
        verb,
        resource.key,
    )


#: Where a caller asks the apiserver what it may do (SelfSubjectAccessReview).
ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"

#: Who the cluster takes the caller for (authentication.k8s.io/v1, GA since 1.28).
SELF_SUBJECT_REVIEW = Request(
    "POST",
    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
    [],
    b'{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}',
    "application/json",
    verb="create",
    resource="selfsubjectreviews.authentication.k8s.io",
)
#: The API groups, readable by authenticated users only (the fallback of the review).
DISCOVERY_PROBE = Request("GET", "/apis", [], verb="get", resource="apis")


def build_token_review(token: str, audiences: tuple[str, ...] = ()) -> Request:
    """The gateway's own TokenReview of ``token`` (for ``audiences``; none: the
    apiserver's own), the token only in its body."""
    spec: dict[str, Any] = {"token": token}
    if audiences:
        spec["audiences"] = list(audiences)
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
    return Request(
        "POST",
        TOKEN_REVIEW_PATH,
        [],
        orjson.dumps(body),
        "application/json",
        verb="create",
        resource="tokenreviews",
        own=True,
    )


def build_access_review(resource: Resource, verb: Verb, namespace: str | None) -> Request:
    """A SelfSubjectAccessReview asking whether the caller may ``verb`` the resource in
    ``namespace`` (``None``: in every namespace, or cluster-scoped)."""
    attributes = {
        "group": resource.group,
        "resource": resource.plural,
        "verb": verb,
        "namespace": namespace or "",
    }
    return _access_review({"resourceAttributes": attributes})


def build_path_review(path: str, verb: str) -> Request:
    """A SelfSubjectAccessReview asking whether the caller may ``verb`` the non-resource
    URL ``path`` (``/metrics``: what Kubernetes components ask of their scrapers)."""
    return _access_review({"nonResourceAttributes": {"path": path, "verb": verb}})


def _access_review(spec: dict[str, Any]) -> Request:
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": spec,
    }
    return Request(
        "POST",
        ACCESS_REVIEW_PATH,
        [],
        orjson.dumps(body),
        "application/json",
        verb="create",
        resource="selfsubjectaccessreviews.authorization.k8s.io",
    )


class LineSplitter:
    """Frames a byte stream into whole lines (watch rule 20).

    No line-length cap (objects can be megabytes); a partial line is kept until its
    newline arrives, and one left over at close is dropped by the caller.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        if b"\n" not in chunk:
            self._buf += chunk
            return []
        self._buf += chunk
        *lines, rest = self._buf.split(b"\n")
        self._buf = bytearray(rest)
        return [bytes(line) for line in lines if line.strip()]

    @property
    def pending(self) -> bytes:
        return bytes(self._buf)


def _with_defaults(resource: Resource, body: Any, namespace: str | None) -> Any:
    """Fill ``apiVersion``, ``kind`` and ``metadata.namespace`` when a caller left them out."""
    if not isinstance(body, dict):
        return body
    out = dict(body)
    out.setdefault("apiVersion", resource.api_version)
    out.setdefault("kind", resource.kind)
    if resource.namespaced and namespace is not None:
        meta = out.get("metadata")
        meta = dict(meta) if isinstance(meta, dict) else {}
        meta.setdefault("namespace", namespace)
        out["metadata"] = meta
    return out


class KubeAdapter:
    """Async access to the upstream API server for the resources of one registry.

    Args:
        http: the one shared client (owned by the application lifespan, not by us).
        registry: resources served; unknown resources are refused before any I/O.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        registry: Registry = REGISTRY,
        *,
        stream_http: httpx.AsyncClient | None = None,
        watch_idle_margin: float = WATCH_IDLE_MARGIN,
        bookmark_interval: float = BOOKMARK_INTERVAL,
        streams: Budget | None = None,
        requests: Budget | None = None,
        max_log_bytes: int = MAX_LOG_BYTES,
        max_list_items: int = MAX_LIST_ITEMS,
        metrics: Metrics | None = None,
        large_lists: LargeLists | None = None,
        identity: Identity = FORWARDING,
    ) -> None:
        self.http = http
        #: How callers are identified on this cluster (``--identity``): the strategy the
        #: composition root made :attr:`http` with; the front ends ask it who a caller is.
        self.identity = identity
        #: Decodes every body; a large list's GC hold and sliced work are counted here
        #: (shared by the adapters of one gateway, so that their holds count together).
        self.large_lists = large_lists if large_lists is not None else LargeLists()
        #: Unary requests one identity may have in flight at once (past it: refused at once
        #: with ResourceExhausted, so one caller's burst never fills the pool for everyone).
        self.requests = requests if requests is not None else Budget("requests", 1 << 30, 64)
        #: The most of a log read (not followed) that is held in memory.
        self.max_log_bytes = max_log_bytes
        #: The most objects a list without ``limit`` may return (0: no cap).
        self.max_list_items = max_list_items
        #: The upstream-stream budget: each shared watch and each log follow holds one.
        self.streams = streams if streams is not None else Budget("upstream streams", 512, 512)
        #: Watches and log follows use their own client (own connection pool), so open
        #: streams never starve requests; the lifespan sizes it to the stream budget.
        self.stream_http = stream_http if stream_http is not None else http
        self.registry = registry
        #: A watch silent for ``timeoutSeconds`` plus this is taken as half-open.
        self.watch_idle_margin = watch_idle_margin
        #: The apiserver sends a progress bookmark about this often on a watch that asked
        #: for them, so one silent for this plus the margin is taken as dead.
        self.bookmark_interval = bookmark_interval
        #: Upstream request latencies (and, through the front ends, operations) land here.
        self.metrics = metrics if metrics is not None else Metrics()

    def resource(self, resource: Resource | str) -> Resource:
        return resource if isinstance(resource, Resource) else self.registry.lookup(resource)

    # -- transport ---------------------------------------------------------------------

    def _httpx_request(
        self,
        req: Request,
        credential: Credential,
        timeout: float | None,
        http: httpx.AsyncClient | None = None,
    ) -> httpx.Request:
        """The httpx request of ``req``: what ``http.build_request`` builds (the client's
        base URL, default headers and timeout), with the URL parsed once instead of three
        times and without the client's cookie jar (the gateway sends no cookies: a jar
        shared by every caller would carry one caller's cookie into another's request)."""
        http = http or self.http
        if isinstance(http, UpstreamClient):  # the same request, built for less
            factory = http.requests
            raw = [(b"Accept", req.accept.encode("ascii"))]
            credentials = credential.headers()
            if isinstance(credentials, dict):
                raw += [(k.encode("ascii"), v.encode("ascii")) for k, v in credentials.items()]
            else:
                raw += credentials
            if req.content_type:
                raw.append((b"Content-Type", req.content_type.encode("ascii")))
            return factory.request(
                req.method,
                factory.url(req.path, req.params),
                raw,
                content=req.content,
                timeout=timeout,
                extensions={OWN_REQUEST: True} if req.own else None,
            )
        url = str(http.base_url).rstrip("/") + req.path
        if req.params:
            url = f"{url}?{httpx.QueryParams(tuple(req.params))}"
        headers = httpx.Headers(http.headers)
        headers["Accept"] = req.accept
        headers.update(credential.headers())
        if req.content_type:
            headers["Content-Type"] = req.content_type
        limit = httpx.Timeout(timeout) if timeout is not None else http.timeout
        extensions: dict[str, Any] = {"timeout": limit.as_dict()}
        if req.own:
            extensions[OWN_REQUEST] = True
        return httpx.Request(
            req.method, url, content=req.content, headers=headers, extensions=extensions
        )

    @staticmethod
    async def _request(
        http: httpx.AsyncClient,
        request: httpx.Request,
        stream: bool,
        gzipped: bool = False,
        workers: ListWorkers | None = None,
        *,
        job: Job | None = None,
    ) -> httpx.Response:
        """Send ``request``: a unary one straight to the transport of a client that would
        add nothing to it (:attr:`UpstreamClient.direct`), else through the client.

        ``gzipped``: a successful answer the upstream gzipped is read as it came, not
        inflated, and a long one, gzipped or not, fed to one of ``workers`` as it arrives
        (see :func:`read_body`; ``job``: the list job to come on it, when known)."""
        direct = http.direct if isinstance(http, UpstreamClient) and not stream else None
        if direct is None or http.is_closed:  # closed: the client says so, as before
            if not gzipped:
                return await http.send(request, stream=stream)
            response = await http.send(request, stream=True)
        else:
            request.extensions[READ_WHOLE] = True  # (read below, whole or as raw bytes)
            response = await direct.handle_async_request(request)
            response.request = request
        try:
            if (
                gzipped
                and response.status_code < 400
                and (coding := response.headers.get("content-encoding"))
                in (None, "gzip", "identity")
            ):
                response.extensions[_READ] = await _read_for_workers(
                    response, workers, gzipped=coding == "gzip", job=job
                )
            elif isinstance(response.stream, httpx.ByteStream):
                response.read()  # whole already (the lean transport's small answer)
            else:
                await response.aread()  # the whole body; the connection goes back to the pool
        except BaseException:
            await response.aclose()
            raise
        return response

    async def _send(
        self,
        req: Request,
        credential: Credential,
        *,
        timeout: float | None = None,
        stream: bool = False,
        gzipped: bool = False,
        job: Job | None = None,
    ) -> httpx.Response:
        http = self.stream_http if stream else self.http
        # Streams hold a lease of their own budget for their whole life (hub, log follow).
        lease = None if stream else self.requests.acquire(scope_of(credential))
        try:
            return await self._send_once(
                req, credential, http, timeout=timeout, stream=stream, gzipped=gzipped, job=job
            )
        finally:
            if lease is not None:
                lease.release()

    async def _send_once(
        self,
        req: Request,
        credential: Credential,
        http: httpx.AsyncClient,
        *,
        timeout: float | None,
        stream: bool,
        gzipped: bool = False,
        job: Job | None = None,
    ) -> httpx.Response:
        span = tracing.upstream(req.method, req.verb, req.resource)
        request = self._httpx_request(req, credential, timeout, http)
        workers = self.large_lists.workers if gzipped else None
        started = time.perf_counter()
        code: int | None = None
        try:
            with span:
                span.inject(request.headers)
                try:
                    response = await self._request(http, request, stream, gzipped, workers, job=job)
                except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                    # A pooled connection the server closed (GOAWAY, idle close) fails the
                    # request on it; reads are safe to send once more on a fresh connection.
                    if req.method != "GET":
                        raise
                    log.debug("retrying a GET after %s", type(exc).__name__)
                    request = self._httpx_request(req, credential, timeout, http)
                    span.inject(request.headers)
                    response = await self._request(http, request, stream, gzipped, workers, job=job)
                code = response.status_code
                span.answered(code)
        except httpx.TimeoutException as exc:
            raise errors.Timeout(f"upstream timed out: {type(exc).__name__}") from exc
        except httpx.HTTPError as exc:
            raise errors.Unavailable(f"upstream unreachable: {type(exc).__name__}") from exc
        except ConfigError as exc:  # the gateway's own credential could not be refreshed
            raise errors.Unavailable("the gateway's upstream credential is unavailable") from exc
        finally:
            self.metrics.upstream(req.verb, req.resource, code, time.perf_counter() - started)
        if response.status_code >= 400:
            try:
                body = response.content if not stream else await response.aread()
            except httpx.HTTPError as exc:
                raise errors.Unavailable(
                    f"upstream connection broke: {type(exc).__name__}"
                ) from exc
            finally:
                if stream:
                    await response.aclose()
            error = errors.from_response(response.status_code, body, response.headers)
            # No caller token and no gateway identity on this client: nothing was sent.
            if credential.token is None and http.auth is None:
                error = refused_without_credential(error)
            raise error
        return response

    async def _json(
        self, req: Request, credential: Credential, timeout: float | None = None
    ) -> JSON:
        response = await self._send(req, credential, timeout=timeout)
        return await self.object_of(response.content)

    async def object_of(self, data: bytes) -> JSON:
        """An answer's body decoded (:meth:`LargeLists.decode
        <gateway.core.lists.large.LargeLists.decode>`).

        Raises:
            Internal: the body is not a JSON object.
        """
        decoded = await self.large_lists.decode(data)
        if not isinstance(decoded, dict):
            raise errors.Internal("the upstream sent JSON that is not an object")
        return decoded

    # -- reads ---------------------------------------------------------------------------

    async def get(
        self,
        resource: Resource | str,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        credential: Credential = ANONYMOUS,
        timeout: float | None = None,
    ) -> JSON:
        """Read one object (or its ``status`` / ``ephemeralcontainers`` subresource)."""
        data = await self.get_body(
            resource,
            name,
            namespace=namespace,
            subresource=subresource,
            credential=credential,
            timeout=timeout,
        )
        return await self.object_of(data)

    async def get_body(
        self,
        resource: Resource | str,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        credential: Credential = ANONYMOUS,
        timeout: float | None = None,
    ) -> bytes:
        """:meth:`get`'s answer as the upstream sent it, not decoded (:meth:`object_of`
        decodes it): the gRPC front end writes a small one from its bytes."""
        res = self.resource(resource)
        req = build_request(res, "get", namespace=namespace, name=name, subresource=subresource)
        response = await self._send(req, credential, timeout=timeout)
        return response.content

    async def list(
        self,
        resource: Resource | str,
        *,
        namespace: str | None = None,
        options: ListOptions = ListOptions(),
        credential: Credential = ANONYMOUS,
        timeout: float | None = None,
    ) -> JSON:
        """One page of a list, decoded (:meth:`list_body`, then
        :meth:`LargeLists.decoded <gateway.core.lists.large.LargeLists.decoded>`: a large
        one in slices); ``namespace=None`` lists across all namespaces.

        Raises:
            RequestEntityTooLarge: without ``limit``, more than :attr:`max_list_items`
                objects match.
        """
        body = await self.list_body(
            resource, namespace=namespace, options=options, credential=credential, timeout=timeout
        )
        return await self.large_lists.decoded(body, linger=False)

    async def list_body(
        self,
        resource: Resource | str,
        *,
        namespace: str | None = None,
        options: ListOptions = ListOptions(),
        credential: Credential = ANONYMOUS,
        timeout: float | None = None,
        gzipped: bool = False,
        job: Job | None = None,
    ) -> Undecoded:
        """One page of a list as the upstream sent it, not decoded: the large-list scope
        decodes it, or hands it to a list worker (:mod:`gateway.core.lists.large`).
        ``gzipped``: a body the upstream gzipped (the apiserver does, for a large one) is
        kept as it came, for a worker to inflate rather than this process; ``job``: the
        worker's job to come on it, when known (a worker fed the body as it arrives does a
        compact job on it as it comes, the gateway taking its parts in meanwhile).

        Without a ``limit``, at most :attr:`max_list_items` objects are held: the upstream is
        asked for one more than that, and the body carries the cap (``Undecoded.cap``), so
        that a list that does not fit is refused with a clear error pointing to ``limit`` and
        ``continue``, whoever decodes it, rather than buffered whole.
        """
        res = self.resource(resource)
        options.validate(watch=False)
        cap = self.max_list_items
        capped = not options.limit and cap > 0
        if capped:
            options = replace(options, limit=cap + 1)
        req = build_request(res, "list", namespace=namespace, params=options.to_query())
        # (a job named only where no cap applies: a fed compact job's parts are said as
        # they are made, before the worker knows whether the list is over the cap)
        response = await self._send(
            req, credential, timeout=timeout, gzipped=gzipped, job=None if capped else job
        )
        read = read_body(response)
        return Undecoded(
            read.data,
            gzipped=read.gzipped,
            cap=cap if capped else 0,
            plural=res.plural,
            feed=read.feed,
        )

    async def list_all(
        self,
        resource: Resource | str,
        *,
        namespace: str | None = None,
        options: ListOptions = ListOptions(),
        credential: Credential = ANONYMOUS,
        timeout: float | None = None,
        keep: Callable[[JSON], JSON] | None = None,
    ) -> JSON:
        """A complete, consistent list: follows ``continue`` until it is empty (watch rule 2-3).

        The ``metadata.resourceVersion`` of the result is the first page's, the point a
        following watch starts from.  A 410 on a later page restarts the whole list once;
        the "inconsistent continue" token is never used.  ``keep``: what to keep of each
        item, applied page by page (with ``options.limit``, a list of large objects such as
        CRDs never holds more than one page of them whole).
        """
        return await _restarted_once_on_gone(
            lambda: self._list_pages(resource, namespace, options, credential, timeout, keep=keep)
        )

    async def list_compact(
        self,
        resource: Resource | str,
        *,
        namespace: str | None = None,
        options: ListOptions = ListOptions(),
        credential: Credential = ANONYMOUS,
        job: Job,
    ) -> tuple[JSON, CompactPages]:
        """A complete, consistent list (as :meth:`list_all`), each page made compact by a
        list worker (``job``: :func:`gateway.core.lists.compacting.compact`): the list
        without its items (the first page's ``resourceVersion``), and each page as the
        worker's answer (``bytes``) or, where no worker did it, decoded here."""
        return await _restarted_once_on_gone(
            lambda: self._compact_pages(resource, namespace, options, credential, job)
        )

    async def _compact_pages(
        self,
        resource: Resource | str,
        namespace: str | None,
        options: ListOptions,
        credential: Credential,
        job: Job,
    ) -> tuple[JSON, CompactPages]:
        if not options.limit and self.max_list_items > 0:
            options = replace(options, limit=self.max_list_items)
        lists = self.large_lists
        pages: CompactPages = []
        first: JSON | None = None
        page_options = options
        while True:
            body = await self.list_body(
                resource,
                namespace=namespace,
                options=page_options,
                credential=credential,
                gzipped=lists.compacts,
                job=job,
            )
            done = await lists.compacted(body, job)
            if done is None:
                page: JSON = await lists.decoded(body, linger=False)
                head = page
                pages.append(page)
            else:
                head = orjson.loads(sections(done)[0])
                pages.append(done)
            del body
            if first is None:
                first = {k: v for k, v in head.items() if k != "items"}
            token = (head.get("metadata") or {}).get("continue")
            if not token:
                break
            page_options = ListOptions(
                label_selector=options.label_selector,
                field_selector=options.field_selector,
                limit=options.limit,
                continue_=token,
                timeout_seconds=options.timeout_seconds,
            )
        assert first is not None
        meta = first.get("metadata") or {}
        first["metadata"] = {
            k: v for k, v in meta.items() if k not in ("continue", "remainingItemCount")
        }
        return first, pages

    async def _list_pages(
        self,
        resource: Resource | str,
        namespace: str | None,
        options: ListOptions,
        credential: Credential,
        timeout: float | None,
        *,
        keep: Callable[[JSON], JSON] | None,
    ) -> JSON:
        if not options.limit and self.max_list_items > 0:
            # pages of the list cap: one request for what fits, never the cap's refusal
            options = replace(options, limit=self.max_list_items)
        first = await self.list(
            resource, namespace=namespace, options=options, credential=credential, timeout=timeout
        )
        items: list[Any] = list(first.get("items") or [])
        if keep is not None:
            items = [keep(i) for i in items]
            first = {**first, "items": []}
        meta = first.get("metadata") or {}
        token = meta.get("continue")
        while token:
            page_options = ListOptions(
                label_selector=options.label_selector,
                field_selector=options.field_selector,
                limit=options.limit,
                continue_=token,
                timeout_seconds=options.timeout_seconds,
            )
            page = await self.list(
                resource,
                namespace=namespace,
                options=page_options,
                credential=credential,
                timeout=timeout,
            )
            got = page.get("items") or []
            items.extend(map(keep, got) if keep is not None else got)
            token = (page.get("metadata") or {}).get("continue")
        result = dict(first)
        result["items"] = items
        result["metadata"] = {
            k: v for k, v in meta.items() if k not in ("continue", "remainingItemCount")
        }
        return result

    # -- writes ----------------------------------------------------------------------------

    async def create(
        self,
        resource: Resource | str,
        body: JSON,
        *,
        namespace: str | None = None,
        write: WriteOptions = WriteOptions(),
        credential: Credential = ANONYMOUS,
        timeout: float | None = None,
    ) -> JSON:
        """Create an object (``POST``)."""
        return await self._write(
            resource,
            "create",
            body,
            namespace=namespace,
            write=write,
            credential=credential,
            timeout=timeout,
        )

    async def replace(
        self,
        resource: Resource | str,
        name: str,
        body: JSON,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        write: WriteOptions = WriteOptions(),
        credential: Credential = ANONYMOUS,
        timeout: float | None = None,
    ) -> JSON:
        """Replace an object or a subresource (``PUT``); ``metadata.resourceVersion`` guards it."""
        return await self._write(
            resource,
            "update",
            body,
            namespace=namespace,
            name=name,
            subresource=subresource,
            write=write,
            credential=credential,
            timeout=timeout,
        )

    async def _write(
        self,
        resource: Resource | str,
        verb: Literal["create", "update"],
        body: JSON,
        *,
        namespace: str | None,
        name: str | None = None,
        subresource: str | None = None,
        write: WriteOptions,
        credential: Credential,
        timeout: float | None,
    ) -> JSON:
        """Send a whole object (create or update), its kind and namespace filled in."""
        res = self.resource(resource)
        write.validate()
        req = build_request(
            res,
            verb,
            namespace=namespace,
            name=name,
            subresource=subresource,
            params=write.to_query(),
            body=_with_defaults(res, body, namespace),
        )
        return await self._json(req, credential, timeout)

    async def patch(
        self,
        resource: Resource | str,
        name: str,
        patch: Any,
        *,
        patch_options: PatchOptions,
        namespace: str | None = None,
        subresource: str | None = None,
        write: WriteOptions = WriteOptions(),
        credential: Credential = ANONYMOUS,
        timeout: float | None = None,
    ) -> JSON:
        """Patch an object or a subresource with any of the four patch types.

        ``patch`` is a dict/list (sent as JSON; JSON is YAML, so apply patches accept it
        too), or a ``str``/``bytes`` body sent as is (YAML for apply).
        """
        res = self.resource(resource)
        write.validate()
        patch_options.validate(write)
        if patch_options.type is PatchType.JSON and isinstance(patch, dict):
            raise errors.InvalidParameter(
                "a JSON patch is a list of operations, not an object",
                causes=(errors.Cause("FieldValueInvalid", "must be a list", "patch"),),
            )
        req = build_request(
            res,
            "patch",
            namespace=namespace,
            name=name,
            subresource=subresource,
            params=write.to_query() + patch_options.to_query(),
            body=patch,
            content_type=patch_options.type.value,
        )
        return await self._json(req, credential, timeout)

    async def delete(
        self,
        resource: Resource | str,
        name: str,
        *,
        namespace: str | None = None,
        options: DeleteOptions = DeleteOptions(),
        credential: Credential = ANONYMOUS,
        timeout: float | None = None,
    ) -> JSON:
        """Delete one object; returns what the apiserver returns (the object or a Status)."""
        res = self.resource(resource)
        options.validate()
        req = build_request(
            res,
            "delete",
            namespace=namespace,
            name=name,
            params=options.to_query(),
            body=options.body(),
        )
        return await self._json(req, credential, timeout)

    async def access_review(
        self,
        resource: Resource | str,
        verb: Verb,
        *,
        namespace: str | None = None,
        credential: Credential = ANONYMOUS,
        timeout: float | None = 10.0,
    ) -> bool:
        """Whether the caller may ``verb`` the resource in ``namespace``, as the upstream's
        authorizer answers a SelfSubjectAccessReview made with the caller's credential.

        Raises:
            GatewayError: the review itself failed (401 for a rejected token...).
        """
        res = self.resource(resource)
        answer = await self._json(build_access_review(res, verb, namespace), credential, timeout)
        status = answer.get("status")
        return isinstance(status, dict) and status.get("allowed") is True

    async def path_review(
        self,
        path: str,
        verb: str = "get",
        *,
        credential: Credential = ANONYMOUS,
        timeout: float | None = 10.0,
    ) -> bool:
        """Whether the caller may ``verb`` the non-resource URL ``path``, as the upstream's
        authorizer answers a SelfSubjectAccessReview made with the caller's credential.

        Raises:
            GatewayError: the review itself failed (401 for a rejected token...).
        """
        answer = await self._json(build_path_review(path, verb), credential, timeout)
        status = answer.get("status")
        return isinstance(status, dict) and status.get("allowed") is True

    async def delete_collection(
        self,
        resource: Resource | str,
        *,
        namespace: str | None = None,
        list_options: ListOptions = ListOptions(),
        options: DeleteOptions = DeleteOptions(),
        credential: Credential = ANONYMOUS,
        timeout: float | None = None,
    ) -> JSON:
        """Delete every object matching the selectors (``limit``/``continue`` page it)."""
        res = self.resource(resource)
        list_options.validate(watch=False)
        options.validate()
        req = build_request(
            res,
            "deletecollection",
            namespace=namespace,
            params=list_options.to_query() + options.to_query(),
            body=options.body(),
        )
        return await self._json(req, credential, timeout)

    # -- pod log -------------------------------------------------------------------------

    def _log_request(self, name: str, namespace: str, options: LogOptions) -> Request:
        options.validate()
        return build_request(
            self.registry.lookup("pods"),
            "get",
            namespace=namespace,
            name=name,
            subresource="log",
            params=options.to_query(),
        )

    async def read_log(
        self,
        name: str,
        *,
        namespace: str,
        options: LogOptions = LogOptions(),
        credential: Credential = ANONYMOUS,
        timeout: float | None = None,
    ) -> bytes:
        """The pod log as bytes (not necessarily UTF-8; never parsed as JSON)."""
        if options.follow:
            raise errors.InvalidParameter(
                "use stream_log to follow a log",
                causes=(errors.Cause("FieldValueForbidden", "Forbidden", "follow"),),
            )
        cap = self.max_log_bytes
        asked = options.limit_bytes
        # Ask for one byte past the cap: more than that is refused, not buffered.
        capped = replace(options, limit_bytes=cap + 1 if asked is None else min(asked, cap + 1))
        response = await self._send(
            self._log_request(name, namespace, capped), credential, timeout=timeout
        )
        if len(response.content) > cap and (asked is None or asked > cap):
            raise errors.RequestEntityTooLarge(
                f"the log is larger than {cap} bytes: ask for less (limitBytes, tailLines, "
                "sinceSeconds) or follow it"
            )
        return response.content

    @asynccontextmanager
    async def stream_log(
        self,
        name: str,
        *,
        namespace: str,
        options: LogOptions = LogOptions(),
        credential: Credential = ANONYMOUS,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """Open a log stream; errors (400 container choices...) raise before any data.

        Usage::

            opts = LogOptions(follow=True)
            async with adapter.stream_log("p", namespace="ns", options=opts) as chunks:
                async for chunk in chunks: ...

        Chunks are raw bytes as the kubelet flushed them (they may split lines and
        characters); the upstream connection is closed when the block exits.
        """
        req = self._log_request(name, namespace, options)
        response = await self._send(req, credential, stream=True)
        try:
            yield _chunks(response)
        finally:
            await response.aclose()

    # -- watch ---------------------------------------------------------------------------

    @asynccontextmanager
    async def watch_stream(
        self,
        resource: Resource | str,
        *,
        namespace: str | None = None,
        options: ListOptions = ListOptions(),
        credential: Credential = ANONYMOUS,
    ) -> AsyncIterator[AsyncIterator[JSON]]:
        """One upstream watch connection, as decoded ``{type, object}`` events.

        This is the raw, single-connection watch: it ends when the server ends the
        stream.  :class:`gateway.core.watch.watcher.Watcher` adds resume, bookmarks and relist.

        Raises:
            GatewayError: for an HTTP error before the stream starts.
        """
        res = self.resource(resource)
        options.validate(watch=True)
        req = build_request(res, "watch", namespace=namespace, params=options.to_query(watch=True))
        response = await self._send(req, credential, stream=True)
        idle = options.timeout_seconds + self.watch_idle_margin if options.timeout_seconds else None
        if options.allow_watch_bookmarks:
            # Bookmarks arrive about every interval even on a quiet watch: silence for
            # longer means a black-holed connection, noticed in about 90 s, not minutes.
            by_bookmark = self.bookmark_interval + self.watch_idle_margin
            idle = by_bookmark if idle is None else min(idle, by_bookmark)
        try:
            yield _events(response, idle)
        finally:
            await response.aclose()

    # -- who the caller is (which clusters a caller may see: gateway.core.fleet.visibility) ----

    async def review_self(
        self, *, credential: Credential = ANONYMOUS, timeout: float | None = 10.0
    ) -> JSON:
        """The cluster's SelfSubjectReview of the caller (who it takes the credential for),
        sent the way every call of the caller goes.

        Raises:
            GatewayError: 401 (the cluster does not know the caller), 403 (anonymous
                refused), 404 (a cluster older than 1.28, without the API)...
        """
        return await self._json(SELF_SUBJECT_REVIEW, credential, timeout)

    async def review_token(
        self, token: str, *, audiences: tuple[str, ...] = (), timeout: float | None = 10.0
    ) -> Mapping[str, Any]:
        """The cluster's TokenReview of ``token`` (impersonate mode's home cluster: who a
        caller is), sent as the gateway itself: the token only in the body, outside the
        callers' request budgets (the budget of new callers' reviews bounds these).

        Returns:
            The review's ``status`` (``{}`` when the answer holds none).

        Raises:
            GatewayError: the cluster answered with an error (``status_code``: its HTTP
                status), or, with the transport's error as its ``__cause__``, could not
                be reached (or the gateway's credential there refreshed).
        """
        req = build_token_review(token, audiences)
        response = await self._send_once(req, ANONYMOUS, self.http, timeout=timeout, stream=False)
        if response.status_code not in (200, 201):  # a redirect is not an answer
            raise errors.from_response(response.status_code, b"", response.headers)
        try:
            status = orjson.loads(response.content).get("status") or {}
        except (orjson.JSONDecodeError, AttributeError):
            status = {}
        return status if isinstance(status, Mapping) else {}

    async def read_discovery(
        self, *, credential: Credential = ANONYMOUS, timeout: float | None = 10.0
    ) -> None:
        """Read the cluster's ``/apis`` as the caller: granted to authenticated users only
        (``system:discovery``), so it says whether a cluster without SelfSubjectReview
        knows the caller.

        Raises:
            GatewayError: 401, 403... as the cluster answers.
        """
        await self._send(DISCOVERY_PROBE, credential, timeout=timeout)


async def _chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.aiter_bytes():
            if chunk:
                yield chunk
    except httpx.HTTPError as exc:
        raise errors.Unavailable(f"upstream stream broke: {type(exc).__name__}") from exc


async def _events(response: httpx.Response, idle: float | None) -> AsyncIterator[JSON]:
    splitter = LineSplitter()
    chunks = response.aiter_bytes().__aiter__()
    while True:
        try:
            async with asyncio.timeout(idle):
                chunk = await anext(chunks)
        except StopAsyncIteration:
            return  # a partial last line at close is a normal close (watch rule 20)
        except TimeoutError:
            raise errors.Unavailable("watch stream idle past its deadline") from None
        except httpx.HTTPError as exc:
            raise errors.Unavailable(f"watch stream broke: {type(exc).__name__}") from exc
        for line in splitter.feed(chunk):
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                if not deepjson.too_deep(exc):
                    raise errors.Unavailable("watch stream sent a malformed line") from None
                # an object nested past orjson's limit (the apiserver stores them 10,000
                # deep) is an event like any other, decoded here a step at a time
                event = await deepjson.aloads(line)
            if isinstance(event, dict):
                yield event


def status_of(mapping: Mapping[str, Any]) -> errors.GatewayError:
    """An ``ERROR`` watch event's Status as an error (parsed defensively, watch rule 13)."""
    obj = mapping.get("object")
    status = obj if isinstance(obj, dict) else {}
    code = status.get("code")
    return errors.from_status(status, http_status=code if isinstance(code, int) else 500)


async def _restarted_once_on_gone(pages: Callable[[], Awaitable[T]]) -> T:
    """``pages()``, a paged list, made again once if a later page's ``continue`` token
    expired (410): the "inconsistent continue" token is never used (watch rule 2-3)."""
    try:
        return await pages()
    except errors.Gone:
        log.info("continue token expired during a paged list; restarting the list")
    return await pages()

"""The verbs of a resource request: get, list, watch, create, update, patch, delete,
deletecollection and the pod log, with the apiserver's option parsing and validation."""

from __future__ import annotations

import calendar
import random
import time
import unicodedata
from dataclasses import dataclass
from typing import Final

import orjson

from gateway.core.model.registry import Resource
from kube_gateway_demo import apiextensions, streams
from kube_gateway_demo import fielderrors as fe
from kube_gateway_demo.decoding import PATCH_CONTENT_TYPES, decode_body, decode_patch
from kube_gateway_demo.faults import Faults
from kube_gateway_demo.http import Request, Responder
from kube_gateway_demo.jsonutil import load_json
from kube_gateway_demo.options import DemoDeleteOptions, DemoWriteOptions, WriteResult
from kube_gateway_demo.patching import json_patch, merge_patch
from kube_gateway_demo.reads import read_rv
from kube_gateway_demo.status import (
    DemoApiError,
    bad_request,
    gone,
    invalid,
    options_invalid,
    route_unsupported_media_type,
    too_large_resource_version,
    unsupported_media_type,
)
from kube_gateway_demo.storage import Obj
from kube_gateway_demo.store import Store

BODY_TYPES: Final = ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
_MIN_REQUEST_TIMEOUT: Final = 1800


@dataclass(frozen=True, slots=True)
class Target:
    """What a resource URL names."""

    res: Resource
    namespace: str | None
    name: str | None
    subresource: str | None
    watch_path: bool


@dataclass(frozen=True, slots=True)
class DemoListOptions:
    """The decoded ``ListOptions`` query parameters."""

    watch: bool
    resource_version: str
    resource_version_match: str
    limit: int
    continue_token: str
    label_selector: str
    field_selector: str
    send_initial_events: bool | None
    allow_bookmarks: bool
    timeout: int | None

    @classmethod
    def parse(cls, req: Request, *, force_watch: bool = False) -> DemoListOptions:
        return cls(
            watch=force_watch or bool(req.flag("watch")),
            resource_version=req.param("resourceVersion") or "",
            resource_version_match=req.param("resourceVersionMatch") or "",
            limit=req.integer("limit") or 0,
            continue_token=req.param("continue") or "",
            label_selector=req.param("labelSelector") or "",
            field_selector=req.param("fieldSelector") or "",
            send_initial_events=req.flag("sendInitialEvents"),
            allow_bookmarks=bool(req.flag("allowWatchBookmarks")),
            timeout=req.integer("timeoutSeconds"),
        )

    def validate(self, *, watch_list_enabled: bool) -> None:
        """``ValidateListOptions`` (422 ``ListOptions.meta.k8s.io "" is invalid``)."""
        errs: list[fe.FieldError] = []
        match = self.resource_version_match
        if self.watch:
            if self.send_initial_events is not None:
                if match != "NotOlderThan":
                    errs.append(
                        fe.forbidden(
                            "resourceVersionMatch",
                            "sendInitialEvents requires setting "
                            "resourceVersionMatch to NotOlderThan",
                        )
                    )
                if not watch_list_enabled:
                    errs.append(
                        fe.forbidden(
                            "sendInitialEvents",
                            "sendInitialEvents is forbidden for watch unless the "
                            "WatchList feature gate is enabled",
                        )
                    )
            if match:
                if self.send_initial_events is None:
                    errs.append(
                        fe.forbidden(
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden for watch unless "
                            "sendInitialEvents is provided",
                        )
                    )
                if match != "NotOlderThan":
                    errs.append(fe.not_supported("resourceVersionMatch", match, ("NotOlderThan",)))
                if self.continue_token:
                    errs.append(
                        fe.forbidden(
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden when continue is provided",
                        )
                    )
        else:
            if match:
                if not self.resource_version:
                    errs.append(
                        fe.forbidden(
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden unless resourceVersion is provided",
                        )
                    )
                if self.continue_token:
                    errs.append(
                        fe.forbidden(
                            "resourceVersionMatch",
                            "resourceVersionMatch is forbidden when continue is provided",
                        )
                    )
                if match not in ("Exact", "NotOlderThan"):
                    errs.append(
                        fe.not_supported(
                            "resourceVersionMatch", match, ("Exact", "NotOlderThan", "")
                        )
                    )
                if match == "Exact" and self.resource_version == "0":
                    errs.append(
                        fe.forbidden(
                            "resourceVersionMatch",
                            'resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                        )
                    )
            if self.send_initial_events is not None:
                errs.append(
                    fe.forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list")
                )
        if errs:
            raise options_invalid("ListOptions", errs)


def _manager_from_user_agent(user_agent: str) -> str:
    # prefixFromUserAgent: the part before the first '/', printable runes, at most 128 bytes.
    out = ""
    for ch in user_agent.split("/", 1)[0]:
        if not ch.isprintable() or unicodedata.category(ch).startswith("C"):
            continue
        if len((out + ch).encode()) > 128:
            break
        out += ch
    return out


def _write_options(req: Request, kind: str, *, patch_type: str | None = None) -> DemoWriteOptions:
    """Decode and validate ``dryRun``, ``fieldManager``, ``fieldValidation`` (and ``force``)."""
    errs: list[fe.FieldError] = []
    dry_run = req.params("dryRun")
    manager = req.param("fieldManager") or ""
    validation = req.param("fieldValidation") or ""
    force = req.flag("force")
    if patch_type is not None:
        if patch_type != "apply":
            if force is not None:
                errs.append(fe.forbidden("force", "may not be specified for non-apply patch"))
        elif not manager:
            errs.append(fe.required("fieldManager", "is required for apply patch"))
    if len(manager) > 128:
        errs.append(fe.too_long("fieldManager", 128))
    for i, ch in enumerate(manager):
        if not ch.isprintable():
            errs.append(
                fe.invalid(
                    "fieldManager", manager, f"invalid character U+{ord(ch):04X} (at position {i})"
                )
            )
    if any(v != "All" for v in dry_run):
        errs.append(fe.not_supported("dryRun", dry_run, ("All",)))
    if validation not in ("", "Ignore", "Warn", "Strict"):
        errs.append(
            fe.not_supported("fieldValidation", validation, ("", "Ignore", "Strict", "Warn"))
        )
    if errs:
        raise options_invalid(kind, errs)
    return DemoWriteOptions(
        dry_run=bool(dry_run),
        field_manager=manager or _manager_from_user_agent(req.headers.get("user-agent", "")),
        field_validation=validation or "Warn",
        force=bool(force),
    )


def _parse_time(value: str) -> float:
    """``metav1.Time`` from a query parameter: RFC 3339, truncated to seconds."""
    text = value.strip()
    try:
        if text.endswith(("Z", "z")):
            base = text[:-1]
            offset = 0
        else:
            base, sign, tz = text[:-6], text[-6], text[-5:]
            if sign not in "+-" or tz[2] != ":":
                raise ValueError(text)
            offset = (int(tz[:2]) * 3600 + int(tz[3:]) * 60) * (1 if sign == "+" else -1)
        base = base.split(".", 1)[0]
        parsed = time.strptime(base, "%Y-%m-%dT%H:%M:%S")
    except (ValueError, IndexError):
        raise bad_request(
            f'parsing time {fe.go_quote(value)} as "2006-01-02T15:04:05Z07:00": cannot parse '
            f'{fe.go_quote(value)} as "2006"'
        ) from None
    return float(calendar.timegm(parsed) - offset)


class ResourceHandlers:
    """The resource verbs, bound to one store, fault board and configuration."""

    def __init__(
        self,
        store: Store,
        faults: Faults,
        *,
        bookmark_interval: float,
        max_body_bytes: int,
    ) -> None:
        self.store = store
        self.faults = faults
        self.bookmark_interval = bookmark_interval
        self.max_body_bytes = max_body_bytes

    # --- reads -------------------------------------------------------------------------------

    async def get(self, req: Request, resp: Responder, t: Target) -> None:
        assert t.name is not None
        obj = self.store.reads.get(t.res, t.name, namespace=t.namespace)
        await resp.json(200, obj)

    async def _wait_for_rv(self, rv: str) -> None:
        wanted = read_rv(rv)
        storage = self.store.storage
        if (
            wanted is not None
            and wanted > storage.rv
            and not await storage.wait_for_rv(wanted, self.store.too_large_wait)
        ):
            raise too_large_resource_version(wanted, storage.rv)

    async def list(self, req: Request, resp: Responder, t: Target) -> None:
        opts = DemoListOptions.parse(req)
        query = self.store.list_query(t.res, t.namespace, opts.label_selector, opts.field_selector)
        opts.validate(watch_list_enabled=not self.faults.initial_events_rejected)
        if not opts.continue_token:
            await self._wait_for_rv(opts.resource_version)
        result = self.store.reads.list(
            t.res,
            query,
            resource_version=opts.resource_version,
            resource_version_match=opts.resource_version_match,
            limit=max(0, opts.limit),
            continue_token=opts.continue_token,
        )
        await resp.send_list(200, result)

    async def watch(self, req: Request, resp: Responder, t: Target) -> None:
        opts = DemoListOptions.parse(req, force_watch=True)
        field_selector = opts.field_selector
        if t.name is not None:
            name_term = f"metadata.name={t.name}"
            field_selector = f"{name_term},{field_selector}" if field_selector else name_term
        query = self.store.list_query(t.res, t.namespace, opts.label_selector, field_selector)
        opts.validate(watch_list_enabled=not self.faults.initial_events_rejected)
        expire = self.faults.take_expire()
        if expire is not None:
            err = gone(
                f"too old resource version: {opts.resource_version or 0} ({self.store.storage.rv})"
            )
            if expire == "http":
                await resp.error(err)
            else:
                await streams.serve_error_event(resp, err.to_status())
            return
        if opts.send_initial_events:
            await self._wait_for_rv(opts.resource_version)
        try:
            watcher = self.store.watches.open(
                t.res,
                query,
                resource_version=opts.resource_version,
                send_initial_events=opts.send_initial_events,
                allow_bookmarks=opts.allow_bookmarks,
            )
        except DemoApiError as err:
            if err.code != 410:
                raise
            # Once a watch is accepted, the apiserver reports expiry as an ERROR event.
            await streams.serve_error_event(resp, err.to_status())
            return
        timeout = opts.timeout
        if timeout is None or timeout <= 0:
            timeout = int(_MIN_REQUEST_TIMEOUT * (random.random() + 1.0))
        await streams.serve_watch(
            resp,
            req.receive,
            self.store.storage,
            t.res,
            watcher,
            timeout=float(timeout),
            bookmarks=opts.allow_bookmarks,
            bookmark_interval=self.bookmark_interval,
            make_bookmark=lambda rv: self.store.watches.bookmark(t.res, rv),
            cut=self.faults.watch_cut,
            warnings=resp.warnings,
        )

    # --- writes ------------------------------------------------------------------------------

    async def _body(self, req: Request) -> bytes:
        return await req.body(self.max_body_bytes)

    def _check_body_type(self, req: Request) -> str:
        ctype = req.content_type or "application/json"
        if ctype not in ("application/json", "application/yaml"):
            raise unsupported_media_type(ctype, BODY_TYPES)
        return ctype

    async def _respond(self, resp: Responder, t: Target, result: WriteResult) -> None:
        await resp.json(result.code, result.body, warnings=result.warnings)

    async def _write_input(
        self, req: Request, t: Target, options_kind: str
    ) -> tuple[Obj, DemoWriteOptions]:
        """The decoded body and the write options of a create or an update."""
        ctype = self._check_body_type(req)
        body = await self._body(req)
        opts = _write_options(req, options_kind)
        return decode_body(t.res, self.store.strategy(t.res), body, ctype), opts

    async def create(self, req: Request, resp: Responder, t: Target) -> None:
        decoded, opts = await self._write_input(req, t, "CreateOptions")
        result = self.store.writes.create(
            t.res,
            decoded,
            namespace=t.namespace,
            opts=opts,
        )
        await self._respond(resp, t, result)

    async def update(self, req: Request, resp: Responder, t: Target) -> None:
        assert t.name is not None
        decoded, opts = await self._write_input(req, t, "UpdateOptions")
        result = self.store.writes.update(
            t.res,
            t.name,
            decoded,
            namespace=t.namespace,
            opts=opts,
            subresource=t.subresource,
        )
        await self._respond(resp, t, result)

    async def scale(self, req: Request, resp: Responder, t: Target) -> None:
        """The ``scale`` subresource of a custom resource (an ``autoscaling/v1`` Scale over
        the CRD's replicas paths): get, update, and a JSON or merge patch."""
        assert t.name is not None
        strat = self.store.strategy(t.res)
        current = self.store.reads.get(t.res, t.name, namespace=t.namespace)
        if req.method == "GET":
            await resp.json(200, apiextensions.scale_of(t.res, strat, current))
            return
        if req.method == "PUT":
            self._check_body_type(req)
            try:
                wanted = load_json(await self._body(req))
            except ValueError as exc:
                raise bad_request(str(exc)) from None
            opts = _write_options(req, "UpdateOptions")
        else:
            patch_type = PATCH_CONTENT_TYPES.get(req.content_type)
            if patch_type not in ("json", "merge"):
                raise route_unsupported_media_type()
            patch = decode_patch(await self._body(req), patch_type)
            base = apiextensions.scale_of(t.res, strat, current)
            wanted = json_patch(base, patch) if patch_type == "json" else merge_patch(base, patch)
            opts = _write_options(req, "PatchOptions", patch_type=patch_type)
        updated = apiextensions.scaled(t.res, strat, current, wanted)
        result = self.store.writes.update(
            t.res,
            t.name,
            updated,
            namespace=t.namespace,
            opts=opts,
            subresource="scale",
            origin="internal",
        )
        await resp.json(200, apiextensions.scale_of(t.res, strat, result.body))

    async def patch(self, req: Request, resp: Responder, t: Target) -> None:
        assert t.name is not None
        patch_type = PATCH_CONTENT_TYPES.get(req.content_type)
        if patch_type is None:
            raise route_unsupported_media_type()
        body = await self._body(req)
        opts = _write_options(req, "PatchOptions", patch_type=patch_type)
        result = self.store.writes.patch(
            t.res,
            t.name,
            patch_type,
            body,
            namespace=t.namespace,
            opts=opts,
            subresource=t.subresource,
        )
        await self._respond(resp, t, result)

    async def _delete_options(self, req: Request, kind: str) -> DemoDeleteOptions:
        body = await self._body(req)
        grace = req.integer("gracePeriodSeconds")
        policy = req.param("propagationPolicy")
        orphan = req.flag("orphanDependents")
        dry_run = req.params("dryRun")
        uid: str | None = None
        rv: str | None = None
        if body.strip():
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise bad_request(
                    f"the request body could not be decoded as DeleteOptions: {exc}"
                ) from None
            if not isinstance(data, dict):
                raise bad_request("json: cannot unmarshal into Go value of type v1.DeleteOptions")
            if data.get("gracePeriodSeconds") is not None:
                grace = int(data["gracePeriodSeconds"])
            if data.get("propagationPolicy") is not None:
                policy = str(data["propagationPolicy"])
            if data.get("orphanDependents") is not None:
                orphan = bool(data["orphanDependents"])
            if data.get("dryRun"):
                dry_run = [str(x) for x in data["dryRun"]]
            pre = data.get("preconditions") or {}
            if isinstance(pre, dict):
                uid = pre.get("uid")
                rv = pre.get("resourceVersion")
        if any(v != "All" for v in dry_run):
            raise options_invalid(kind, [fe.not_supported("dryRun", dry_run, ("All",))])
        return DemoDeleteOptions(
            grace_period_seconds=grace,
            propagation_policy=policy,
            orphan_dependents=orphan,
            uid=uid,
            resource_version=rv,
            dry_run=bool(dry_run),
        )

    async def delete(self, req: Request, resp: Responder, t: Target) -> None:
        assert t.name is not None
        opts = await self._delete_options(req, "DeleteOptions")
        result = self.store.deletion.delete(t.res, t.name, namespace=t.namespace, opts=opts)
        await self._respond(resp, t, result)

    async def delete_collection(self, req: Request, resp: Responder, t: Target) -> None:
        list_opts = DemoListOptions.parse(req)
        query = self.store.list_query(
            t.res, t.namespace, list_opts.label_selector, list_opts.field_selector
        )
        list_opts.validate(watch_list_enabled=True)
        opts = await self._delete_options(req, "DeleteOptions")
        result = self.store.deletion.delete_collection(t.res, query, opts)
        await resp.json(200, result)

    # --- pod log -----------------------------------------------------------------------------

    async def log(self, req: Request, resp: Responder, t: Target) -> None:
        assert t.name is not None
        container = req.param("container") or ""
        follow = bool(req.flag("follow"))
        previous = bool(req.flag("previous"))
        timestamps = bool(req.flag("timestamps"))
        req.flag("insecureSkipTLSVerifyBackend")
        tail = req.integer("tailLines")
        limit_bytes = req.integer("limitBytes")
        since_seconds = req.integer("sinceSeconds")
        since_time_raw = req.param("sinceTime")
        since_time = _parse_time(since_time_raw) if since_time_raw else None
        errs: list[fe.FieldError] = []
        if tail is not None and tail < 0:
            errs.append(fe.invalid("tailLines", tail, "must be greater than or equal to 0"))
        if limit_bytes is not None and limit_bytes < 1:
            errs.append(fe.invalid("limitBytes", limit_bytes, "must be greater than 0"))
        if since_seconds is not None and since_time is not None:
            # field.NewPath("") prints as "[]"
            errs.append(
                fe.forbidden("[]", "at most one of `sinceTime` or `sinceSeconds` may be specified")
            )
        elif since_seconds is not None and since_seconds < 1:
            errs.append(fe.invalid("sinceSeconds", since_seconds, "must be greater than 0"))
        if errs:
            raise invalid("PodLogOptions", "", t.name, errs)
        pod = self.store.reads.get(t.res, t.name, namespace=t.namespace)
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        containers = spec.get("containers") or []
        all_names = [
            c.get("name")
            for group in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(group) or []
            if isinstance(c, dict)
        ]
        if not container:
            if len(containers) == 1:
                container = containers[0].get("name", "")
            elif not containers:
                raise bad_request(f"a container name must be specified for pod {t.name}")
            else:
                raise bad_request(
                    f"a container name must be specified for pod {t.name}, choose "
                    f"one of: [{' '.join(str(n) for n in all_names)}]"
                )
        elif container not in all_names:
            raise bad_request(f"container {container} is not valid for pod {t.name}")
        if not spec.get("nodeName"):
            # An unscheduled pod has no kubelet to ask: the apiserver answers 204, no body.
            await resp.start(204, [])
            await resp.finish()
            return
        log = self.store.kubelet.container_log(pod, container)
        if previous:
            if log.previous is None:
                raise bad_request(
                    f'previous terminated container "{container}" in pod "{t.name}" not found'
                )
            lines = list(log.previous)
            follow_log = None
        else:
            for group in (
                "initContainerStatuses",
                "containerStatuses",
                "ephemeralContainerStatuses",
            ):
                for cs in status.get(group) or []:
                    waiting = (
                        (cs.get("state") or {}).get("waiting") if isinstance(cs, dict) else None
                    )
                    if cs.get("name") == container and waiting is not None:
                        raise bad_request(
                            f'container "{container}" in pod "{t.name}" is waiting '
                            f"to start: {waiting.get('reason') or 'ContainerCreating'}"
                        )
            lines = list(log.lines)
            follow_log = log
        since_ts: float | None = None
        if since_seconds is not None:
            since_ts = self.store.clock() - since_seconds
        elif since_time is not None:
            since_ts = since_time
        if since_ts is not None:
            lines = [ln for ln in lines if ln.ts >= since_ts]
        if tail is not None:
            lines = lines[len(lines) - tail :] if tail else []
        await streams.serve_log(
            resp,
            req.receive,
            self.store.logs,
            follow_log,
            lines,
            follow=follow and not previous,
            timestamps=timestamps,
            limit_bytes=limit_bytes,
            since_ts=since_ts,
        )

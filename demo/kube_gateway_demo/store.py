"""The demo cluster's state with apiserver semantics: create, update, patch, apply, delete,
list and watch, as the HTTP layer serves them and as tests drive them in-process.

Every write, whichever way it arrives, goes through the same steps as in a real apiserver
(decode, default, prepare, validate, admit, track managed fields, commit), so an in-process
``await store.update(...)`` produces exactly the watch events an HTTP PUT would.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import orjson
import yaml

from gateway.core.registry import POD, Registry, Resource
from kube_gateway_demo import definitions as schema
from kube_gateway_demo import fielderrors as fe
from kube_gateway_demo import fieldmanager, listing, patching, structure
from kube_gateway_demo.catalog import CRD, DEMO_REGISTRY, NAMESPACE, crd_of
from kube_gateway_demo.jsonutil import clone, json_type, load_json, load_yaml
from kube_gateway_demo.logs import ContainerLog, LogStore
from kube_gateway_demo.options import DemoDeleteOptions, DemoWriteOptions, ListQuery, WriteResult
from kube_gateway_demo.status import (
    OPTIMISTIC_LOCK,
    DemoApiError,
    already_exists,
    bad_request,
    conflict,
    gone,
    internal,
    invalid,
    not_found,
    success,
    too_large_resource_version,
    unsupported_media_type,
)
from kube_gateway_demo.storage import (
    INITIAL_EVENTS_END,
    Change,
    DemoWatcher,
    Obj,
    Pending,
    Storage,
    object_key,
    typed,
)
from kube_gateway_demo.strategy import Strategy, strategy_for
from kube_gateway_demo.times import parse_rfc3339, rfc3339

PatchType = Literal["json", "merge", "strategic", "apply"]

PATCH_CONTENT_TYPES: Final[dict[str, PatchType]] = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}

SYSTEM_NAMESPACES: Final = ("default", "kube-system", "kube-public", "kube-node-lease")
NS_MISMATCH: Final = (
    "the namespace of the provided object does not match the namespace sent on the request"
)
_NAME_CHARS: Final = "bcdfghjklmnpqrstvwxz2456789"

_META_ORDER: Final = (
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
)


def _generate_name(prefix: str) -> str:
    return prefix + "".join(random.choice(_NAME_CHARS) for _ in range(5))


def _gvk(res: Resource) -> str:
    return f"{res.group}/{res.version}, Kind={res.kind}"


class Store:
    """The state of the demo cluster, with the apiserver's write and read semantics.

    These synchronous methods are what the HTTP layer calls; :class:`DemoStore` adds the
    async in-process API on top.

    Args:
        registry: the served resources.
        schema_types: the schema definition of a resource's objects, by registry key, where
            it is not the one :func:`gateway.core.schema.kind_type` finds for its kind.
        history: how many changes per resource are kept for watch resumption and
            consistent pagination (older resourceVersions answer 410).
        clock: the wall clock (seconds), for timestamps.
    """

    def __init__(
        self,
        registry: Registry = DEMO_REGISTRY,
        *,
        schema_types: Mapping[str, str] | None = None,
        history: int = 1000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry
        self.resources: tuple[Resource, ...] = tuple(registry.values())
        types = dict(schema_types or {})
        self.strategies: dict[str, Strategy] = {
            r.key: strategy_for(
                r, types.get(r.key) or schema.kind_type(r.group, r.version, r.kind).name
            )
            for r in self.resources
        }
        self.storage = Storage(self.resources, history=history)
        self.logs = LogStore()
        self.clock = clock
        self.too_large_wait = 3.0
        """Seconds a read at a future resourceVersion waits before answering 504."""
        self.namespaces: set[str] = set()
        """The namespaces that exist (objects may only be created in one of them); when
        Namespaces are served, the names of the Namespace objects."""
        for ns in SYSTEM_NAMESPACES:
            self.add_namespace(ns)
        if self.registry.get(CRD.key) == CRD:
            # a served custom resource exists because its definition does
            for res in self.resources:
                crd = crd_of(res)
                if crd is not None:
                    self.create_object(
                        CRD,
                        clone(crd),
                        namespace=None,
                        opts=DemoWriteOptions(field_manager="kubectl-client-side-apply"),
                        origin="internal",
                    )

    @property
    def serves_namespaces(self) -> bool:
        """Whether Namespaces are a served resource (else they are just names)."""
        return self.registry.get(NAMESPACE.key) == NAMESPACE

    def add_namespace(self, name: str) -> None:
        """Make the namespace exist (as a Namespace object, when those are served)."""
        if name in self.namespaces:
            return
        if not self.serves_namespaces:
            self.namespaces.add(name)
            return
        self.create_object(
            NAMESPACE,
            {"metadata": {"name": name}},
            namespace=None,
            opts=DemoWriteOptions(field_manager="kube-apiserver"),
            origin="internal",
        )

    # --- lookups -----------------------------------------------------------------------------

    def resource(self, name: str | Resource) -> Resource:
        """Resolve a resource by registry key, plural, kind or short name."""
        if isinstance(name, Resource):
            return name
        return self.registry.lookup(name)

    @property
    def resource_version(self) -> str:
        """The current resourceVersion of the whole store."""
        return str(self.storage.rv)

    def now(self) -> str:
        """The current time as ``metav1.Time``."""
        return rfc3339(self.clock())

    def _strategy(self, res: Resource) -> Strategy:
        return self.strategies[res.key]

    def _key(self, res: Resource, namespace: str | None, name: str) -> str:
        return object_key(namespace or "" if res.namespaced else "", name)

    def namespace_exists(self, namespace: str) -> bool:
        """Whether the namespace exists."""
        return namespace in self.namespaces

    def list_query(
        self, res: Resource, namespace: str | None, label_selector: str, field_selector: str
    ) -> ListQuery:
        """The selectors of a list or watch of ``res``.

        Raises:
            DemoApiError: 400 for a bad selector.
        """
        labels = self._strategy(res).field_labels
        return ListQuery.parse(namespace, label_selector, field_selector, labels)

    # --- decoding ----------------------------------------------------------------------------

    def decode_body(self, res: Resource, raw: bytes, content_type: str) -> Obj:
        """Decode a create/update body (JSON or YAML).

        Raises:
            DemoApiError: 400 for anything that is not an object.
        """
        prefix = (
            f"the object provided is unrecognized (must be of type {res.kind}): couldn't get "
            "version/kind; json parse error: "
        )
        try:
            value = load_yaml(raw) if "yaml" in content_type else load_json(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise bad_request(f"{prefix}{exc}") from None
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise bad_request(f"{prefix}json: cannot unmarshal {json_type(value)} into an object")
        if self._strategy(res).custom_resource:
            # the unstructured decoder needs both halves of the type meta
            if not value.get("kind"):
                raise bad_request(
                    f"the object provided is unrecognized (must be of type {res.kind}): Object "
                    f"'Kind' is missing in '{raw.decode('utf-8', 'replace')}'"
                )
            if value.get("apiVersion") != res.api_version:
                raise bad_request(
                    f"the API version in the data ({value.get('apiVersion') or ''}) does "
                    f"not match the expected API version ({res.api_version})"
                )
        return value

    def _typed_decode(
        self,
        res: Resource,
        obj: Obj,
        opts: DemoWriteOptions,
        origin: str,
        *,
        patch: Any = None,
    ) -> tuple[Obj, list[str]]:
        """Decode into the Go type: drop unknown fields, fail on wrong JSON types."""
        obj = clone(obj)
        if origin == "body":
            _check_type_meta(res, obj)
        result = structure.decode(self._strategy(res).type_name, obj)
        strict = [f"unknown field {fe.go_quote(u)}" for u in result.unknown]
        strict_msg = "strict decoding error: " + ", ".join(strict) if strict else ""
        if self._strategy(res).custom_resource:
            # no Go struct: wrong types are the schema validation's to report (422)
            result.type_error = None
        if origin == "body":
            version = fe.go_quote(res.version)
            prefix = f"{res.kind} in version {version} cannot be handled as a {res.kind}: "
            if result.type_error:
                raise bad_request(prefix + result.type_error)
            if strict_msg and opts.field_validation == "Strict":
                raise bad_request(prefix + strict_msg)
        elif origin in ("json", "merge", "strategic"):
            value: Any = fe.go_map(patch) if origin == "strategic" else orjson.dumps(patch).decode()
            if result.type_error:
                raise invalid("", "", "", [fe.invalid("patch", value, result.type_error)])
            if strict_msg and opts.field_validation == "Strict":
                raise invalid("", "", "", [fe.invalid("patch", value, strict_msg)])
        warnings = strict if opts.field_validation == "Warn" else []
        if not isinstance(obj.get("metadata", {}), dict):
            raise bad_request("metadata must be an object")
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        return obj, warnings

    # --- create ------------------------------------------------------------------------------

    def create_object(
        self,
        res: Resource,
        obj: Obj,
        *,
        namespace: str | None,
        opts: DemoWriteOptions,
        origin: str = "body",
        managed: bool = False,
        keep_status: bool = False,
    ) -> WriteResult:
        """POST: create ``obj`` in ``namespace``.

        ``managed=True`` means the managed fields were already computed (server-side apply);
        ``keep_status=True`` (in-process seeding only) keeps the given status.
        """
        strat = self._strategy(res)
        warnings: list[str] = []
        if origin == "body":
            obj, warnings = self._typed_decode(res, obj, opts, origin)
        elif origin != "owned":
            obj = clone(obj)
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
        meta = obj.setdefault("metadata", {})
        _set_namespace(res, meta, namespace)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = _generate_name(str(meta["generateName"]))
        client_rv = meta.pop("resourceVersion", None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.now()
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(key, None)
        if not managed:
            meta.pop("managedFields", None)
        status = obj.get("status")
        strat.default(obj)
        if not managed:
            # The field manager sees the decoded (defaulted) object, before the strategy and
            # admission add their own fields.
            meta["managedFields"] = []
            fieldmanager.track_update(
                None,
                obj,
                opts.field_manager,
                subresource="",
                api_version=res.api_version,
                now=meta["creationTimestamp"],
                keep=strat.tracked(None),
                type_name=strat.type_name,
            )
        strat.prepare_for_create(obj)
        if keep_status and isinstance(status, dict):
            obj["status"] = status
        name = str(meta.get("name") or "")
        errs = strat.validate(obj)
        if errs:
            raise invalid(res.kind, res.group, name, errs)
        if res.namespaced and not self.namespace_exists(namespace or ""):
            raise not_found("namespaces", "", namespace or "")
        if client_rv:
            raise internal("resourceVersion should not be set on objects to be created", reason="")
        key = self._key(res, namespace, name)
        if self.storage.get(res, key) is not None:
            raise already_exists(res.plural, res.group, name)
        strat.canonicalize(obj)
        self._reorder(res, obj, stored=not opts.dry_run)
        if opts.dry_run:
            return WriteResult(typed(res, obj), 201, warnings)
        change = self.storage.commit(res, key, "ADDED", obj)
        self._after_commit(change)
        return WriteResult(typed(res, change.obj), 201, warnings)

    def _reorder(self, res: Resource, obj: Obj, *, stored: bool) -> None:
        # Go serialises struct fields in declaration order: metadata first, then spec/status,
        # and ObjectMeta's own fields in their order (resourceVersion right after uid);
        # custom resources are maps, serialised with sorted keys.
        meta = obj.get("metadata", {})
        if stored:
            meta.setdefault("resourceVersion", "")
        if self._strategy(res).custom_resource:
            obj["metadata"] = {k: meta[k] for k in sorted(meta)}
            return
        ordered = {k: meta[k] for k in _META_ORDER if k in meta}
        ordered.update((k, v) for k, v in meta.items() if k not in ordered)
        items = [("metadata", ordered), *((k, v) for k, v in obj.items() if k != "metadata")]
        obj.clear()
        obj.update(items)

    # --- update ------------------------------------------------------------------------------

    def update_object(
        self,
        res: Resource,
        name: str,
        obj: Obj,
        *,
        namespace: str | None,
        opts: DemoWriteOptions,
        subresource: str | None = None,
        origin: str = "body",
        managed: bool = False,
        patch: Any = None,
    ) -> WriteResult:
        """PUT (or the final step of a PATCH): replace the object, with optimistic locking."""
        strat = self._strategy(res)
        warnings: list[str] = []
        if origin in ("body", "json", "merge", "strategic"):
            obj, warnings = self._typed_decode(res, obj, opts, origin, patch=patch)
        else:
            obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        if str(meta.get("name") or "") != name:
            raise bad_request(
                f"the name of the object ({meta.get('name') or ''}) does not match the name on "
                f"the URL ({name})"
            )
        _set_namespace(res, meta, namespace)
        key = self._key(res, namespace, name)
        current = self.storage.get(res, key)
        if current is None:
            if subresource or not strat.allow_create_on_update:
                raise not_found(res.plural, res.group, name)
            meta.pop("resourceVersion", None)
            created = self.create_object(
                res, obj, namespace=namespace, opts=opts, origin="internal", managed=managed
            )
            created.warnings[:0] = warnings
            return created
        rv = str(meta.get("resourceVersion") or "")
        if not rv:
            if not strat.allow_unconditional_update:
                # keyed by the qualified resource, not the kind, in the generic store
                raise invalid(
                    res.plural,
                    res.group,
                    name,
                    [fe.invalid("metadata.resourceVersion", 0, "must be specified for an update")],
                )
        elif rv != current["metadata"]["resourceVersion"]:
            raise conflict(res.plural, res.group, name, OPTIMISTIC_LOCK)
        obj.pop("kind", None)
        obj.pop("apiVersion", None)
        new, old = obj, current
        nm, om = new["metadata"], old["metadata"]
        if "generation" in om:
            nm["generation"] = om["generation"]
        else:
            nm.pop("generation", None)
        if not managed and "managedFields" not in nm and "managedFields" in om:
            nm["managedFields"] = clone(om["managedFields"])
        strat.default(new)
        if not managed:
            fieldmanager.track_update(
                old,
                new,
                opts.field_manager,
                subresource=subresource or "",
                api_version=res.api_version,
                now=self.now(),
                keep=strat.tracked(subresource),
                type_name=strat.type_name,
            )
        strat.prepare_for_update(new, old, subresource)
        if not nm.get("uid"):
            nm["uid"] = om["uid"]
        nm["creationTimestamp"] = om["creationTimestamp"]
        for keep in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if keep in om:
                nm[keep] = om[keep]
            elif keep == "deletionTimestamp":
                nm.pop(keep, None)
        nm["resourceVersion"] = om["resourceVersion"]
        errs = strat.validate_update(new, old, subresource)
        if errs:
            raise invalid(res.kind, res.group, name, errs)
        strat.canonicalize(new)
        self._reorder(res, new, stored=True)
        if new == old:
            return WriteResult(typed(res, old), 200, warnings)
        if opts.dry_run:
            return WriteResult(typed(res, new), 200, warnings)
        change = self.storage.commit(res, key, "MODIFIED", new)
        self._after_commit(change)
        if nm.get("deletionTimestamp") and not nm.get("finalizers"):
            # The last finalizer is gone: the store deletes the object right away.
            deleted = self.storage.commit(res, key, "DELETED", None)
            self._after_commit(deleted)
            return WriteResult(typed(res, deleted.obj), 200, warnings)
        return WriteResult(typed(res, change.obj), 200, warnings)

    # --- patch -------------------------------------------------------------------------------

    def patch_object(
        self,
        res: Resource,
        name: str,
        patch_type: PatchType,
        body: bytes,
        *,
        namespace: str | None,
        opts: DemoWriteOptions,
        subresource: str | None = None,
    ) -> WriteResult:
        """PATCH with any of the four patch types (apply creates a missing object)."""
        if patch_type == "strategic" and self._strategy(res).custom_resource:
            raise unsupported_media_type(
                "application/strategic-merge-patch+json",
                (
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    "application/apply-patch+yaml",
                ),
            )
        key = self._key(res, namespace, name)
        current = self.storage.get(res, key)
        if patch_type == "apply":
            return self._apply(
                res, name, body, current, namespace=namespace, opts=opts, subresource=subresource
            )
        if current is None:
            raise not_found(res.plural, res.group, name)
        patch = _decode_patch(body, patch_type)
        doc = typed(res, clone(current))
        if patch_type == "json":
            result = patching.json_patch(doc, patch)
        elif patch_type == "merge":
            result = patching.merge_patch(doc, patch)
        else:
            result = patching.strategic_merge_patch(doc, patch, self._strategy(res).type_name)
        if not isinstance(result.get("metadata"), dict):
            result["metadata"] = {}
        return self.update_object(
            res,
            name,
            result,
            namespace=namespace,
            opts=opts,
            subresource=subresource,
            origin=patch_type,
            patch=patch,
        )

    def _apply(
        self,
        res: Resource,
        name: str,
        body: bytes,
        current: Obj | None,
        *,
        namespace: str | None,
        opts: DemoWriteOptions,
        subresource: str | None,
    ) -> WriteResult:
        try:
            config = load_yaml(body)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or str(exc)
            raise bad_request(
                f"error decoding YAML: error converting YAML to JSON: yaml: {problem}"
            ) from None
        if not isinstance(config, dict):
            raise bad_request(
                "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot "
                f"unmarshal {json_type(config)} into Go value of type "
                "map[string]interface {}"
            )
        version = config.get("apiVersion") or ""
        if version != res.api_version:
            raise bad_request(
                "Incorrect version specified in apply patch. Specified patch version: "
                f"{version}, expected: {res.api_version}"
            )
        if config.get("kind") != res.kind:
            raise bad_request(
                "Incorrect kind specified in apply patch. Specified patch kind: "
                f"{config.get('kind') or ''}, expected: {res.kind}"
            )
        meta = config.get("metadata")
        if meta is None:
            meta = config["metadata"] = {}
        if not isinstance(meta, dict):
            raise bad_request("error decoding patch: metadata must be an object")
        if meta.get("managedFields") is not None:
            raise bad_request("metadata.managedFields must be nil")
        if meta.get("name") and meta["name"] != name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({name})"
            )
        meta.setdefault("name", name)
        probe = clone(config)
        strat = self._strategy(res)
        result = structure.decode(strat.type_name, probe)
        if result.unknown or result.type_error:
            what = (
                f".{result.unknown[0]}: field not declared in schema"
                if result.unknown
                else structure.smd_type_error(result)
            )
            # structured-merge-diff's plain error: the apiserver answers it as a bare 500; it
            # names the object as the patch does (no namespace unless the patch has one)
            where = f"{meta.get('namespace') or ''}/{name}; {_gvk(res)}"
            raise internal(f"failed to create typed patch object ({where}): {what}", reason="")
        config = strat.reset_fields(config, subresource)
        merged = fieldmanager.apply(
            current,
            config,
            opts.field_manager,
            force=opts.force,
            subresource=subresource or "",
            api_version=res.api_version,
            now=self.now(),
            type_name=strat.type_name,
        )
        merged_meta = merged.setdefault("metadata", {})
        merged_meta["name"] = name
        if res.namespaced:
            merged_meta["namespace"] = namespace or ""
        if current is None:
            if subresource:
                raise not_found(res.plural, res.group, name)
            written = self.create_object(
                res, merged, namespace=namespace, opts=opts, origin="apply", managed=True
            )
        else:
            merged["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            written = self.update_object(
                res,
                name,
                merged,
                namespace=namespace,
                opts=opts,
                subresource=subresource,
                origin="apply",
                managed=True,
            )
        return written

    # --- delete ------------------------------------------------------------------------------

    def delete_object(
        self, res: Resource, name: str, *, namespace: str | None, opts: DemoDeleteOptions
    ) -> WriteResult:
        """DELETE: graceful for scheduled pods, blocked by finalizers, else immediate."""
        opts.validate()
        strat = self._strategy(res)
        key = self._key(res, namespace, name)
        current = self.storage.get(res, key)
        if current is None:
            raise not_found(res.plural, res.group, name)
        meta = current["metadata"]
        # NewConflict keyed by the qualified kind, as the store's precondition check words it
        for label, want, have, tail in (
            ("UID", opts.uid, meta.get("uid"), "deleted and then recreated"),
            ("ResourceVersion", opts.resource_version, meta.get("resourceVersion"), "modified"),
        ):
            if want is not None and want != have:
                raise conflict(
                    res.kind,
                    res.group,
                    name,
                    f"the {label} in the precondition ({want}) does not match the {label} in "
                    f"record ({have}). The object might have been {tail}",
                )
        grace = strat.grace_period(current, opts.grace_period_seconds)
        finalizers = meta.get("finalizers") or []
        code = 200
        if grace is not None or finalizers:
            # BeforeDelete / markAsDeleting: the object is first updated as being deleted.
            if meta.get("deletionTimestamp"):
                if finalizers:
                    return WriteResult(typed(res, current), code, [])
                marked = current  # a second delete of a terminating pod: finish it
            else:
                marked = clone(current)
                mm = marked["metadata"]
                mm["deletionTimestamp"] = rfc3339(self.clock() + (grace or 0))
                mm["deletionGracePeriodSeconds"] = grace or 0
                if int(mm.get("generation") or 0) > 0:
                    mm["generation"] = int(mm["generation"]) + 1
                self._reorder(res, marked, stored=True)
                if opts.dry_run:
                    return WriteResult(typed(res, marked), code, [])
                change = self.storage.commit(res, key, "MODIFIED", marked)
                self._after_commit(change)
                marked = change.obj
            if finalizers:
                code = 202 if opts.orphan_dependents is False else 200
                return WriteResult(typed(res, marked), code, [])
            # A pod with a grace period would wait for its kubelet; the demo's "kubelet"
            # stops the containers at once, so the pod is removed right away as well.
            deleted = self.storage.commit(res, key, "DELETED", None)
            self._after_commit(deleted)
            body = marked if grace else deleted.obj
            return WriteResult(typed(res, body), code, [])
        if opts.dry_run:
            final = current
        else:
            change = self.storage.commit(res, key, "DELETED", None)
            self._after_commit(change)
            final = change.obj
        if strat.return_deleted_object:
            return WriteResult(typed(res, final), 200, [])
        return WriteResult(success(name, res.group, res.plural, meta.get("uid", "")), 200, [])

    def delete_collection(self, res: Resource, query: ListQuery, opts: DemoDeleteOptions) -> Obj:
        """DELETE on a collection: delete what the selectors match, return them as a list."""
        opts.validate()
        listed = self.list_objects(res, query)
        for item in listed["items"]:
            meta = item["metadata"]
            try:
                self.delete_object(res, meta["name"], namespace=meta.get("namespace"), opts=opts)
            except DemoApiError as exc:
                if exc.code != 404:
                    raise
        return listed

    # --- reads -------------------------------------------------------------------------------

    def get_object(self, res: Resource, name: str, *, namespace: str | None) -> Obj:
        """GET one object (typed).

        Raises:
            DemoApiError: 404.
        """
        obj = self.storage.get(res, self._key(res, namespace, name))
        if obj is None:
            raise not_found(res.plural, res.group, name)
        return typed(res, obj)

    def check_read_rv(self, rv: str, *, watch: bool = False) -> int | None:
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

    def list_objects(
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
        col = self.storage.collection(res)
        prefix = f"{query.namespace}/" if res.namespaced and query.namespace else ""
        start = ""
        if continue_token:
            list_rv, relative = listing.decode_continue(continue_token)
            start = prefix + relative.lstrip("/")
            if resource_version and resource_version != "0":
                raise bad_request("specifying resource version is not allowed when using continue")
            if list_rv <= 0:
                list_rv = self.storage.rv
            try:
                state = self.storage.state_at(res, list_rv)
            except DemoApiError:
                raise gone(
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter, or use the "
                    "continue token in this response to retrieve the remainder of the results. "
                    "Continuing with the provided token results in an inconsistent list - objects "
                    "that were created, modified, or deleted between the time the first chunk "
                    "was returned and now may show up in the list.",
                    continue_token=listing.encode_continue(0, relative),
                ) from None
        else:
            wanted = self.check_read_rv(resource_version)
            if wanted is not None and wanted > self.storage.rv:
                raise too_large_resource_version(wanted, self.storage.rv)
            if resource_version_match == "Exact" and wanted is not None:
                list_rv = wanted
                state = self.storage.state_at(res, wanted)
            else:
                list_rv = self.storage.rv
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
            field_func=self._strategy(res).fields,
        )
        meta: Obj = {"resourceVersion": str(list_rv)}
        if pg.continue_token:
            meta["continue"] = pg.continue_token
        if pg.remaining is not None:
            meta["remainingItemCount"] = pg.remaining
        if self._strategy(res).custom_resource:
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

    def matcher(self, res: Resource, query: ListQuery) -> Callable[[Obj], bool]:
        """A predicate for objects ``query`` selects."""
        fields_of = self._strategy(res).fields
        ns = query.namespace if res.namespaced else None
        labels, fields = query.labels, query.fields

        def matches(obj: Obj) -> bool:
            meta = obj.get("metadata", {})
            if ns and meta.get("namespace") != ns:
                return False
            if not labels.empty and not labels.matches(meta.get("labels")):
                return False
            return fields.empty or fields.matches(fields_of(obj))

        return matches

    def open_watch(
        self,
        res: Resource,
        query: ListQuery,
        *,
        resource_version: str = "",
        send_initial_events: bool | None = None,
        allow_bookmarks: bool = False,
    ) -> DemoWatcher:
        """Start a watch; the returned watcher already holds its initial events.

        Raises:
            DemoApiError: 410 when ``resource_version`` is older than the history (the HTTP layer
                turns this into an ERROR event, as the apiserver does).
        """
        matches = self.matcher(res, query)
        col = self.storage.collection(res)
        initial = send_initial_events is True or (
            send_initial_events is None and resource_version in ("", "0")
        )
        if initial or resource_version in ("", "0"):
            start = self.storage.rv
            watcher = DemoWatcher(res, matches, start)
            if initial:
                for key in col.sorted_keys():
                    obj = col.objects[key]
                    if matches(obj):
                        watcher.pending.append(
                            Pending("ADDED", obj, int(obj["metadata"]["resourceVersion"]))
                        )
                if send_initial_events and allow_bookmarks:
                    watcher.pending.append(self.bookmark(res, start, initial_end=True))
        else:
            wanted = self.check_read_rv(resource_version, watch=True) or 0
            changes = self.storage.changes_since(res, wanted)
            watcher = DemoWatcher(res, matches, wanted)
            for change in changes:
                watcher.offer(change)
        self.storage.add_watcher(res, watcher)
        return watcher

    def bookmark(self, res: Resource, rv: int, *, initial_end: bool = False) -> Pending:
        """A BOOKMARK event: only kind, apiVersion, resourceVersion (and annotations)."""
        meta: Obj = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {INITIAL_EVENTS_END: "true"}
        strat = self._strategy(res)
        if strat.custom_resource:
            sorted_meta = {k: meta[k] for k in sorted(meta)}
            obj = {"apiVersion": res.api_version, "kind": res.kind, "metadata": sorted_meta}
        else:
            obj = {
                "kind": res.kind,
                "apiVersion": res.api_version,
                "metadata": meta,
                **strat.empty(),
            }
        return Pending("BOOKMARK", obj, rv)

    # --- hooks -------------------------------------------------------------------------------

    def _after_commit(self, change: Change) -> None:
        if change.res.key == POD.key:
            self._pod_hook(change)
        elif change.res.key == NAMESPACE.key:
            name = str(change.obj["metadata"]["name"])
            if change.type == "DELETED":
                self.namespaces.discard(name)
            else:
                self.namespaces.add(name)

    def _pod_hook(self, change: Change) -> None:
        meta = change.obj["metadata"]
        uid = meta.get("uid", "")
        if change.type == "DELETED":
            self.logs.forget(uid)
            return
        for name in _terminated(change.obj):
            self.logs.end(uid, name)

    def container_log(self, pod: Obj, container: str) -> ContainerLog:
        """The log of ``container`` in ``pod``, started (lazily) with its first lines."""
        meta = pod["metadata"]
        uid = str(meta["uid"])
        log = self.logs.get(uid, container)
        if log is not None:
            return log
        from kube_gateway_demo.sample import initial_log_lines

        log = self.logs.container(uid, container)
        spec = pod.get("spec") or {}
        created = meta.get("creationTimestamp") or rfc3339(self.clock())
        base = parse_rfc3339(created)
        for group in ("initContainers", "containers"):
            for c in spec.get(group) or []:
                if isinstance(c, dict) and c.get("name") == container:
                    lines = initial_log_lines(str(meta.get("name", "")), c)
                    for i, line in enumerate(lines):
                        self.logs.append(uid, container, [line], base + i * 0.001)
        if container in _terminated(pod):
            log.ended = True
        return log

    def close(self) -> None:
        """End every watch and log follow (server shutdown)."""
        self.storage.close()
        self.logs.close()


def _set_namespace(res: Resource, meta: Obj, namespace: str | None) -> None:
    """Put the request's namespace in a written object's metadata (400 when the object names
    another one); a cluster-scoped object carries none."""
    if res.namespaced:
        ns = meta.get("namespace") or ""
        if ns and ns != namespace:
            raise bad_request(NS_MISMATCH)
        meta["namespace"] = namespace or ""
    else:
        meta.pop("namespace", None)


def _check_type_meta(res: Resource, obj: Obj) -> None:
    """The decoder's verdict on a body's ``apiVersion``/``kind``."""
    kind = str(obj.get("kind") or res.kind)
    api_version = str(obj.get("apiVersion") or res.api_version)
    if api_version == res.api_version and kind == res.kind:
        return
    version = fe.go_quote(api_version.rsplit("/", 1)[-1])
    prefix = f"{kind} in version {version} cannot be handled as a {res.kind}: "
    raise bad_request(
        f"{prefix}no kind {fe.go_quote(kind)} is registered for version "
        f'{fe.go_quote(api_version)} in scheme "pkg/runtime/scheme.go:111"'
    )


def _decode_patch(body: bytes, patch_type: PatchType) -> Any:
    """Decode a JSON, merge or strategic merge patch, worded like the patch handler."""
    prefix = "" if patch_type == "strategic" else "error decoding patch: "
    try:
        value = load_json(body)
    except ValueError as exc:
        raise bad_request(f"{prefix}{exc}") from None
    target = {
        "json": (list, "[]handlers.jsonPatchOp"),
        "merge": (dict, "map[string]interface {}"),
        "strategic": (dict, "map[string]interface {}"),
    }
    want, go_type = target[patch_type]
    if not isinstance(value, want):
        raise bad_request(
            f"{prefix}json: cannot unmarshal {json_type(value)} into Go value of type {go_type}"
        )
    return value


def _terminated(pod: Obj) -> list[str]:
    status = pod.get("status") or {}
    return [
        str(cs.get("name"))
        for group in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")
        for cs in status.get(group) or []
        if isinstance(cs, dict) and "terminated" in (cs.get("state") or {})
    ]

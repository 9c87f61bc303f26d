"""Managed fields and server-side apply, after ``sigs.k8s.io/structured-merge-diff``.

Field ownership is tracked as sets of paths whose elements are spelled as in ``fieldsV1``
(``f:spec``, ``k:{"name":"app"}``, ``v:"finalizer"``), so a set serialises to ``fieldsV1``
directly.  Lists are atomic unless the schema makes them associative
(``x-kubernetes-list-type: map`` with its keys) or sets; structs marked
``x-kubernetes-map-type: atomic`` are owned as a whole.  Both are read from the schema of the
object (:mod:`gateway.core.model.schema`), so every served kind is tracked the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from kube_gateway_demo.fielderrors import go_quote
from kube_gateway_demo.jsonutil import clone
from kube_gateway_demo.status import DemoApiError
from kube_gateway_demo.structure import child, is_atomic

Obj = dict[str, Any]
Path = tuple[str, ...]

_SET: Final = ("<set>",)


def _list_keys(type_name: str | None, key: str) -> tuple[str, ...] | None:
    """The keys of an associative list field (:data:`_SET` for a set; None: atomic)."""
    f, _ = child(type_name, key)
    if f is None or f.list_type == "atomic" or f.list_type is None:
        return None
    return _SET if f.list_type == "set" else f.list_map_keys


def _always_present(type_name: str | None, key: str) -> bool:
    """A required list (``spec.containers``) has no ``omitempty``: present even in an empty
    object, so a create does not "add" it."""
    f, _ = child(type_name, key)
    return f is not None and f.required


_KEY_DEFAULTS: Final[dict[str, str]] = {"protocol": "TCP"}

IGNORED_META: Final = frozenset(
    (
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    )
)
"""Metadata the field manager never tracks (``fieldmanager.stripMeta`` and system fields)."""

_MISSING: Final = object()


def _dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _key_element(item: Obj, keys: tuple[str, ...]) -> str:
    key = {}
    for k in keys:
        if k in item:
            key[k] = item[k]
        elif k in _KEY_DEFAULTS:
            key[k] = _KEY_DEFAULTS[k]
    return "k:" + _dumps(key)


def field_set(obj: Obj, type_name: str | None) -> set[Path]:
    """The set of field paths an object of schema type ``type_name`` sets: leaves and
    associative-list elements."""
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata" and isinstance(value, dict):
            meta_type = child(type_name, key)[1]
            for mk, mv in value.items():
                if mk not in IGNORED_META:
                    _walk(mv, ("f:metadata", f"f:{mk}"), meta_type, mk, out)
            continue
        if isinstance(value, dict) and not value and key in ("spec", "status"):
            continue
        _walk(value, (f"f:{key}",), type_name, key, out)
    return out


def _walk(value: Any, path: Path, parent: str | None, key: str, out: set[Path]) -> None:
    f, item = child(parent, key)
    if isinstance(value, dict):
        if not value or is_atomic(f, item):
            out.add(path)
            return
        for k, v in value.items():
            _walk(v, (*path, f"f:{k}"), item, k, out)
    elif isinstance(value, list):
        keys = _list_keys(parent, key)
        if keys is None:
            out.add(path)
        elif keys is _SET:
            for entry in value:
                out.add((*path, "v:" + _dumps(entry)))
        else:
            for entry in value:
                if not isinstance(entry, dict):
                    out.add(path)
                    continue
                elem = (*path, _key_element(entry, keys))
                out.add(elem)
                for k, v in entry.items():
                    _walk(v, (*elem, f"f:{k}"), item, k, out)
    else:
        out.add(path)


def get_at(obj: Any, path: Path) -> Any:
    """The value at ``path``, or a sentinel when absent (compare with :func:`present`)."""
    cur = obj
    for el in path:
        if el.startswith("f:"):
            if not isinstance(cur, dict) or el[2:] not in cur:
                return _MISSING
            cur = cur[el[2:]]
        elif el.startswith("k:"):
            if not isinstance(cur, list):
                return _MISSING
            found = _find_keyed(cur, el)
            if found is None:
                return _MISSING
            cur = cur[found]
        elif el.startswith("v:"):
            if not isinstance(cur, list):
                return _MISSING
            value = orjson.loads(el[2:])
            if value not in cur:
                return _MISSING
            cur = value
        else:
            return _MISSING
    return cur


def present(value: Any) -> bool:
    """Whether :func:`get_at` found something."""
    return value is not _MISSING


def _find_keyed(items: list[Any], el: str) -> int | None:
    key = orjson.loads(el[2:])
    for i, item in enumerate(items):
        if isinstance(item, dict) and all(
            item.get(k, _KEY_DEFAULTS.get(k, _MISSING)) == v for k, v in key.items()
        ):
            return i
    return None


def remove_at(obj: Obj, path: Path) -> None:
    """Delete the field, list element or set value at ``path`` (no-op when absent)."""
    parent = get_at(obj, path[:-1]) if len(path) > 1 else obj
    last = path[-1]
    if last.startswith("f:") and isinstance(parent, dict):
        parent.pop(last[2:], None)
    elif last.startswith("k:") and isinstance(parent, list):
        idx = _find_keyed(parent, last)
        if idx is not None:
            del parent[idx]
    elif last.startswith("v:") and isinstance(parent, list):
        value = orjson.loads(last[2:])
        while value in parent:
            parent.remove(value)


def path_string(path: Path) -> str:
    """SMD's ``Path.String()``: ``.spec.containers[name="app"].image``."""
    out: list[str] = []
    for el in path:
        if el.startswith("f:"):
            out.append("." + el[2:])
        elif el.startswith("k:"):
            key = orjson.loads(el[2:])
            out.append("[" + ",".join(f"{k}={_value_string(key[k])}" for k in sorted(key)) + "]")
        elif el.startswith("v:"):
            out.append("[=" + _value_string(orjson.loads(el[2:])) + "]")
    return "".join(out)


def _value_string(value: Any) -> str:
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return _dumps(value)


def to_fields_v1(paths: Iterable[Path]) -> Obj:
    """Serialise a path set as ``fieldsV1``."""
    root: Obj = {}
    members = set(paths)
    for path in members:
        node = root
        for el in path:
            node = node.setdefault(el, {})
    for path in members:
        node = root
        for el in path:
            node = node[el]
        if node:
            node["."] = {}
    return _sort_tree(root)


def _sort_tree(node: Obj) -> Obj:
    keys = sorted(node, key=lambda k: (k != ".", k))
    return {k: _sort_tree(node[k]) for k in keys}


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    """Parse ``fieldsV1`` into a path set (malformed input yields what could be read)."""
    out: set[Path] = set()
    if not isinstance(tree, dict):
        return out
    for key, node in tree.items():
        if key == ".":
            if prefix:
                out.add(prefix)
            continue
        path = (*prefix, key)
        if not node:
            out.add(path)
        else:
            out |= from_fields_v1(node, path)
    return out


@dataclass(slots=True)
class Entry:
    """One ``managedFields`` entry."""

    manager: str
    operation: str
    api_version: str
    time: str | None
    subresource: str = ""
    paths: set[Path] = field(default_factory=set)

    def render(self) -> Obj:
        out: Obj = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
        }
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = to_fields_v1(self.paths)
        if self.subresource:
            out["subresource"] = self.subresource
        return out

    def describe(self) -> str:
        """``printManager``: ``"kubectl" using v1`` for updaters, ``"kubectl"`` for appliers."""
        text = go_quote(self.manager)
        if self.subresource:
            text += f" with subresource {go_quote(self.subresource)}"
        if self.operation == "Update":
            text += f" using {self.api_version}"
        return text


def parse_entries(meta: Obj) -> list[Entry]:
    """The entries of ``metadata.managedFields``."""
    entries: list[Entry] = []
    for raw in meta.get("managedFields") or []:
        if not isinstance(raw, dict):
            continue
        entries.append(
            Entry(
                manager=str(raw.get("manager", "")),
                operation=str(raw.get("operation", "Update")),
                api_version=str(raw.get("apiVersion", "")),
                time=raw.get("time"),
                subresource=str(raw.get("subresource", "")),
                paths=from_fields_v1(raw.get("fieldsV1")),
            )
        )
    return entries


def render_entries(entries: Iterable[Entry]) -> list[Obj]:
    """Sorted as the apiserver sorts them: Apply before Update, then time, then manager."""
    kept = [e for e in entries if e.paths]
    kept.sort(key=lambda e: (e.operation, e.time or "", e.manager, e.api_version, e.subresource))
    return [e.render() for e in kept]


def _entry(
    entries: list[Entry], manager: str, operation: str, subresource: str, api_version: str
) -> Entry | None:
    for e in entries:
        if (e.manager, e.operation, e.subresource) == (manager, operation, subresource):
            return e
    return None


def _changed(old: Obj | None, new: Obj, old_set: set[Path], new_set: set[Path]) -> set[Path]:
    """Added and modified paths (list elements count as modified only when added)."""
    out = new_set - old_set
    for p in new_set & old_set:
        if p[-1].startswith(("k:", "v:")):
            continue
        if get_at(old, p) != get_at(new, p):
            out.add(p)
    return out


def _added_maps(old: Obj | None, new: Obj, type_name: str | None) -> Iterator[Path]:
    """Intermediate maps and associative lists an update created (tracked as members,
    like SMD's ``.``)."""

    def walk(value: Any, path: Path, parent: str | None, key: str) -> Iterator[Path]:
        f, item = child(parent, key)
        keys = _list_keys(parent, key)
        if isinstance(value, list) and value and keys is not None:
            if not present(get_at(old, path)) and not _always_present(parent, key):
                yield path
            if keys is not _SET:
                for entry in value:
                    if isinstance(entry, dict):
                        elem = (*path, _key_element(entry, keys))
                        for k, v in entry.items():
                            yield from walk(v, (*elem, f"f:{k}"), item, k)
            return
        if not isinstance(value, dict) or not value or is_atomic(f, item):
            return
        if len(path) > 1 and not present(get_at(old, path)):
            yield path
        for k, v in value.items():
            if len(path) == 1 and path[0] == "f:metadata" and k in IGNORED_META:
                continue
            yield from walk(v, (*path, f"f:{k}"), item, k)

    for key in ("metadata", "spec", "status"):
        if isinstance(new.get(key), dict):
            yield from walk(new[key], (f"f:{key}",), type_name, key)


Keep = Callable[[Path], bool]


def keep_all(path: Path) -> bool:
    """The default reset filter: every field is tracked."""
    return True


def track_update(
    old: Obj | None,
    new: Obj,
    manager: str,
    *,
    subresource: str,
    api_version: str,
    now: str,
    keep: Keep = keep_all,
    type_name: str | None = None,
) -> None:
    """Record an Update by ``manager``: it owns what it changed; removed fields lose owners.

    ``new.metadata.managedFields`` must hold the entries to start from (the live ones);
    ``keep`` drops the fields the strategy resets (``status`` on a pod's main resource...).
    """
    entries = parse_entries(new.get("metadata", {}))
    old_set = {p for p in field_set(old, type_name) if keep(p)} if old is not None else set()
    new_set = {p for p in field_set(new, type_name) if keep(p)}
    removed = old_set - new_set
    changed = _changed(old, new, old_set, new_set)
    if changed:
        changed |= {p for p in _added_maps(old, new, type_name) if keep(p)}
    for e in entries:
        e.paths -= removed
        if (e.manager, e.operation, e.subresource) != (manager, "Update", subresource):
            e.paths -= changed
        # nodes the update took away (an emptied list or map) are nobody's any more
        e.paths = {p for p in e.paths if present(get_at(new, p))}
    me = _entry(entries, manager, "Update", subresource, api_version)
    if me is None:
        me = Entry(manager, "Update", api_version, now, subresource)
        entries.append(me)
    before = set(me.paths)
    me.paths = (me.paths - removed) | changed
    if me.paths != before:
        me.time = now
    rendered = render_entries(entries)
    if rendered:
        new["metadata"]["managedFields"] = rendered
    else:
        new["metadata"].pop("managedFields", None)


def _merge(base: Any, patch: Any, type_name: str | None) -> Any:
    """Merge an apply configuration into the live object of schema type ``type_name``."""
    out = dict(base)
    for k, v in patch.items():
        f, item = child(type_name, k)
        if k not in out:
            out[k] = clone(v)
        elif isinstance(out[k], dict) and isinstance(v, dict) and not is_atomic(f, item):
            out[k] = _merge(out[k], v, item)
        elif isinstance(out[k], list) and isinstance(v, list):
            out[k] = _merge_list(out[k], v, _list_keys(type_name, k), item)
        else:
            out[k] = clone(v)
    return out


def _merge_list(
    base: list[Any], patch: list[Any], keys: tuple[str, ...] | None, item: str | None
) -> list[Any]:
    if keys is _SET:
        return list(base) + [clone(v) for v in patch if v not in base]
    if keys is None or not all(isinstance(i, dict) for i in base + patch):
        return clone(patch)
    out = list(base)
    for entry in patch:
        idx = _find_keyed(out, _key_element(entry, keys))
        if idx is None:
            out.append(clone(entry))
        else:
            out[idx] = _merge(out[idx], entry, item)
    return out


def _strip_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def apply(
    live: Obj | None,
    config: Obj,
    manager: str,
    *,
    force: bool,
    subresource: str,
    api_version: str,
    now: str,
    type_name: str | None = None,
) -> Obj:
    """Server-side apply ``config`` onto ``live`` (None: create) for ``manager``; objects are
    of schema type ``type_name``.

    Returns the merged object carrying the new ``managedFields``.

    Raises:
        DemoApiError: 409 Conflict (causes of reason ``FieldManagerConflict``) when a field
            another manager owns would change, unless ``force``.
    """
    cfg = _strip_nulls(config)
    cfg.pop("apiVersion", None)
    cfg.pop("kind", None)
    cfg_meta = cfg.get("metadata")
    if isinstance(cfg_meta, dict):
        cfg["metadata"] = {k: v for k, v in cfg_meta.items() if k not in IGNORED_META}
    base: Obj = clone(live) if live is not None else {"metadata": {}}
    entries = parse_entries(base.get("metadata", {}))
    base.get("metadata", {}).pop("managedFields", None)
    new_set = field_set(cfg, type_name)
    me = _entry(entries, manager, "Apply", subresource, api_version)
    last = set(me.paths) if me is not None else set()
    merged = _merge(base, cfg, type_name)
    others = [e for e in entries if e is not me]
    owned_elsewhere: set[Path] = set().union(*(e.paths for e in others)) if others else set()
    protected = owned_elsewhere | new_set
    removable = [
        path for path in last - protected if not any(p[: len(path)] == path for p in protected)
    ]
    removed_roots: list[Path] = []
    for path in sorted(removable, key=len):
        if any(path[: len(root)] == root for root in removed_roots):
            continue  # an ancestor (a whole list element, say) goes with its contents
        removed_roots.append(path)
    for path in sorted(removed_roots, key=len, reverse=True):
        remove_at(merged, path)
        # a map left empty by the removal goes too, unless someone still owns it
        parent = path[:-1]
        while len(parent) > 1 and parent not in protected:
            node = get_at(merged, parent)
            if not (isinstance(node, dict | list) and not node):
                break
            remove_at(merged, parent)
            parent = parent[:-1]
    merged_meta = merged.get("metadata")
    if isinstance(merged_meta, dict):
        # omitempty maps and lists: an emptied one is simply absent
        for key in ("labels", "annotations", "finalizers", "ownerReferences"):
            if key in merged_meta and not merged_meta[key]:
                del merged_meta[key]
    live_set = field_set(live, type_name) if live is not None else set()
    merged_set = field_set(merged, type_name)
    changed = _changed(live, merged, live_set, merged_set)
    removed = live_set - merged_set
    conflicts: list[tuple[Entry, Path]] = []
    for e in others:
        for p in sorted(e.paths & changed):
            conflicts.append((e, p))
    if conflicts and not force:
        raise conflict_error(conflicts)
    for e in others:
        e.paths -= removed
        if force:
            e.paths -= changed
    if me is None:
        # the time only says when this manager last changed the object
        me = Entry(manager, "Apply", api_version, None, subresource)
        entries.append(me)
    if changed or removed:
        me.time = now
    me.paths = new_set
    rendered = render_entries(entries)
    if rendered:
        merged.setdefault("metadata", {})["managedFields"] = rendered
    return dict(merged)


def conflict_error(conflicts: list[tuple[Entry, Path]]) -> DemoApiError:
    """``NewConflictError``: the apiserver's apply-conflict Status."""
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {e.describe()}",
            "field": path_string(p),
        }
        for e, p in conflicts
    ]
    if len(conflicts) == 1:
        e, p = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {e.describe()}: {path_string(p)}"
    else:
        by_manager: dict[str, list[Path]] = {}
        described: dict[str, str] = {}
        for e, p in conflicts:
            ident = _dumps(
                {
                    "manager": e.manager,
                    "operation": e.operation,
                    "apiVersion": e.api_version,
                    "subresource": e.subresource,
                }
            )
            by_manager.setdefault(ident, []).append(p)
            described[ident] = e.describe()
        lines: list[str] = []
        for ident in sorted(by_manager):
            lines.append(f"conflicts with {described[ident]}:")
            lines.extend(f"- {path_string(p)}" for p in by_manager[ident])
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return DemoApiError(409, "Conflict", message, details={"causes": causes})

"""The three non-apply patch formats: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and
strategic merge patch (merge keys and ``$patch`` directives of the Kubernetes types, read from
the schema: ``x-kubernetes-patch-merge-key`` and ``x-kubernetes-patch-strategy``).

Errors mirror ``evanphx/json-patch`` and ``apimachinery/pkg/util/strategicpatch`` wording.
"""

from __future__ import annotations

from typing import Any, Final

from kube_gateway_demo import definitions as schema
from kube_gateway_demo.fielderrors import go_map
from kube_gateway_demo.jsonutil import clone, json_type
from kube_gateway_demo.status import DemoApiError, bad_request, internal, unprocessable
from kube_gateway_demo.structure import child

Obj = dict[str, Any]

_DIRECTIVE: Final = "$patch"
_RETAIN_KEYS: Final = "$retainKeys"
_SET_ORDER: Final = "$setElementOrder/"
_DELETE_PRIMITIVE: Final = "$deleteFromPrimitiveList/"

# --- JSON patch ------------------------------------------------------------------------------


class _PatchError(Exception):
    pass


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _PatchError(f'JSON pointer must be empty or start with a "/": {path}')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc: Any, parts: list[str]) -> Any:
    cur = doc
    for part in parts:
        if isinstance(cur, dict):
            if part not in cur:
                return None
            cur = cur[part]
        elif isinstance(cur, list):
            try:
                idx = int(part)
            except ValueError:
                return None
            if not 0 <= idx < len(cur):
                return None
            cur = cur[idx]
        else:
            return None
    return cur


def _index(part: str, size: int, *, allow_end: bool) -> int:
    if part == "-" and allow_end:
        return size
    try:
        idx = int(part)
    except ValueError:
        raise _PatchError(f"Unable to access invalid index: {part}") from None
    if idx < 0 or idx > size or (idx == size and not allow_end):
        raise _PatchError(f"Unable to access invalid index: {idx}")
    return idx


def _existing(doc: Any, parts: list[str], missing: str) -> tuple[Any, str | int]:
    """The container and key of the value that ``parts`` (not empty) points at.

    Raises:
        _PatchError: with the message ``missing`` when there is no such value.
    """
    parent = _container(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent, last
    if isinstance(parent, list):
        try:
            idx = int(last)
        except ValueError:
            idx = -1
        if 0 <= idx < len(parent):
            return parent, idx
    raise _PatchError(missing)


def _get(doc: Any, path: str, op: str) -> Any:
    parts = _pointer(path)
    if not parts:
        return doc
    parent, key = _existing(
        doc,
        parts,
        f"{op} operation does not apply: doc is missing from path: {path}: missing value",
    )
    return parent[key]


def _add(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent = _container(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(last, len(parent), allow_end=True), value)
    else:
        raise _PatchError(
            f'add operation does not apply: doc is missing path: "{path}": missing value'
        )
    return doc


def _remove(doc: Any, path: str) -> Any:
    parts = _pointer(path)
    parent = _container(doc, parts[:-1]) if parts else None
    last = parts[-1] if parts else ""
    if isinstance(parent, dict) and last in parent:
        del parent[last]
        return doc
    if isinstance(parent, list):
        idx = _index(last, len(parent), allow_end=False)
        del parent[idx]
        return doc
    raise _PatchError(
        f'remove operation does not apply: doc is missing path: "{path}": missing value'
    )


def _replace(doc: Any, path: str, value: Any) -> Any:
    parts = _pointer(path)
    if not parts:
        return value
    parent, key = _existing(
        doc, parts, f"replace operation does not apply: doc is missing key: {path}: missing value"
    )
    parent[key] = value
    return doc


def json_patch(doc: Obj, ops: Any) -> Obj:
    """Apply an RFC 6902 patch to a copy of ``doc``.

    Raises:
        DemoApiError: 400 for a malformed patch, 422 for one that does not apply.
    """
    if not isinstance(ops, list):
        raise bad_request(
            f"json: cannot unmarshal {json_type(ops)} into Go value of type jsonpatch.Patch"
        )
    if len(ops) > 10000:
        raise DemoApiError(
            413,
            "RequestEntityTooLarge",
            f"Request entity too large: The allowed maximum operations in a JSON "
            f"patch is 10000, got {len(ops)}",
        )
    result: Any = clone(doc)
    try:
        for raw in ops:
            if not isinstance(raw, dict):
                raise bad_request(
                    f"json: cannot unmarshal {json_type(raw)} into Go value of type "
                    "jsonpatch.Operation"
                )
            op = raw.get("op")
            path = raw.get("path")
            if op not in ("add", "remove", "replace", "move", "copy", "test"):
                raise _PatchError(f"Unexpected kind: {op if isinstance(op, str) else 'unknown'}")
            if not isinstance(path, str):
                raise _PatchError(f"{op} operation missing path")
            if op in ("add", "replace", "test") and "value" not in raw:
                raise _PatchError(f"{op} operation missing value")
            value = clone(raw.get("value"))
            if op == "add":
                result = _add(result, path, value)
            elif op == "remove":
                result = _remove(result, path)
            elif op == "replace":
                result = _replace(result, path, value)
            elif op in ("move", "copy"):
                src = raw.get("from")
                if not isinstance(src, str):
                    raise _PatchError(f"{op} operation missing from")
                moved = clone(_get(result, src, op))
                if op == "move":
                    result = _remove(result, src)
                result = _add(result, path, moved)
            else:
                try:
                    current = _get(result, path, "test")
                except _PatchError:
                    current = None
                if current != value:
                    raise _PatchError(f"testing value {path} failed: test failed")
    except _PatchError as exc:
        raise unprocessable(str(exc)) from None
    if not isinstance(result, dict):
        raise unprocessable("the patch replaced the whole object with a non-object")
    return result


# --- JSON merge patch ------------------------------------------------------------------------


def merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    out = dict(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# --- strategic merge patch -------------------------------------------------------------------


def strategic_merge_patch(doc: Obj, patch: Any, type_name: str | None) -> Obj:
    """Apply a strategic merge patch (merge keys, ``$patch``, ``$retainKeys``, ordering) to an
    object of schema type ``type_name`` (None: no list has a merge key).

    Raises:
        DemoApiError: 400 for a malformed patch, 500 for a list item without its merge key (as
            the apiserver does).
    """
    if not isinstance(patch, dict):
        raise bad_request(
            f"json: cannot unmarshal {json_type(patch)} into Go value of type "
            "map[string]interface {}"
        )
    result = _smp_map(doc, patch, type_name)
    if result is None:
        return {}
    return result


def _list_strategy(type_name: str | None, key: str) -> tuple[str | None, bool, str | None]:
    """``(merge key, primitive merge, item type)`` of the list field ``key``."""
    f, item_type = child(type_name, key)
    if f is None or type_name is None or "merge" not in (f.patch_strategy or "").split(","):
        return None, False, item_type
    merge_key = schema.strategic_merge_keys(type_name).get(key)
    return merge_key, merge_key is None and item_type is None, item_type


def _smp_map(original: Any, patch: Obj, type_name: str | None) -> Obj | None:
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: clone(v) for k, v in patch.items() if not k.startswith("$")}
    if directive not in (None, "merge"):
        raise bad_request(f"Unknown patch type: {directive}")
    out: Obj = dict(original) if isinstance(original, dict) else {}
    retain = patch.get(_RETAIN_KEYS)
    if retain is not None:
        if not isinstance(retain, list):
            raise bad_request("invalid patch: $retainKeys must be a list")
        out = {k: v for k, v in out.items() if k in retain}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN_KEYS) or key.startswith(_SET_ORDER):
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            target = key[len(_DELETE_PRIMITIVE) :]
            if isinstance(out.get(target), list) and isinstance(value, list):
                out[target] = [v for v in out[target] if v not in value]
            continue
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict):
            merged = _smp_map(out.get(key), value, child(type_name, key)[1])
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        elif isinstance(value, list):
            out[key] = _smp_list(out.get(key), value, *_list_strategy(type_name, key))
        else:
            out[key] = clone(value)
    for key, value in patch.items():
        if key.startswith(_SET_ORDER) and isinstance(value, list):
            target = key[len(_SET_ORDER) :]
            if isinstance(out.get(target), list):
                merge_key = _list_strategy(type_name, target)[0]
                out[target] = _reorder(out[target], value, merge_key)
    return out


def _smp_list(
    original: Any, patch: list[Any], merge_key: str | None, primitive: bool, item: str | None
) -> list[Any]:
    base = list(original) if isinstance(original, list) else []
    if primitive:
        if any(isinstance(i, dict) and i.get(_DIRECTIVE) == "replace" for i in patch):
            return [i for i in patch if not isinstance(i, dict)]
        return base + [clone(v) for v in patch if v not in base]
    if merge_key is None:
        return [clone(v) for v in patch if not (isinstance(v, dict) and _DIRECTIVE in v)]
    if any(isinstance(i, dict) and i.get(_DIRECTIVE) == "replace" for i in patch):
        return [
            clone(i) for i in patch if not (isinstance(i, dict) and i.get(_DIRECTIVE) == "replace")
        ]
    out = base
    for entry in patch:
        if not isinstance(entry, dict):
            raise bad_request("unable to find api field in struct for the list item")
        if merge_key not in entry:
            raise internal(
                f"map: {go_map(entry)} does not contain declared merge key: {merge_key}",
                reason="",
            )
        key = entry[merge_key]
        idx = next(
            (i for i, cur in enumerate(out) if isinstance(cur, dict) and cur.get(merge_key) == key),
            None,
        )
        if entry.get(_DIRECTIVE) == "delete":
            if idx is not None:
                out = out[:idx] + out[idx + 1 :]
            continue
        merged = _smp_map({} if idx is None else out[idx], entry, item)
        out = list(out)
        if idx is None:
            if merged is not None:
                out.append(merged)
        elif merged is None:
            del out[idx]
        else:
            out[idx] = merged
    return out


def _reorder(items: list[Any], order: list[Any], merge_key: str | None) -> list[Any]:
    def ident(item: Any) -> Any:
        if merge_key and isinstance(item, dict):
            return item.get(merge_key)
        return item

    wanted = [o.get(merge_key) if merge_key and isinstance(o, dict) else o for o in order]
    ranked = {repr(w): i for i, w in enumerate(wanted)}
    listed = [i for i in items if repr(ident(i)) in ranked]
    rest = [i for i in items if repr(ident(i)) not in ranked]
    listed.sort(key=lambda i: ranked[repr(ident(i))])
    return listed + rest

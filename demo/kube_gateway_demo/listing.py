"""List pages: key ranges, selector filtering, limit/continue tokens, remainingItemCount."""

from __future__ import annotations

import base64
import binascii
import bisect
from dataclasses import dataclass
from typing import Any

import orjson

from kube_gateway_demo.jsonutil import load_json
from kube_gateway_demo.selectors import FieldSelector, LabelSelector
from kube_gateway_demo.status import bad_request

Obj = dict[str, Any]
_B64 = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def encode_continue(rv: int, start: str) -> str:
    """The apiserver's continue token: base64url of ``{"v","rv","start"}``."""
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode_continue(token: str) -> tuple[int, str]:
    """``(resourceVersion, start key)`` of a continue token.

    Raises:
        DemoApiError: 400 for a token this server did not issue.
    """
    prefix = "invalid continue token: continue key is not valid: "
    for i, ch in enumerate(token):
        if ch not in _B64:
            raise bad_request(f"{prefix}illegal base64 data at input byte {i}")
    if len(token) % 4 == 1:
        raise bad_request(f"{prefix}illegal base64 data at input byte {len(token) - 1}")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise bad_request(f"{prefix}illegal base64 data at input byte 0") from None
    try:
        data = load_json(raw)
    except ValueError as exc:
        raise bad_request(f"{prefix}{exc}") from None
    if (
        not isinstance(data, dict)
        or data.get("v") != "meta.k8s.io/v1"
        or not isinstance(data.get("rv"), int)
        or not isinstance(data.get("start"), str)
    ):
        raise bad_request(
            "invalid continue token: continue key is not valid: incorrect "
            "encoded start resourceVersion (version meta.k8s.io/v1)"
        )
    return int(data["rv"]), str(data["start"])


@dataclass(slots=True)
class Page:
    """One page of a list."""

    items: list[Obj]
    continue_token: str
    remaining: int | None


def page(
    state: dict[str, Obj],
    sorted_keys: list[str],
    *,
    prefix: str,
    start: str,
    limit: int,
    rv: int,
    labels: LabelSelector,
    fields: FieldSelector,
    field_func: Any,
) -> Page:
    """Collect up to ``limit`` matching objects from ``start`` within ``prefix``."""
    lo = bisect.bisect_left(sorted_keys, max(prefix, start))
    hi = bisect.bisect_left(sorted_keys, prefix + "\xff") if prefix else len(sorted_keys)
    filtered = not labels.empty or not fields.empty
    items: list[Obj] = []
    last = ""
    idx = lo
    while idx < hi:
        key = sorted_keys[idx]
        idx += 1
        obj = state[key]
        if filtered:
            if not labels.matches(obj.get("metadata", {}).get("labels")):
                continue
            if not fields.empty and not fields.matches(field_func(obj)):
                continue
        items.append(obj)
        last = key
        if limit and len(items) >= limit:
            break
    token = ""
    remaining: int | None = None
    if limit and len(items) >= limit and idx < hi:
        # the key relative to the listed prefix, with a leading "/", like etcd3's
        token = encode_continue(rv, "/" + last[len(prefix) :] + "\x00")
        if not filtered:
            remaining = hi - idx
    return Page(items, token, remaining)

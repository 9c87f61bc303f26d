"""The hub's compact state keeps every object the apiserver stores, however deep."""

from __future__ import annotations

import orjson
import pytest

from gateway.core.watch.compact import CompactState, encode


def _nested(depth: int) -> dict[str, object]:
    """A ConfigMap-like object whose ``data`` nests ``depth`` levels of objects."""
    inner: dict[str, object] = {"leaf": "x" * 10}
    for level in range(depth):
        inner = {f"l{level}": inner}
    return {"metadata": {"name": "deep", "namespace": "ns"}, "data": inner}


@pytest.mark.parametrize("depth", [10, 300, 1_500])
def test_objects_deeper_than_orjson_writes_are_kept_and_read_back_whole(depth: int) -> None:
    obj = _nested(depth)
    if depth > 254:  # what orjson.dumps refuses on its own (the apiserver keeps 10,000)
        with pytest.raises(orjson.JSONEncodeError):
            orjson.dumps(obj)
    state = CompactState()
    data = state.put("ns/deep", obj)
    assert data == state.raw("ns/deep")
    assert len(data) == len(encode(obj))
    back = state["ns/deep"]
    # read back, it writes the very same JSON (past the depth serve decodes as Python
    # data, the deepest parts are kept as JSON fragments: gateway.core.support.deepjson)
    assert encode(back) == data
    assert back["metadata"] == obj["metadata"]

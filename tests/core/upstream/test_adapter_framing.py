from __future__ import annotations

import orjson

from gateway.core.upstream.adapter import LineSplitter
from gateway.core.upstream.credentials import Credential


def test_lines_split_across_chunks_with_multibyte_characters() -> None:
    big = {"type": "ADDED", "object": {"metadata": {"name": "ü" * 200_000, "resourceVersion": "7"}}}
    payload = orjson.dumps(big) + b"\n" + orjson.dumps({"type": "BOOKMARK"}) + b'\n{"partial'
    splitter = LineSplitter()
    lines: list[bytes] = []
    for i in range(0, len(payload), 1):  # one byte at a time splits every multi-byte char
        lines.extend(splitter.feed(payload[i : i + 1]))
    assert [orjson.loads(line) for line in lines] == [big, {"type": "BOOKMARK"}]
    assert splitter.pending == b'{"partial'


def test_credential_never_shows_its_token() -> None:
    cred = Credential("s3cr3t-token")
    assert "s3cr3t" not in repr(cred) and "s3cr3t" not in str(cred)
    assert cred.headers() == {"Authorization": "Bearer s3cr3t-token"}
    assert Credential().headers() == {}

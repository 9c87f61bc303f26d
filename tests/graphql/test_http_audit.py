"""graphql-http's GraphQL-over-HTTP server audits (the npm package's ``serverAudits``, the
conformance suite of the spec) against the running gateway: every audit ok."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import orjson

from tests.support.graphql import ADMIN, Gateway

AUDIT = Path(__file__).resolve().parents[1] / "graphql-http"


async def test_graphql_http_audits_all_pass(gateway: Gateway) -> None:
    node = shutil.which("node")
    assert node is not None, "Node.js is needed for the audit"
    assert (AUDIT / "node_modules" / "graphql-http").is_dir(), "run `make audit-deps`"
    proc = await asyncio.create_subprocess_exec(
        node,
        str(AUDIT / "audit.mjs"),
        f"{gateway.url}/graphql",
        ADMIN,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=AUDIT,
    )
    async with asyncio.timeout(120):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    results = [orjson.loads(line) for line in out.splitlines() if line.strip()]
    assert len(results) >= 60
    failing = [r for r in results if r["status"] != "ok"]
    assert failing == [], failing

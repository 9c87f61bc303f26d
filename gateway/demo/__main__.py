"""``python -m gateway.demo``: run the demo upstream standalone."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

import uvicorn

from gateway.demo.auth import DEFAULT_TOKENS
from gateway.demo.upstream import DemoUpstream, _Server


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and serve until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m gateway.demo", description="Serve the demo Kubernetes API upstream."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--animate", action="store_true", help="keep the sample data changing")
    parser.add_argument("--no-seed", action="store_true", help="start with an empty cluster")
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--bookmark-interval", type=float, default=60.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        return asyncio.run(_serve(args))
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it handled, once it has stopped
        return 0


async def _serve(args: argparse.Namespace) -> int:
    demo = DemoUpstream(
        seed=not args.no_seed,
        animate=args.animate,
        history=args.history,
        bookmark_interval=args.bookmark_interval,
        host=args.host,
        port=args.port,
    )
    from gateway.demo import schema
    from gateway.demo.http import install_log_filter
    from gateway.demo.sample import seed

    install_log_filter()
    schema.warm()
    if not args.no_seed:
        await seed(demo.store)
    config = uvicorn.Config(
        demo.app,
        host=args.host,
        port=args.port,
        lifespan="on",
        ws="none",
        server_header=False,
        timeout_graceful_shutdown=5,
    )
    demo.app.server_address = f"{args.host}:{args.port}"
    server = _Server(config, demo.app, in_process=False)
    tokens = ", ".join(f"{t} ({g.user})" for t, g in DEFAULT_TOKENS.items())
    print(f"demo upstream on http://{args.host}:{args.port}  tokens: {tokens}", file=sys.stderr)
    await server.serve()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

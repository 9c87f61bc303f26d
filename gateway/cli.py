"""``kube-gateway``: the command line (``serve``, and ``schema``, which prints the SDL that
``serve`` would answer at ``/graphql``)."""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from gateway import demomode, logs
from gateway import settings as settings_mod


def _serve(argv: Sequence[str]) -> int:
    settings = settings_mod.load(argv)
    logs.configure(settings.log_level, settings.log_format)
    from gateway.app import create_app
    from gateway.core.upstream.config import ConfigError
    from gateway.runtime import resolve_upstream

    if bool(settings.tls_cert_file) != bool(settings.tls_key_file):
        print(
            "kube-gateway: cannot start: --tls-cert-file and --tls-key-file go together",
            file=sys.stderr,
        )
        return 2
    if settings.grpc_client_ca_file and not settings.tls_cert_file:
        print(
            "kube-gateway: cannot start: --grpc-client-ca-file needs --tls-cert-file",
            file=sys.stderr,
        )
        return 2
    try:
        # fail before serving, with a message, not a traceback: a half-configured cluster,
        # or the demo upstream wanted (--demo, or no cluster at all) but not installed
        if settings.demo or resolve_upstream(settings) is None:
            demomode.upstream_class(asked=settings.demo)
        if settings.demo_clusters > 1:
            demomode.upstream_class(asked=True)
        if settings.clusters_dir and not Path(settings.clusters_dir).is_dir():
            raise ConfigError(f"--clusters-dir {settings.clusters_dir}: not a directory")
        # It refuses a --trusted-documents manifest it cannot serve.
        app = create_app(settings, tune_gc=True)
    except ConfigError as exc:
        print(f"kube-gateway: cannot start: {exc}", file=sys.stderr)
        return 2
    from gateway.core import heap
    from gateway.httpserver import server_options

    # The process is ours: few malloc arenas, large blocks freed at once (what a flood of
    # megabyte requests leaves behind goes back to the system).
    heap.limit_arenas()

    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.http_port,
        log_level=settings.log_level,
        lifespan="on",
        log_config=None,  # keep the logging configured above (one format for every logger)
        # The gateway writes its own access lines (gateway/requestid.py), with request ids.
        access_log=False,
        ssl_certfile=settings.tls_cert_file,
        ssl_keyfile=settings.tls_key_file,
        # After the drain (every stream already ended), what still holds a connection.
        timeout_graceful_shutdown=2,
        # The idle and request-head timeouts and the connection cap (gateway/httpserver.py).
        **server_options(settings),
    )
    try:
        config.load()
    except (OSError, ssl.SSLError) as exc:
        print(f"kube-gateway: cannot start: the TLS certificate or key: {exc}", file=sys.stderr)
        return 2
    # The lifespan reloads renewed certificates into uvicorn's context.
    app.state.http_tls = config.ssl
    from gateway.shutdown import DrainingServer

    # SIGTERM/SIGINT: drain (gateway/core/process/drain.py), then uvicorn shuts down and the
    # lifespan
    # closes gRPC, httpx and the demo; a second signal stops at once.
    server = DrainingServer(config, app.state.drain)
    server.run()
    return 0 if server.started else 1


#: Seconds ``kube-gateway schema`` waits for discovery and the schema build by default.
SCHEMA_TIMEOUT = 120.0


def _schema_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kube-gateway schema",
        description="Print the GraphQL SDL that 'kube-gateway serve' would answer at /graphql "
        "for the same upstream: the cluster's discovered kinds included (graphql-codegen and "
        "other tools read it as a schema file). Every 'serve' flag that chooses the upstream "
        "and what it serves is accepted (--demo, --kubeconfig, --context, --server, "
        "--token-file, --discovery-token-file, --resources, --no-discovery, ...); see "
        "'kube-gateway serve --help'.",
    )
    parser.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="write the SDL to FILE instead of stdout",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=SCHEMA_TIMEOUT,
        metavar="SECONDS",
        help="give up when discovery and the schema build take longer "
        f"[default {SCHEMA_TIMEOUT:g}]",
    )
    return parser


def _schema(argv: Sequence[str]) -> int:
    own, rest = _schema_parser().parse_known_args(list(argv))
    settings = settings_mod.load(rest)
    # stdout is the SDL; the log goes to stderr, its info lines (serve's start-up story)
    # left out unless a finer level is asked for.
    level = "warning" if settings.log_level == "info" else settings.log_level
    logs.configure(level, settings.log_format)
    from gateway.app import served_sdl
    from gateway.core.upstream.config import ConfigError

    async def build() -> str:
        async with asyncio.timeout(own.timeout):
            return await served_sdl(settings)

    try:
        text = asyncio.run(build())
    except ConfigError as exc:
        print(f"kube-gateway schema: {exc}", file=sys.stderr)
        return 2
    except TimeoutError:
        print(
            f"kube-gateway schema: the cluster's discovery and the schema build did not "
            f"finish in {own.timeout:g} s (is the API server reachable? --timeout waits longer)",
            file=sys.stderr,
        )
        return 1
    if own.output:
        Path(own.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


COMMANDS = {"serve": _serve, "schema": _schema}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kube-gateway`` script."""
    args = list(sys.argv[1:] if argv is None else argv)
    top = argparse.ArgumentParser(
        prog="kube-gateway",
        description="GraphQL and gRPC in front of the Kubernetes API.",
        epilog="Run 'kube-gateway serve --help' for the serve flags, "
        "'kube-gateway schema --help' for the schema command.",
    )
    top.add_argument(
        "command",
        choices=sorted(COMMANDS),
        help="serve: run the HTTP and gRPC servers; schema: print the SDL /graphql would serve",
    )
    if not args or args[0] in ("-h", "--help"):
        top.print_help()
        return 0 if args else 2
    if args[0] not in COMMANDS:
        top.parse_args(args[:1])
    return COMMANDS[args[0]](args[1:])


if __name__ == "__main__":
    raise SystemExit(main())

"""``kube-gateway``: the command line."""

from __future__ import annotations

import argparse
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
    from gateway.core.config import ConfigError
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
    )
    try:
        config.load()
    except (OSError, ssl.SSLError) as exc:
        print(f"kube-gateway: cannot start: the TLS certificate or key: {exc}", file=sys.stderr)
        return 2
    # The lifespan reloads renewed certificates into uvicorn's context.
    app.state.http_tls = config.ssl
    from gateway.shutdown import DrainingServer

    # SIGTERM/SIGINT: drain (gateway/core/drain.py), then uvicorn shuts down and the lifespan
    # closes gRPC, httpx and the demo; a second signal stops at once.
    server = DrainingServer(config, app.state.drain)
    server.run()
    return 0 if server.started else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kube-gateway`` script."""
    args = list(sys.argv[1:] if argv is None else argv)
    top = argparse.ArgumentParser(
        prog="kube-gateway",
        description="GraphQL and gRPC in front of the Kubernetes API.",
        epilog="Run 'kube-gateway serve --help' for the serve flags.",
    )
    top.add_argument("command", choices=["serve"], help="serve: run the HTTP and gRPC servers")
    if not args or args[0] in ("-h", "--help"):
        top.print_help()
        return 0 if args else 2
    if args[0] != "serve":
        top.parse_args(args[:1])
    return _serve(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())

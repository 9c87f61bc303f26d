"""The core's ``httpx.AsyncClient`` for the upstream, and the TLS context it verifies with.

``build_http_client`` builds the client from a resolved
``gateway.core.upstream.config.UpstreamConfig``
(see ``gateway.core.upstream.kubeconfig`` for where that comes from).  By default it presents *no*
gateway credential at all: the core sets the caller's bearer token on every request, and the
kube-apiserver tries x509 client certificates before bearer tokens, so a gateway certificate
would silently replace the caller's identity.  The gateway's own credential is used only with
``gateway_identity=True``, which is logged loudly; ``gateway.core.upstream.auth`` then loads it.

``build_ssl_context`` builds the context that verifies the upstream with the configured CA,
else certifi's public bundle; it verifies nothing only for ``insecure_skip_tls_verify``, which
resolution accepts only when explicitly allowed.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import re
import ssl
import sys
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlencode

import certifi
import httpx

from gateway.core.upstream.auth import gateway_auth
from gateway.core.upstream.config import ConfigError, UpstreamConfig
from gateway.core.upstream.lean import LeanTransport, encoded_headers
from gateway.core.upstream.transport import use_asyncio_backend

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = [
    "USER_AGENT",
    "UpstreamClient",
    "build_http_client",
    "build_ssl_context",
]

logger = logging.getLogger(__name__)

# Watches and log follows stay open for as long as the caller wants: no read timeout here,
# per-request timeouts are the caller's.  Writes are small JSON bodies.
CONNECT_TIMEOUT: Final = 10.0
WRITE_TIMEOUT: Final = 30.0
POOL_TIMEOUT: Final = 10.0


def _remember_missing_sniffio() -> None:
    """Make ``import sniffio`` fail at once when sniffio is not installed.

    httpcore asks which async library runs (``current_async_library``) several times per
    request, and does so with ``import sniffio`` inside a ``try``.  Python does not remember
    a failed import: without sniffio installed (nothing in the lock needs it) every one of
    those imports scanned ``sys.path`` again, about 60 µs each, a quarter of a millisecond
    per upstream request.  ``None`` in ``sys.modules`` is Python's own "not importable"
    mark, so the import raises ``ImportError`` at once and httpcore takes its asyncio
    branch, as before.  An installed sniffio is left alone.
    """
    if "sniffio" not in sys.modules and importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


_remember_missing_sniffio()


def _version() -> str:
    try:
        return importlib.metadata.version("kube-gateway")
    except importlib.metadata.PackageNotFoundError:  # running from a bare checkout
        return "0+unknown"


USER_AGENT: Final = f"kube-gateway/{_version()}"


def build_ssl_context(cfg: UpstreamConfig) -> ssl.SSLContext:
    """Build the TLS context that verifies the upstream (no client certificate loaded).

    Args:
        cfg: the upstream configuration.

    Returns:
        A client context trusting the configured CA (or certifi's bundle when none is
        configured), or one that verifies nothing when ``insecure_skip_tls_verify``.

    Raises:
        ConfigError: the CA bundle cannot be loaded.
    """
    if cfg.insecure_skip_tls_verify:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    try:
        if cfg.ca_data is not None:
            return ssl.create_default_context(cadata=cfg.ca_data.decode("ascii"))
        if cfg.ca_file is not None:
            return ssl.create_default_context(cafile=str(cfg.ca_file))
        return ssl.create_default_context(cafile=certifi.where())
    except (ssl.SSLError, OSError, UnicodeDecodeError, ValueError) as exc:
        where = cfg.ca_file or "certificate-authority-data"
        raise ConfigError(f"{cfg.source}: cannot load the CA bundle from {where}: {exc}") from exc


def _sni_hook(server_name: str) -> Callable[[httpx.Request], Awaitable[None]]:
    async def set_sni(request: httpx.Request) -> None:
        # httpcore uses this name for SNI and for verifying the certificate's host name.
        request.extensions["sni_hostname"] = server_name

    return set_sni


#: A path (after the base URL's) and a query that URL parsing would leave exactly as they are:
#: unreserved characters and ``/``; the query as ``QueryParams`` encodes it.
_PLAIN_PATH: Final = re.compile(r"[A-Za-z0-9\-._~/]*")
_PLAIN_QUERY: Final = re.compile(r"(?:[A-Za-z0-9\-._~=&+]|%[0-9A-F]{2})*")


class RequestFactory:
    """Builds the client's ``httpx.Request`` for one upstream call, as ``build_request``
    would (the base URL, the default headers, the timeout) at a fraction of the cost: the
    base URL is parsed once and a request's path and query are put into it without parsing
    again when they are plain (:data:`_PLAIN_PATH`; anything else is parsed as before); the
    default headers are encoded once; the request is made from a parsed URL and encoded
    headers (``stream=``), with the ``Host`` and ``Content-Length`` headers httpx would add.
    """

    __slots__ = ("_base", "_headers", "_prefix", "_reference", "_timeout")

    def __init__(self, client: httpx.AsyncClient) -> None:
        base = client.base_url
        self._base = str(base).rstrip("/")
        # httpx's parsed form of a URL (a named tuple); another httpx without it: parse all.
        reference = getattr(base, "_uri_reference", None)
        self._reference = reference if hasattr(reference, "_replace") else None
        self._prefix = base.path.rstrip("/")
        self._headers = [(b"Host", base.netloc)] + [
            (name, value) for name, value in client.headers.raw if name.lower() != b"accept"
        ]
        self._timeout = client.timeout.as_dict()

    def url(self, path: str, params: list[tuple[str, str]] | tuple[()] = ()) -> httpx.URL:
        # (what str(httpx.QueryParams(params)) gives for pairs of strings)
        query = urlencode(params) if params else None
        reference = self._reference
        if (
            reference is not None
            and _PLAIN_PATH.fullmatch(path)
            and (query is None or _PLAIN_QUERY.fullmatch(query))
        ):
            url = httpx.URL.__new__(httpx.URL)
            url._uri_reference = reference._replace(path=self._prefix + path, query=query)
            return url
        return httpx.URL(f"{self._base}{path}?{query}" if query else self._base + path)

    def request(
        self,
        method: str,
        url: httpx.URL,
        headers: list[tuple[bytes, bytes]],
        *,
        content: bytes | None,
        timeout: float | None,
        extensions: dict[str, Any] | None = None,
    ) -> httpx.Request:
        """``method`` of ``url`` with the default headers, then ``headers``, then the
        body's length; ``timeout`` (None: the client's) for every phase."""
        raw = self._headers + headers
        if content is not None:
            raw.append((b"Content-Length", b"%d" % len(content)))
        elif method in ("POST", "PUT", "PATCH"):
            raw.append((b"Content-Length", b"0"))
        # (httpx.Timeout(timeout).as_dict(): the one limit for every phase; a call's
        # deadline gives a new one each time, so none is kept)
        limits = (
            self._timeout
            if timeout is None
            else {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
        )
        extensions = (
            {"timeout": limits} if extensions is None else {"timeout": limits, **extensions}
        )
        request = httpx.Request(
            method,
            url,
            headers=encoded_headers(raw),
            stream=httpx.ByteStream(content or b""),
            extensions=extensions,
        )
        request.read()  # its .content, as a request built with content= has
        return request


class UpstreamClient(httpx.AsyncClient):
    """The ``httpx.AsyncClient`` :func:`build_http_client` builds, and its transport.

    Attributes:
        direct: the transport, when the client adds nothing to a request but its default
            headers, base URL and timeout (no auth, no event hooks; redirects are never
            followed): :class:`~gateway.core.upstream.adapter.KubeAdapter` then sends a complete
            unary request straight to it, without the client's per-request layers (auth
            flow, hooks, redirect check, cookie jar: about a fifth of an upstream get's
            CPU).  ``None`` in gateway-identity mode and with a TLS server name.
    """

    def __init__(self, *, direct: httpx.AsyncBaseTransport | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.direct = direct
        #: Builds this client's requests (see :class:`RequestFactory`).
        self.requests = RequestFactory(self)


def build_http_client(
    cfg: UpstreamConfig,
    *,
    gateway_identity: bool = False,
    http2: bool = False,
    network: str = "lean",
    max_connections: int = 512,
    transport: httpx.AsyncBaseTransport | None = None,
    internal: str | None = None,
    impersonate: Callable[[httpx.Auth | None], httpx.Auth] | None = None,
) -> UpstreamClient:
    """Build the core's one ``httpx.AsyncClient`` for the upstream.

    By default the client carries no gateway credential: no client certificate in the TLS
    handshake (the apiserver tries x509 before bearer tokens, so one would replace the
    caller's identity) and no ``Authorization`` header; the core sets the caller's token on
    every request.  With ``gateway_identity=True`` the gateway's certificate is presented and
    ``GatewayAuth`` adds the gateway's token to requests that carry none; this mode is
    logged as a warning.

    HTTP/1.1 by default; with ``http2=True`` HTTP/2 is offered through ALPN to ``https``
    servers.  HTTP/2 is opt-in because the apiserver closes a whole HTTP/2 connection
    (GOAWAY) after any unauthenticated request (its UnauthenticatedHTTP2DOSMitigation), so
    on a connection shared by many callers one caller's bad token would break the others'
    in-flight requests and watches; HTTP/1.1 confines that to the caller's own connection.
    Timeouts: connect 10 s, pool 10 s, write 30 s, no read timeout (watches and log
    follows are long-lived; per-request timeouts are the caller's).

    Args:
        cfg: the resolved upstream configuration.
        gateway_identity: present the gateway's own credential (explicit, logged mode).
        http2: offer HTTP/2 to ``https`` servers (see above for why it is off by default).
        network: ``"lean"``: the gateway's own HTTP/1.1 transport
            (:mod:`gateway.core.upstream.lean`; with ``http2`` to an ``https`` server, the
            ``"asyncio"`` one); ``"asyncio"``: httpx's transport, its httpcore pool's
            connections on the event loop's own transports
            (:mod:`gateway.core.upstream.transport`); ``"anyio"``: httpcore's default.
        max_connections: connection pool size.
        transport: a transport to use instead of the default one (its TLS and pool
            settings are then its own).
        internal: with ``gateway_identity``: the client carries only the gateway's own
            requests (discovery...), named here for the log, instead of the warning.
        impersonate: impersonate mode (``--identity impersonate``): makes the client's auth
            from the gateway's own (the composition root hands the identity strategy's
            :attr:`~gateway.core.upstream.identity.Identity.client_auth`, an
            :class:`~gateway.core.upstream.identity.ImpersonatingAuth` over its TokenReviews):
            every request carries the gateway's own credential plus the caller's
            ``Impersonate-*`` headers; no caller's token ever leaves on this client.

    Returns:
        The client; the caller owns it and must close it (``aclose``).

    Raises:
        ConfigError: the CA or the gateway's certificate cannot be loaded, or, in gateway
            identity mode, no gateway credential is configured or its exec plugin fails.
    """
    ssl_context = build_ssl_context(cfg)
    auth: httpx.Auth | None = None
    if impersonate is not None:
        own = gateway_auth(cfg, ssl_context, internal="callers' requests, each impersonated")
        auth = impersonate(own)
    elif gateway_identity:
        auth = gateway_auth(cfg, ssl_context, internal=internal)
    if cfg.insecure_skip_tls_verify and cfg.is_tls:
        logger.warning("TLS verification of the upstream %s is OFF", cfg.server)

    use_http2 = http2 and cfg.is_tls
    if transport is None and network == "lean" and not use_http2:
        transport = LeanTransport(ssl_context, max_connections=max_connections)
    elif transport is None:
        transport = httpx.AsyncHTTPTransport(
            verify=ssl_context,
            http2=use_http2,
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            trust_env=False,
        )
        # The pool's connections on the loop's own transports, not anyio's streams (see
        # gateway.core.upstream.transport: the largest per-request cost it removes).
        if network != "anyio" and not use_asyncio_backend(transport):
            logger.warning("httpx keeps no httpcore pool here: the upstream uses anyio streams")
    hooks: dict[str, list[Callable[..., Any]]] = {"request": [], "response": []}
    if cfg.tls_server_name and cfg.is_tls:
        hooks["request"].append(_sni_hook(cfg.tls_server_name))
    plain = auth is None and not hooks["request"] and not hooks["response"]
    return UpstreamClient(
        direct=transport if plain else None,
        base_url=cfg.server,
        auth=auth,
        headers={"User-Agent": USER_AGENT},
        timeout=httpx.Timeout(
            connect=CONNECT_TIMEOUT, read=None, write=WRITE_TIMEOUT, pool=POOL_TIMEOUT
        ),
        transport=transport,
        event_hooks=hooks,
        follow_redirects=False,
        # No proxy or netrc from the environment: nothing may add a credential behind our back.
        trust_env=False,
    )

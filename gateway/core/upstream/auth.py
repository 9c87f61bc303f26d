"""The gateway's own upstream credential, for the explicit gateway-identity mode only.

By default the core sends the *caller's* token on every request and none of this is used
(see ``gateway.core.upstream.client``).  In gateway-identity mode, ``gateway_auth`` loads the
gateway's
client certificate into the upstream TLS context and returns a ``GatewayAuth`` that adds the
gateway's bearer token to requests that carry no ``Authorization`` header of their own.

Credentials rotate: token files are re-read (at most once a minute, and at once after a 401),
and exec plugins are re-run when their credential expires or after a 401.  A 401 is retried
once, and only when the refreshed token differs from the one that was refused.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import logging
import os
import ssl
import tempfile
import time
from collections.abc import AsyncGenerator, Callable, Generator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import httpx

from gateway.core.upstream.config import ConfigError, ExecConfig, UpstreamConfig

__all__ = [
    "ExecCredential",
    "ExecCredentialPlugin",
    "GatewayAuth",
    "TokenFile",
    "gateway_auth",
    "load_client_certificate",
]

logger = logging.getLogger(__name__)

#: How long a token read from a file is trusted before the file is read again (client-go's).
TOKEN_FILE_MAX_AGE: Final = 60.0


def _kubernetes(module: str) -> Any:
    # The kubernetes package is untyped and slow to import: import lazily, keep it Any.
    return importlib.import_module(f"kubernetes.{module}")


def _utcnow() -> datetime:
    return datetime.now(UTC)


class TokenFile:
    """A bearer token kept in a file that is rotated underneath us (projected SA tokens).

    Args:
        path: the token file.
        max_age: seconds a token read from the file is reused before reading it again.
        clock: monotonic clock, in seconds.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_age: float = TOKEN_FILE_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._max_age = max_age
        self._clock = clock
        self._token: str | None = None
        self._read_at = 0.0

    def __repr__(self) -> str:
        return f"TokenFile({str(self.path)!r})"

    def read(self, *, refresh: bool = False) -> str:
        """Return the token, reading the file again when it is stale or ``refresh`` is set.

        A read that fails after a token was once read keeps the last token (a rotation may
        be under way) and logs a warning.

        Args:
            refresh: read the file now, whatever the age of the cached token.

        Returns:
            The token, stripped of surrounding whitespace.

        Raises:
            ConfigError: the file cannot be read (or is empty) and no token was read before.
        """
        now = self._clock()
        if not refresh and self._token is not None and now - self._read_at < self._max_age:
            return self._token
        # A few bytes read at most once a minute: not worth a thread hop.
        try:
            token = self.path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            error = ConfigError(f"token file {self.path} cannot be read: {exc.strerror}")
        else:
            if token:
                self._token, self._read_at = token, now
                return token
            error = ConfigError(f"token file {self.path} is empty")
        if self._token is None:
            raise error
        logger.warning("%s; keeping the previous token", error)
        return self._token


@dataclass(frozen=True, slots=True, repr=False)
class ExecCredential:
    """What one run of an exec plugin returned.

    Attributes:
        token: bearer token.
        client_cert_data: client certificate, PEM.
        client_key_data: client key, PEM.
        expires_at: when to run the plugin again (``None``: never, until a 401).
    """

    token: str | None = field(default=None, repr=False)
    client_cert_data: bytes | None = field(default=None, repr=False)
    client_key_data: bytes | None = field(default=None, repr=False)
    expires_at: datetime | None = None

    def __repr__(self) -> str:
        return (
            f"ExecCredential(token={'<redacted>' if self.token else None}, "
            f"client_certificate={self.client_cert_data is not None}, "
            f"expires_at={self.expires_at!r})"
        )


def _parse_status(status: Any, name: str) -> ExecCredential:
    if not isinstance(status, dict):
        raise ConfigError(f"exec plugin {name}: the ExecCredential has no status object")
    token = status.get("token")
    cert = status.get("clientCertificateData")
    key = status.get("clientKeyData")
    for label, value in (("token", token), ("clientCertificateData", cert), ("clientKeyData", key)):
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"exec plugin {name}: status.{label} is not a string")
    if bool(cert) != bool(key):
        raise ConfigError(
            f"exec plugin {name}: clientCertificateData and clientKeyData come together"
        )
    if not token and not cert:
        raise ConfigError(
            f"exec plugin {name}: the status has neither a token nor clientCertificateData"
        )
    expires_at = None
    raw = status.get("expirationTimestamp")
    if raw:
        try:
            expires_at = datetime.fromisoformat(str(raw))
        except ValueError:
            raise ConfigError(
                f"exec plugin {name}: expirationTimestamp {raw!r} is not RFC 3339"
            ) from None
        if expires_at.tzinfo is None:
            expires_at = expires_at.replace(tzinfo=UTC)
    return ExecCredential(
        token=token or None,
        client_cert_data=cert.encode() if cert else None,
        client_key_data=key.encode() if key else None,
        expires_at=expires_at,
    )


class ExecCredentialPlugin:
    """Runs a kubeconfig exec credential plugin and caches its credential until it expires.

    The plugin runs with the gateway's environment plus the declared ``env``, in the
    directory of the kubeconfig that declared it, with ``KUBERNETES_EXEC_INFO`` set (by
    the ``kubernetes`` package's ``ExecProvider``).

    Args:
        spec: the declared plugin.
        cluster_info: ``spec.cluster`` for plugins with ``provideClusterInfo``.
        on_refresh: called with every freshly obtained credential (to reload a certificate).
        clock: the current time, timezone-aware.
    """

    def __init__(
        self,
        spec: ExecConfig,
        *,
        cluster_info: dict[str, Any] | None = None,
        on_refresh: Callable[[ExecCredential], None] | None = None,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.spec = spec
        self.runs = 0
        self._cluster_info = cluster_info
        self._on_refresh = on_refresh
        self._clock = clock
        self._cached: ExecCredential | None = None
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"ExecCredentialPlugin({self.spec!r}, runs={self.runs})"

    @property
    def name(self) -> str:
        """The plugin's command, for messages."""
        return os.path.basename(self.spec.command)

    def _unexpired(self, cred: ExecCredential | None) -> ExecCredential | None:
        if cred is not None and (cred.expires_at is None or self._clock() < cred.expires_at):
            return cred
        return None

    def credential(self, *, refresh: bool = False) -> ExecCredential:
        """Return the cached credential, running the plugin if it expired (blocking).

        For startup; request paths use ``acredential``.

        Args:
            refresh: run the plugin even if the cached credential has not expired.

        Returns:
            The credential.

        Raises:
            ConfigError: the plugin cannot be started, fails, or prints a bad ExecCredential.
        """
        if not refresh and (cached := self._unexpired(self._cached)) is not None:
            return cached
        return self._store(self._run())

    async def acredential(self, *, refresh: bool = False) -> ExecCredential:
        """Like ``credential`` (same argument, result and errors), running the plugin in a
        thread, at most once at a time.

        Concurrent callers that find the credential expired share one run of the plugin.
        """
        seen = self._cached
        if not refresh and (cached := self._unexpired(seen)) is not None:
            return cached
        async with self._lock:
            if self._cached is not seen and (current := self._unexpired(self._cached)):
                return current  # another task refreshed it while we waited
            return self._store(await asyncio.to_thread(self._run))

    def _store(self, cred: ExecCredential) -> ExecCredential:
        self._cached = cred
        self.runs += 1
        if self._on_refresh is not None:
            self._on_refresh(cred)
        return cred

    def _run(self) -> ExecCredential:
        ConfigException = _kubernetes("config.config_exception").ConfigException
        ExecProvider = _kubernetes("config.exec_provider").ExecProvider
        ConfigNode = _kubernetes("config.kube_config").ConfigNode

        spec = self.spec
        declared: dict[str, Any] = {
            "command": spec.command,
            "apiVersion": spec.api_version,
            "args": list(spec.args),
            "env": [{"name": n, "value": v} for n, v in spec.env],
            "provideClusterInfo": spec.provide_cluster_info,
        }
        cluster = None
        if spec.provide_cluster_info and self._cluster_info is not None:
            cluster = ConfigNode("cluster", self._cluster_info)
        cwd = str(spec.cwd) if spec.cwd is not None else None
        provider = ExecProvider(ConfigNode("exec", declared), cwd, cluster)
        try:
            status = provider.run()
        except ConfigException as exc:
            raise ConfigError(f"exec plugin {self.name} failed: {exc}") from exc
        except OSError as exc:
            hint = f" ({spec.install_hint.strip()})" if spec.install_hint else ""
            raise ConfigError(
                f"exec plugin {spec.command!r} cannot be started: {exc.strerror}{hint}"
            ) from exc
        return _parse_status(status, self.name)


def _replayable(request: httpx.Request) -> bool:
    return isinstance(request.stream, httpx.ByteStream)


class GatewayAuth(httpx.Auth):
    """Adds the gateway's bearer token to requests that carry no ``Authorization`` header.

    A request that already has one (the caller's) is sent untouched.  The token comes from,
    in this order, a token file, a static token or an exec plugin; token files and plugins
    are refreshed as they rotate or expire.  On a 401 the credential is refreshed and the
    request retried once, if the token changed and the body can be replayed.  Async only.

    Args:
        token: a static token.
        token_file: a rotated token file.
        plugin: an exec credential plugin (its certificate, if any, is handled by
            ``on_refresh``; requests then carry no token from it).
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        token_file: TokenFile | None = None,
        plugin: ExecCredentialPlugin | None = None,
    ) -> None:
        self._token = token
        self._token_file = token_file
        self._plugin = plugin

    def __repr__(self) -> str:
        kind = "token file" if self._token_file else "token" if self._token else "exec"
        return f"GatewayAuth({kind})"

    async def _current(self, *, refresh: bool) -> str | None:
        if self._token_file is not None:
            return self._token_file.read(refresh=refresh)
        if self._token is not None:
            return self._token
        if self._plugin is not None:
            return (await self._plugin.acredential(refresh=refresh)).token
        return None

    def sync_auth_flow(
        self, request: httpx.Request
    ) -> Generator[httpx.Request, httpx.Response, None]:
        """Refuse: the gateway's client is async only."""
        raise RuntimeError("GatewayAuth works with httpx.AsyncClient only")

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        """Add the gateway's token when the request has none; refresh and retry on a 401."""
        if "Authorization" in request.headers:
            yield request  # the caller's credential travels untouched
            return
        token = await self._current(refresh=False)
        if token is None:
            yield request  # certificate-only identity
            return
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code != httpx.codes.UNAUTHORIZED or not _replayable(request):
            return
        fresh = await self._current(refresh=True)
        if fresh is None or fresh == token:
            return
        logger.info("upstream refused the gateway's token; retrying with the refreshed one")
        request.headers["Authorization"] = f"Bearer {fresh}"
        yield request


def load_client_certificate(
    ctx: ssl.SSLContext,
    *,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    cert_data: bytes | None = None,
    key_data: bytes | None = None,
) -> None:
    """Load a client certificate and key, each given as a path or as PEM data, into ``ctx``.

    ``ssl`` loads certificates from files only: PEM data is written to a private temporary
    directory (mode 0700, files 0600) and removed as soon as it is loaded.  Calling this
    again replaces the certificate for new connections.

    Args:
        ctx: the TLS client context.
        cert_file: certificate file.
        key_file: key file.
        cert_data: certificate PEM (instead of ``cert_file``).
        key_data: key PEM (instead of ``key_file``).

    Raises:
        ConfigError: the certificate or key cannot be loaded.
    """
    try:
        if cert_data is None and key_data is None:
            ctx.load_cert_chain(str(cert_file), str(key_file))
            return
        with tempfile.TemporaryDirectory(prefix="kube-gateway-") as tmp:

            def materialise(data: bytes | None, path: Path | None, name: str) -> str:
                if data is None:
                    return str(path)
                target = os.path.join(tmp, name)
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                return target

            ctx.load_cert_chain(
                materialise(cert_data, cert_file, "client.crt"),
                materialise(key_data, key_file, "client.key"),
            )
    except (ssl.SSLError, OSError) as exc:
        where = cert_file if cert_data is None else "inline data"
        raise ConfigError(f"cannot load the gateway's client certificate ({where}): {exc}") from exc


def _cluster_info(cfg: UpstreamConfig) -> dict[str, Any]:
    """``spec.cluster`` of ``KUBERNETES_EXEC_INFO`` (the camelCase ``Cluster`` type)."""
    info: dict[str, Any] = {"server": cfg.server}
    ca = cfg.ca_data
    if ca is None and cfg.ca_file is not None:
        try:
            ca = cfg.ca_file.read_bytes()
        except OSError as exc:
            raise ConfigError(f"CA file {cfg.ca_file} cannot be read: {exc.strerror}") from exc
    if ca is not None:
        info["certificateAuthorityData"] = base64.b64encode(ca).decode()
    if cfg.tls_server_name:
        info["tlsServerName"] = cfg.tls_server_name
    if cfg.insecure_skip_tls_verify:
        info["insecureSkipTLSVerify"] = True
    if cfg.exec is not None and cfg.exec.cluster_config is not None:
        info["config"] = json.loads(cfg.exec.cluster_config)
    return info


def gateway_auth(
    cfg: UpstreamConfig, ssl_context: ssl.SSLContext, *, internal: str | None = None
) -> GatewayAuth | None:
    """Set up the gateway's own identity: certificate into ``ssl_context``, token as auth.

    Runs the exec plugin once, now, so that a broken plugin fails at startup.  Logs the
    mode as a warning.

    Args:
        cfg: the upstream configuration.
        ssl_context: the client's TLS context; receives the gateway's certificate.
        internal: the client serves only the gateway's own requests (this names them, for
            the log): no caller's request ever goes through it, so no warning is logged.

    Returns:
        The auth adding the gateway's token, or ``None`` for a certificate-only identity.

    Raises:
        ConfigError: no gateway credential is configured, or it cannot be loaded.
    """
    if not cfg.has_gateway_credential:
        raise ConfigError(
            f"gateway identity was asked for, but {cfg.source} gives the gateway no credential"
        )
    if cfg.has_client_certificate:
        load_client_certificate(
            ssl_context,
            cert_file=cfg.client_cert_file,
            key_file=cfg.client_key_file,
            cert_data=cfg.client_cert_data,
            key_data=cfg.client_key_data,
        )

    plugin = None
    presents_cert = cfg.has_client_certificate
    if cfg.exec is not None and cfg.token is None and cfg.token_file is None:

        def reload_certificate(cred: ExecCredential) -> None:
            if cred.client_cert_data is not None:
                load_client_certificate(
                    ssl_context, cert_data=cred.client_cert_data, key_data=cred.client_key_data
                )

        plugin = ExecCredentialPlugin(
            cfg.exec, cluster_info=_cluster_info(cfg), on_refresh=reload_certificate
        )
        presents_cert = presents_cert or plugin.credential().client_cert_data is not None

    if internal is not None:
        logger.info("%s: with the gateway's own credential (%s)", internal, cfg.source)
        presents_cert = False  # nobody else's token travels on this client
    else:
        logger.warning(
            "GATEWAY IDENTITY MODE: requests without a caller credential reach %s as the "
            "gateway itself (%s); the upstream's RBAC sees the gateway, not the caller",
            cfg.server,
            cfg.source,
        )
    if presents_cert:
        logger.warning(
            "the gateway presents a client certificate: the apiserver authenticates it "
            "before any bearer token, so callers' tokens are ignored upstream in this mode"
        )

    if cfg.token_file is not None:
        return GatewayAuth(token_file=TokenFile(cfg.token_file))
    if cfg.token is not None:
        return GatewayAuth(token=cfg.token)
    if plugin is not None:
        return GatewayAuth(plugin=plugin)
    return None

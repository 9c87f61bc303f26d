"""The upstream configuration record: which Kubernetes API server to call, and how.

This module owns the data only: ``UpstreamConfig`` (server, trust, the gateway's own
credential), ``ExecConfig`` (a declared exec credential plugin), ``ConfigError`` and
``describe`` (the secret-free startup log line).  It reads no file, no environment and
opens no connection, so every other module may import it.

Where the record comes from (flags, in-cluster, kubeconfig) is ``gateway.core.upstream.kubeconfig``;
the HTTP client built from it is ``gateway.core.upstream.client``; the gateway's own credential at
work (token files re-read, exec plugins run) is ``gateway.core.upstream.auth``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ConfigError",
    "ExecConfig",
    "UpstreamConfig",
    "describe",
]


class ConfigError(Exception):
    """The upstream configuration is missing a piece or is invalid.

    Messages name files, contexts and commands, never a token or a key.
    """


@dataclass(frozen=True, slots=True, repr=False)
class ExecConfig:
    """A kubeconfig ``exec`` credential plugin, as declared (the plugin is not run here).

    Attributes:
        command: the executable; a relative path is looked up from ``cwd``.
        api_version: ``client.authentication.k8s.io/v1`` or ``.../v1beta1``.
        args: extra arguments.
        env: extra environment variables, added to the gateway's own environment.
        cwd: the directory of the kubeconfig file that declared the plugin.
        provide_cluster_info: pass the cluster (server, CA...) in ``KUBERNETES_EXEC_INFO``.
        cluster_config: JSON of the cluster's ``client.authentication.k8s.io/exec``
            extension, passed as ``spec.cluster.config`` when ``provide_cluster_info``.
        install_hint: shown when the command cannot be started.
    """

    command: str
    api_version: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    cwd: Path | None = None
    provide_cluster_info: bool = False
    cluster_config: str | None = None
    install_hint: str | None = None

    def __repr__(self) -> str:
        # Arguments and environment values may carry secrets: show their shape only.
        names = [name for name, _ in self.env]
        return (
            f"ExecConfig(command={self.command!r}, api_version={self.api_version!r}, "
            f"args=<{len(self.args)}>, env={names!r}, cwd={self.cwd!r})"
        )


@dataclass(frozen=True, slots=True, repr=False)
class UpstreamConfig:
    """Where the upstream API server is, how to trust it, and the gateway's own credential.

    The gateway's credential (``token``, ``token_file``, ``client_cert_*``, ``exec``) is used
    only in gateway-identity mode; by default every request carries the caller's token.
    At most one of ``token`` and ``token_file`` is set; a certificate and its key come as a
    pair (each as a path or as PEM data).

    Attributes:
        server: base URL, without a trailing slash (``https://10.0.0.1:6443``).
        source: where this came from, for the startup log (``flags``, ``in-cluster``,
            ``kubeconfig /path (context foo)``).
        namespace: the default namespace of the context or service account.
        ca_data: CA bundle as PEM bytes.
        ca_file: CA bundle file.
        insecure_skip_tls_verify: do not verify the server certificate (never the default).
        tls_server_name: name to send as SNI and to verify the certificate against.
        token: the gateway's static bearer token.
        token_file: file holding the gateway's bearer token, re-read on rotation.
        client_cert_file: the gateway's client certificate file.
        client_key_file: the gateway's client key file.
        client_cert_data: the gateway's client certificate as PEM bytes.
        client_key_data: the gateway's client key as PEM bytes.
        exec: an exec credential plugin producing the gateway's token or certificate.
    """

    server: str
    source: str
    namespace: str = "default"
    ca_data: bytes | None = None
    ca_file: Path | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    token: str | None = field(default=None, repr=False)
    token_file: Path | None = None
    client_cert_file: Path | None = None
    client_key_file: Path | None = None
    client_cert_data: bytes | None = field(default=None, repr=False)
    client_key_data: bytes | None = field(default=None, repr=False)
    exec: ExecConfig | None = None

    @property
    def is_tls(self) -> bool:
        """Whether the server URL is ``https``."""
        return self.server.startswith("https://")

    @property
    def has_client_certificate(self) -> bool:
        """Whether a static gateway client certificate is configured."""
        return (self.client_cert_file or self.client_cert_data) is not None

    @property
    def has_gateway_credential(self) -> bool:
        """Whether any gateway credential (token, certificate or plugin) is configured."""
        return (
            self.token is not None
            or self.token_file is not None
            or self.has_client_certificate
            or self.exec is not None
        )

    def __repr__(self) -> str:
        shown = {
            "server": self.server,
            "source": self.source,
            "namespace": self.namespace,
            "ca_file": self.ca_file,
            "insecure_skip_tls_verify": self.insecure_skip_tls_verify,
            "tls_server_name": self.tls_server_name,
            "token_file": self.token_file,
            "client_cert_file": self.client_cert_file,
            "client_key_file": self.client_key_file,
            "exec": self.exec,
        }
        parts = [f"{name}={value!r}" for name, value in shown.items() if value is not None]
        hidden = {
            "ca_data": self.ca_data,
            "token": self.token,
            "client_cert_data": self.client_cert_data,
            "client_key_data": self.client_key_data,
        }
        parts += [f"{name}=<redacted>" for name, value in hidden.items() if value is not None]
        return f"UpstreamConfig({', '.join(parts)})"


def _credential_summary(cfg: UpstreamConfig) -> str:
    parts: list[str] = []
    if cfg.token_file is not None:
        parts.append(f"token file {cfg.token_file}")
    elif cfg.token is not None:
        parts.append("static token")
    if cfg.client_cert_file is not None:
        parts.append(f"client certificate {cfg.client_cert_file}")
    elif cfg.client_cert_data is not None:
        parts.append("inline client certificate")
    if cfg.exec is not None:
        parts.append(f"exec plugin {os.path.basename(cfg.exec.command)}")
    return " + ".join(parts) or "none"


def describe(
    cfg: UpstreamConfig, *, gateway_identity: bool = False, impersonate: bool = False
) -> str:
    """Describe the upstream for the startup log line, without any secret.

    Args:
        cfg: the resolved upstream configuration.
        gateway_identity: whether the client was built in gateway-identity mode.
        impersonate: whether callers are impersonated (``--identity impersonate``).

    Returns:
        One line: server, source, namespace, TLS verification and identity mode.
    """
    if not cfg.is_tls:
        tls = "plain HTTP (no TLS)"
    elif cfg.insecure_skip_tls_verify:
        tls = "TLS NOT VERIFIED (insecure-skip-tls-verify)"
    elif cfg.ca_file is not None:
        tls = f"TLS verified with CA file {cfg.ca_file}"
    elif cfg.ca_data is not None:
        tls = "TLS verified with inline CA data"
    else:
        tls = "TLS verified with the public CA bundle"
    if cfg.is_tls and cfg.tls_server_name:
        tls += f" (server name {cfg.tls_server_name})"
    credential = _credential_summary(cfg)
    if impersonate:
        identity = f"the gateway's own credential ({credential}) impersonating each caller"
    elif gateway_identity:
        identity = f"GATEWAY'S OWN identity for requests without a caller credential ({credential})"
    else:
        identity = f"caller's own credential (gateway credential unused: {credential})"
    return (
        f"upstream {cfg.server} from {cfg.source}; namespace {cfg.namespace}; {tls}; "
        f"identity: {identity}"
    )

"""Resolution of the upstream configuration from flags, the in-cluster service account or
kubeconfig files.

``resolve_upstream`` reads the configuration once, in this order:

1. explicit flags, when a server URL is given;
2. the in-cluster service account (``KUBERNETES_SERVICE_HOST``/``_PORT`` plus the mounted
   ``token`` and ``ca.crt``), unless a kubeconfig path or context was asked for explicitly;
3. kubeconfig: the explicit path, else every file listed in ``KUBECONFIG`` merged the kubectl
   way (the first file to define a name or the current context wins; missing files are
   skipped), else ``$HOME/.kube/config``.

Nothing configured gives ``None`` (the CLI then serves the demo upstream).  The result is a
``gateway.core.upstream.config.UpstreamConfig``; the client is built from it by
``gateway.core.upstream.client``.

Kubeconfig files are parsed, merged and looked up by the official ``kubernetes`` client
(``KubeConfigMerger``, ``KubeConfigLoader``, ``FileOrData``, ``InClusterConfigLoader``),
imported lazily and wrapped so that none of its types leak.  Its higher-level
``load_and_set`` is deliberately not used for kubeconfig: it swallows exec-plugin failures,
reads token files only once, resolves a user's relative paths against the cluster's file and
writes ``*-data`` fields to temporary files that live until interpreter exit.  Here ``*-data``
fields are kept in memory as PEM bytes and nothing is written at resolve time; a client key
given as data only touches disk for the duration of one ``load_cert_chain`` call (see
``gateway.core.upstream.auth.load_client_certificate``), and only in gateway-identity mode.  Exec
plugins are validated here but run only by ``gateway.core.upstream.auth`` (through the library's
``ExecProvider``).
"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import httpx

from gateway.core.upstream.config import ConfigError, ExecConfig, UpstreamConfig

__all__ = [
    "DEFAULT_SERVICE_ACCOUNT_DIR",
    "EXEC_API_VERSIONS",
    "resolve_upstream",
]

logger = logging.getLogger(__name__)

DEFAULT_SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
EXEC_API_VERSIONS: Final = frozenset(
    {"client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"}
)
_EXEC_EXTENSION: Final = "client.authentication.k8s.io/exec"


def resolve_upstream(
    *,
    server: str | None = None,
    token: str | None = None,
    token_file: str | os.PathLike[str] | None = None,
    ca_file: str | os.PathLike[str] | None = None,
    client_cert: str | os.PathLike[str] | None = None,
    client_key: str | os.PathLike[str] | None = None,
    insecure: bool = False,
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    environ: Mapping[str, str] = os.environ,
    service_account_dir: Path = DEFAULT_SERVICE_ACCOUNT_DIR,
    allow_insecure: bool = False,
) -> UpstreamConfig | None:
    """Resolve the upstream API server and the gateway's own credential, once, at startup.

    Order: explicit flags (when ``server`` is given), then the in-cluster service account,
    then kubeconfig.  An explicit ``kubeconfig`` or ``context`` is a choice too: it skips
    in-cluster detection.  Files are checked for readability here; exec plugins are
    validated but not run (they run only when the gateway's identity is used).

    Args:
        server: explicit API server URL; selects the flags source.
        token: the gateway's bearer token (flags source only).
        token_file: file holding the gateway's bearer token (flags source only).
        ca_file: CA bundle to verify the server with (flags source only).
        client_cert: the gateway's client certificate file (flags source only).
        client_key: the gateway's client key file (flags source only).
        insecure: skip TLS verification (flags source only).
        kubeconfig: one kubeconfig file; overrides ``KUBECONFIG`` and ``~/.kube/config``.
        context: kubeconfig context to use instead of the current one.
        environ: the environment to read ``KUBERNETES_SERVICE_*``, ``KUBECONFIG`` and
            ``HOME`` from.
        service_account_dir: where the service account's ``token``, ``ca.crt`` and
            ``namespace`` are mounted.
        allow_insecure: accept a kubeconfig's ``insecure-skip-tls-verify`` and plain
            ``http://`` servers other than loopback (refused otherwise).

    Returns:
        The resolved configuration, or ``None`` only when nothing at all is configured:
        not in a pod, no ``KUBECONFIG``, no ``~/.kube/config``.

    Raises:
        ConfigError: a source was found but is incomplete or invalid (in a pod without a
            service account, ``KUBECONFIG`` naming no existing file, an empty kubeconfig,
            missing context, unreadable file, flags without a server...), or it would turn
            transport security off without ``allow_insecure``.
    """
    cfg: UpstreamConfig | None
    if server is not None:
        cfg = _from_flags(
            server=server,
            token=token,
            token_file=token_file,
            ca_file=ca_file,
            client_cert=client_cert,
            client_key=client_key,
            insecure=insecure,
        )
    elif insecure or any(
        v is not None for v in (token, token_file, ca_file, client_cert, client_key)
    ):
        raise ConfigError(
            "an explicit token, token file, CA file, client certificate or "
            "insecure-skip-tls-verify needs an explicit server URL as well"
        )
    else:
        cfg = None
        if kubeconfig is None and context is None:
            cfg = _from_in_cluster(environ, service_account_dir)
        if cfg is None:
            cfg = _from_kubeconfig(kubeconfig, context, environ)
    if cfg is not None and not allow_insecure:
        _refuse_insecure(cfg, explicit_insecure=insecure)
    return cfg


def _refuse_insecure(cfg: UpstreamConfig, *, explicit_insecure: bool) -> None:
    """Transport security is never turned off by a file alone: every caller's token would
    travel unprotected."""
    if cfg.insecure_skip_tls_verify and not explicit_insecure:
        raise ConfigError(
            f"{cfg.source} turns TLS verification off (insecure-skip-tls-verify): every "
            "caller's token would go to a server nobody verified; give the cluster's CA, or "
            "pass --allow-insecure-upstream to accept it"
        )
    url = httpx.URL(cfg.server)
    if url.scheme == "http" and url.host not in _LOOPBACK:
        raise ConfigError(
            f"{cfg.source} names a plain http:// server ({url.host}): every caller's token "
            "would travel unencrypted; use https, or pass --allow-insecure-upstream to accept it"
        )


_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _kubernetes(module: str) -> Any:
    # The kubernetes package is untyped and takes ~0.5 s to import: import it lazily, only
    # when in-cluster or kubeconfig resolution needs it, and keep what it returns as Any.
    return importlib.import_module(f"kubernetes.{module}")


def _check_server(url: str, origin: str) -> str:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL:
        raise ConfigError(f"{origin}: the server URL is not a valid URL") from None
    if parsed.userinfo:
        raise ConfigError(f"{origin}: the server URL must not contain credentials")
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"{origin}: the server URL {url!r} is not an http(s) URL with a host")
    return url.rstrip("/")


def _readable_file(path: Path, what: str) -> Path:
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be read: {exc.strerror}") from exc
    return path


def _check_token_file(path: Path, what: str) -> Path:
    _readable_file(path, what)
    if not path.read_text(encoding="utf-8").strip():
        raise ConfigError(f"{what} {path} is empty")
    return path


def _from_flags(
    *,
    server: str,
    token: str | None,
    token_file: str | os.PathLike[str] | None,
    ca_file: str | os.PathLike[str] | None,
    client_cert: str | os.PathLike[str] | None,
    client_key: str | os.PathLike[str] | None,
    insecure: bool,
) -> UpstreamConfig:
    url = _check_server(server, "flags")
    if token is not None and token_file is not None:
        raise ConfigError("flags: give a token or a token file, not both")
    if token is not None and not token.strip():
        raise ConfigError("flags: the token is empty")
    if (client_cert is None) != (client_key is None):
        raise ConfigError("flags: a client certificate needs its key, and a key its certificate")
    if insecure and ca_file is not None:
        raise ConfigError("flags: a CA file and insecure-skip-tls-verify exclude each other")

    def path(value: str | os.PathLike[str] | None, what: str) -> Path | None:
        return None if value is None else _readable_file(Path(value).absolute(), what)

    return UpstreamConfig(
        server=url,
        source="flags",
        ca_file=path(ca_file, "CA file"),
        insecure_skip_tls_verify=insecure,
        token=token.strip() if token is not None else None,
        token_file=(
            None
            if token_file is None
            else _check_token_file(Path(token_file).absolute(), "token file")
        ),
        client_cert_file=path(client_cert, "client certificate"),
        client_key_file=path(client_key, "client key"),
    )


def _from_in_cluster(environ: Mapping[str, str], sa_dir: Path) -> UpstreamConfig | None:
    token_path = sa_dir / "token"
    if not (environ.get("KUBERNETES_SERVICE_HOST") and environ.get("KUBERNETES_SERVICE_PORT")):
        return None
    if not token_path.is_file():
        # In a pod (the service variables say so) without a mounted service account: the
        # gateway must not quietly serve demo data there.
        raise ConfigError(
            "running in a pod (KUBERNETES_SERVICE_HOST is set) but no service account is "
            f"mounted at {sa_dir}: mount one (automountServiceAccountToken: true; the gateway "
            "needs no rights of its own) or pass --server and --ca-file"
        )

    ConfigException = _kubernetes("config.config_exception").ConfigException
    loader = _kubernetes("config.incluster_config").InClusterConfigLoader(
        token_filename=str(token_path),
        cert_filename=str(sa_dir / "ca.crt"),
        try_refresh_token=False,  # we re-read the token file ourselves (auth.TokenFile)
        environ=environ,
    )
    target = _kubernetes("client").Configuration()
    try:
        loader.load_and_set(target)
    except ConfigException as exc:
        raise ConfigError(f"in-cluster service account ({sa_dir}): {exc}") from exc
    except OSError as exc:
        raise ConfigError(
            f"in-cluster service account: {exc.filename} cannot be read: {exc.strerror}"
        ) from exc

    namespace = "default"
    ns_path = sa_dir / "namespace"
    if ns_path.is_file():
        try:
            namespace = ns_path.read_text(encoding="utf-8").strip() or "default"
        except OSError as exc:
            raise ConfigError(f"in-cluster: {ns_path} cannot be read: {exc.strerror}") from exc

    return UpstreamConfig(
        server=_check_server(str(target.host), "in-cluster"),
        source="in-cluster",
        namespace=namespace,
        ca_file=Path(str(target.ssl_ca_cert)),
        token_file=token_path,
    )


def _expand_home(raw: str, environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME")
    if home and (raw == "~" or raw.startswith("~/")):
        raw = home + raw[1:]
    return Path(raw).absolute()


def _kubeconfig_paths(
    kubeconfig: str | os.PathLike[str] | None, environ: Mapping[str, str]
) -> tuple[list[Path], bool]:
    """Return the kubeconfig files to merge, and whether they were asked for explicitly."""
    if kubeconfig is not None:
        path = _expand_home(os.fspath(kubeconfig), environ)
        if not path.is_file():
            raise ConfigError(f"kubeconfig {path} does not exist or is not a file")
        return [path], True
    listed = environ.get("KUBECONFIG", "")
    if listed:
        paths: list[Path] = []
        for raw in listed.split(os.pathsep):
            if raw:
                path = _expand_home(raw, environ)
                # kubectl skips listed files that do not exist.
                if path.is_file() and path not in paths:
                    paths.append(path)
        if not paths:
            raise ConfigError(
                f"KUBECONFIG is set to {listed!r}, but none of the files it lists exists: "
                "point it at a kubeconfig, unset it (the default is ~/.kube/config), or "
                "pass --demo for the demo upstream"
            )
        return paths, False
    home = environ.get("HOME")
    if home:
        default = Path(home) / ".kube" / "config"
        if default.is_file():
            return [default], False
    return [], False


def _yaml_problem(exc: Exception) -> str:
    # A YAML error's text quotes the offending line, which may hold a token: keep the mark.
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return f"not valid YAML (line {mark.line + 1}, column {mark.column + 1})"
    return "not valid YAML"


def _from_kubeconfig(
    kubeconfig: str | os.PathLike[str] | None,
    context: str | None,
    environ: Mapping[str, str],
) -> UpstreamConfig | None:
    paths, explicit = _kubeconfig_paths(kubeconfig, environ)
    if not paths:
        if context is not None:
            raise ConfigError(f"context {context!r} was asked for, but no kubeconfig was found")
        return None

    import yaml

    ConfigException = _kubernetes("config.config_exception").ConfigException
    kube_config = _kubernetes("config.kube_config")

    # Files are fed one by one (rather than as one KUBECONFIG string) so that a path may
    # contain the separator and so that each error names its file.
    merger = kube_config.KubeConfigMerger("")
    loaded: list[Path] = []
    for path in paths:
        try:
            merger.load_config(str(path))
        except ConfigException:
            logger.info("kubeconfig %s is empty; skipped", path)  # the only raise in there
            continue
        except yaml.YAMLError as exc:
            raise ConfigError(f"kubeconfig {path} is {_yaml_problem(exc)}") from None
        except OSError as exc:
            raise ConfigError(f"kubeconfig {path} cannot be read: {exc.strerror}") from exc
        except (AttributeError, TypeError, KeyError) as exc:
            raise ConfigError(
                f"kubeconfig {path} is not a kubeconfig (bad {type(exc).__name__})"
            ) from exc
        merger.paths.append(str(path))
        loaded.append(path)

    where = "kubeconfig " + os.pathsep.join(str(p) for p in paths)
    root = merger.config
    if root is None:
        raise ConfigError(
            f"{where} is empty: give it a cluster, a user and a current context, or pass "
            "--demo for the demo upstream"
        )

    # The merger names each entry after its whole dict, and the library's messages quote
    # those names: rename them so that no message can carry a token or a key.
    for kind in ("clusters", "contexts", "users"):
        for node in root.value[kind]:
            if not isinstance(node.value, dict) or "name" not in node.value:
                raise ConfigError(f"{where}: every entry of {kind} needs a name")
            node.name = f"{node.path}: {kind}[name={node.value['name']!r}]"
    context_names = [str(node.value["name"]) for node in root.value["contexts"]]
    name = context
    if name is None:
        # kubectl: the first file that sets current-context wins (the library takes the last).
        name = next(
            (
                str(current)
                for p in loaded
                if (current := merger.config_files[str(p)].get("current-context"))
            ),
            None,
        )
        if name is None:
            if not context_names and not explicit:
                return None
            raise ConfigError(f"{where} has no current-context; choose a context explicitly")
    if name not in context_names:
        available = ", ".join(sorted(context_names)) or "none"
        raise ConfigError(f"{where}: context {name!r} not found (available: {available})")

    where = f"{where} (context {name})"
    try:
        return _from_kubeconfig_context(root, name, where, kube_config.KubeConfigLoader)
    except ConfigException as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    except (AttributeError, TypeError, KeyError, ValueError) as exc:
        raise ConfigError(f"{where}: malformed entry (bad {type(exc).__name__})") from exc


def _node_dir(node: Any) -> str:
    path = node.path
    return os.path.dirname(os.path.abspath(path)) if path else os.getcwd()


def _file_or_data(node: Any, key: str, what: str) -> tuple[Path | None, bytes | None]:
    """Read ``key`` / ``key-data`` of a kubeconfig node: a path, or decoded data in memory."""
    FileOrData = _kubernetes("config.kube_config").FileOrData
    # Data wins over a file (as in the library and kubectl); empty or null values are unset.
    # Only ever .as_data() for -data fields: .as_file() would write them to a temp file.
    data = node.safe_get(f"{key}-data")
    if data:
        encoded = FileOrData({f"{key}-data": data}, key).as_data()
        try:
            # Like Go's decoder, tolerate line breaks in wrapped base64.
            return None, base64.b64decode("".join(str(encoded).split()), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{what}: {key}-data is not valid base64") from None
    file = node.safe_get(key)
    if file:
        # Relative paths are relative to the kubeconfig file that holds this entry.
        holder = FileOrData({key: file}, key, file_base_path=_node_dir(node))
        return _readable_file(Path(holder.as_file()), f"{what}: {key}"), None
    return None, None


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value)


def _from_kubeconfig_context(root: Any, name: str, where: str, loader_type: Any) -> UpstreamConfig:
    # The library's loader selects the context, its cluster and its user, and validates
    # that they exist; we read the selected nodes (which remember their file) ourselves.
    loader = loader_type(config_dict=root, active_context=name, config_base_path=None)
    body = loader.current_context.get("context") or {}
    cluster = root["clusters"].get_with_name(body["cluster"])["cluster"]
    namespace = str(body.get("namespace") or "default")

    server = _check_server(str(cluster["server"]), where)
    ca_file, ca_data = _file_or_data(cluster, "certificate-authority", where)
    insecure = _as_bool(cluster.safe_get("insecure-skip-tls-verify"))
    if insecure and (ca_file or ca_data):
        raise ConfigError(
            f"{where}: certificate-authority and insecure-skip-tls-verify exclude each other"
        )
    tls_server_name = cluster.safe_get("tls-server-name") or None
    if cluster.safe_get("proxy-url"):
        logger.warning("%s: proxy-url is not supported and is ignored", where)

    user = None
    user_name = body.get("user")
    if user_name:
        entry = root["users"].get_with_name(user_name, safe=True) if "users" in root else None
        if entry is None:
            logger.warning("%s: user %r not found; no gateway credential", where, user_name)
        else:
            user = entry["user"] if entry.safe_get("user") else None

    token: str | None = None
    token_file: Path | None = None
    cert_file = key_file = None
    cert_data = key_data = None
    exec_config: ExecConfig | None = None
    if user is not None:
        token = str(user.safe_get("token") or "").strip() or None
        if token is None:
            # FileOrData resolves tokenFile against the user's own kubeconfig file.
            token_file, _ = _file_or_data(user, "tokenFile", where)
            if token_file is not None:
                _check_token_file(token_file, f"{where}: tokenFile")
        cert_file, cert_data = _file_or_data(user, "client-certificate", where)
        key_file, key_data = _file_or_data(user, "client-key", where)
        if (cert_file or cert_data) and not (key_file or key_data):
            raise ConfigError(f"{where}: client-certificate given without client-key")
        if (key_file or key_data) and not (cert_file or cert_data):
            raise ConfigError(f"{where}: client-key given without client-certificate")
        if user.safe_get("exec"):
            exec_config = _exec_config(user["exec"], cluster, where)
        if user.safe_get("auth-provider"):
            logger.warning("%s: auth-provider is not supported; use an exec plugin", where)
        if user.safe_get("username"):
            logger.warning("%s: basic authentication is not supported and is ignored", where)

    return UpstreamConfig(
        server=server,
        source=where,
        namespace=namespace,
        ca_data=ca_data,
        ca_file=ca_file,
        insecure_skip_tls_verify=insecure,
        tls_server_name=str(tls_server_name) if tls_server_name else None,
        token=token,
        token_file=token_file,
        client_cert_file=cert_file,
        client_key_file=key_file,
        client_cert_data=cert_data,
        client_key_data=key_data,
        exec=exec_config,
    )


def _exec_config(node: Any, cluster: Any, where: str) -> ExecConfig:
    command = node.safe_get("command")
    api_version = node.safe_get("apiVersion")
    if not command:
        raise ConfigError(f"{where}: exec plugin without a command")
    if api_version not in EXEC_API_VERSIONS:
        raise ConfigError(
            f"{where}: exec apiVersion {api_version!r} is not supported "
            f"(use one of {', '.join(sorted(EXEC_API_VERSIONS))})"
        )
    args = node.safe_get("args") or []
    env = node.safe_get("env") or []
    if not isinstance(args, list) or not isinstance(env, list):
        raise ConfigError(f"{where}: exec args and env must be lists")
    try:
        env_pairs = tuple((str(item["name"]), str(item["value"])) for item in env)
    except (KeyError, TypeError):
        raise ConfigError(f"{where}: exec env entries need a name and a value") from None
    extension = None
    for item in cluster.safe_get("extensions") or []:
        if isinstance(item, dict) and item.get("name") == _EXEC_EXTENSION:
            extension = json.dumps(item.get("extension"))
    return ExecConfig(
        command=str(command),
        api_version=str(api_version),
        args=tuple(str(a) for a in args),
        env=env_pairs,
        cwd=Path(_node_dir(node)),
        provide_cluster_info=_as_bool(node.safe_get("provideClusterInfo")),
        cluster_config=extension,
        install_hint=str(node.safe_get("installHint") or "") or None,
    )

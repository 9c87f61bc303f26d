"""Upstream resolution (``gateway.core.upstream.kubeconfig``): the order of flags, in-cluster and
kubeconfig, kubeconfig features, and what is refused.

Everything runs for real: kubeconfig files and service accounts on disk, read through the
official ``kubernetes`` package.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.core.upstream.auth import TokenFile
from gateway.core.upstream.config import ConfigError
from gateway.core.upstream.kubeconfig import resolve_upstream
from tests.core.upstream.upstream_fixtures import (
    FIXTURES,
    NO_SA,
    Pki,
    b64,
    exec_user,
    make_service_account,
    pki,
    resolve,
    write_kubeconfig,
)

__all__ = ["pki"]  # fixtures


# --------------------------------------------------------------------------- resolution order


def test_nothing_configured_gives_none(tmp_path: Path) -> None:
    assert resolve_upstream(environ={"HOME": str(tmp_path)}, service_account_dir=NO_SA) is None
    assert resolve_upstream(environ={}, service_account_dir=tmp_path) is None


def test_home_kube_config_is_the_default(tmp_path: Path) -> None:
    (tmp_path / ".kube").mkdir()
    shutil.copy(FIXTURES / "token.yaml", tmp_path / ".kube" / "config")
    cfg = resolve(environ={"HOME": str(tmp_path)})
    assert cfg.server == "https://dev.example.test:6443"
    assert cfg.source == f"kubeconfig {tmp_path / '.kube' / 'config'} (context dev)"


def test_in_cluster_wins_over_kubeconfig(tmp_path: Path, pki: Pki) -> None:
    sa = make_service_account(tmp_path / "sa", pki.ca_pem)
    environ = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "KUBECONFIG": str(FIXTURES / "token.yaml"),
    }
    cfg = resolve(environ=environ, service_account_dir=sa)
    assert cfg.source == "in-cluster"
    assert cfg.server == "https://10.96.0.1:443"
    assert cfg.namespace == "gateway-ns"
    assert cfg.token_file == sa / "token"
    assert cfg.token is None
    assert cfg.ca_file == sa / "ca.crt"

    # IPv6 service hosts are bracketed.
    environ["KUBERNETES_SERVICE_HOST"] = "fd00::1"
    assert resolve(environ=environ, service_account_dir=sa).server == "https://[fd00::1]:443"

    # An explicit kubeconfig or context is a choice that skips in-cluster detection.
    chosen = resolve(environ=environ, service_account_dir=sa, kubeconfig=FIXTURES / "token.yaml")
    assert chosen.server == "https://dev.example.test:6443"


def test_in_cluster_without_a_service_account_or_ca_fails_never_falls_back(
    tmp_path: Path, pki: Pki
) -> None:
    sa = make_service_account(tmp_path / "sa", pki.ca_pem)
    environ = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "KUBECONFIG": str(FIXTURES / "token.yaml"),
    }
    (sa / "ca.crt").unlink()
    with pytest.raises(ConfigError, match="in-cluster"):
        resolve(environ=environ, service_account_dir=sa)
    (sa / "token").unlink()  # automountServiceAccountToken: false
    with pytest.raises(ConfigError, match="running in a pod") as caught:
        resolve(environ=environ, service_account_dir=sa)
    assert "--server" in str(caught.value)  # says what to do
    # an explicit kubeconfig is a choice: it is used
    chosen = resolve(environ=environ, service_account_dir=sa, kubeconfig=FIXTURES / "token.yaml")
    assert chosen.source.startswith("kubeconfig ")


def test_flags_win_over_in_cluster_and_kubeconfig(tmp_path: Path, pki: Pki) -> None:
    sa = make_service_account(tmp_path / "sa", pki.ca_pem)
    environ = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "KUBECONFIG": str(FIXTURES / "token.yaml"),
    }
    cfg = resolve(
        server="https://flags.example.test:6443/",
        token="flag-token",
        ca_file=pki.path("ca.crt"),
        client_cert=pki.path("client.crt"),
        client_key=pki.path("client.key"),
        environ=environ,
        service_account_dir=sa,
    )
    assert cfg.source == "flags"
    assert cfg.server == "https://flags.example.test:6443"
    assert cfg.token == "flag-token"
    assert cfg.ca_file == pki.path("ca.crt")
    assert cfg.client_cert_file == pki.path("client.crt")
    assert cfg.namespace == "default"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"token": "t"}, "needs an explicit server"),
        ({"insecure": True}, "needs an explicit server"),
        ({"server": "ftp://x"}, "not an http"),
        ({"server": "https://user:pw@x"}, "must not contain credentials"),
        ({"server": "https://x", "token": "t", "token_file": "/t"}, "not both"),
        ({"server": "https://x", "client_cert": "/c"}, "needs its key"),
        ({"server": "https://x", "token_file": "/nonexistent/token"}, "cannot be read"),
        ({"server": "https://x", "ca_file": "/c", "insecure": True}, "exclude each other"),
    ],
)
def test_flag_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        resolve(**kwargs)
    assert "pw" not in str(caught.value)


# --------------------------------------------------------------------------- kubeconfig


def test_token_user() -> None:
    cfg = resolve(kubeconfig=FIXTURES / "token.yaml")
    assert cfg.server == "https://dev.example.test:6443"  # trailing slash dropped
    assert cfg.token == "fixture-static-token-1234"
    assert cfg.namespace == "team-a"
    assert cfg.ca_data == b"-----BEGIN CERTIFICATE-----\nfixture\n-----END CERTIFICATE-----\n"
    assert cfg.source == f"kubeconfig {FIXTURES / 'token.yaml'} (context dev)"


def test_token_file_user_is_relative_to_its_kubeconfig() -> None:
    with pytest.raises(ConfigError, match="insecure-skip-tls-verify"):
        resolve(kubeconfig=FIXTURES / "token-file.yaml")  # the fixture turns TLS off
    cfg = resolve(kubeconfig=FIXTURES / "token-file.yaml", allow_insecure=True)
    assert cfg.token is None
    assert cfg.token_file == FIXTURES / "tokens" / "gateway.token"
    assert cfg.insecure_skip_tls_verify is True
    assert cfg.tls_server_name == "kubernetes.default.svc"
    assert TokenFile(cfg.token_file).read() == "fixture-file-token-5678"


def test_client_certificate_files_relative_to_kubeconfig(tmp_path: Path, pki: Pki) -> None:
    shutil.copytree(pki.dir, tmp_path / "pki")
    shutil.copy(FIXTURES / "client-cert-files.yaml", tmp_path / "config")
    cfg = resolve(kubeconfig=tmp_path / "config")
    assert cfg.ca_file == tmp_path / "pki" / "ca.crt"
    assert cfg.client_cert_file == tmp_path / "pki" / "client.crt"
    assert cfg.client_key_file == tmp_path / "pki" / "client.key"
    assert cfg.client_cert_data is None

    (tmp_path / "pki" / "client.key").unlink()
    with pytest.raises(ConfigError, match=r"client\.key"):
        resolve(kubeconfig=tmp_path / "config")


def test_client_certificate_data_stays_in_memory(tmp_path: Path, pki: Pki) -> None:
    from kubernetes.config import kube_config

    before = dict(kube_config._temp_files)
    path = write_kubeconfig(
        tmp_path / "config",
        server="https://127.0.0.1:1",
        cluster={"certificate-authority-data": b64(pki.ca_pem)},
        user={
            "client-certificate-data": b64(pki.client_cert_pem),
            "client-key-data": b64(pki.client_key_pem),
        },
    )
    cfg = resolve(kubeconfig=path)
    assert cfg.ca_data == pki.ca_pem
    assert cfg.client_cert_data == pki.client_cert_pem
    assert cfg.client_key_data == pki.client_key_pem
    assert cfg.client_cert_file is None
    # The library's loader would have written these to temp files; we did not.
    assert kube_config._temp_files == before


def test_current_and_named_context() -> None:
    current = resolve(kubeconfig=FIXTURES / "multi-context.yaml")
    assert (current.server, current.token, current.namespace) == (
        "https://prod.example.test:6443",
        "fixture-prod-token",
        "prod-ns",
    )
    named = resolve(kubeconfig=FIXTURES / "multi-context.yaml", context="staging")
    assert (named.server, named.token, named.namespace) == (
        "https://staging.example.test:6443",
        "fixture-staging-token",
        "default",
    )
    assert named.source.endswith("(context staging)")


def test_missing_context_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"context 'nope' not found \(available: prod, staging\)"):
        resolve(kubeconfig=FIXTURES / "multi-context.yaml", context="nope")
    with pytest.raises(ConfigError, match="no kubeconfig was found"):
        resolve(context="prod")
    no_current = tmp_path / "config"
    doc = yaml.safe_load((FIXTURES / "multi-context.yaml").read_text())
    del doc["current-context"]
    no_current.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="no current-context"):
        resolve(kubeconfig=no_current)


def test_kubeconfig_env_merges_files_first_wins(tmp_path: Path) -> None:
    (tmp_path / "empty.yaml").write_text("")  # kubectl treats an empty file as no config
    files = [
        tmp_path / "empty.yaml",
        FIXTURES / "merge-a.yaml",
        tmp_path / "missing.yaml",  # listed files that do not exist are skipped
        FIXTURES / "merge-b.yaml",
    ]
    listed = os.pathsep.join(str(f) for f in files)
    cfg = resolve(environ={"KUBECONFIG": listed})
    # current-context and the "shared" cluster come from the first file, the user from the second.
    assert cfg.server == "https://a.example.test"
    assert cfg.token == "fixture-merged-token"
    assert "(context from-a)" in cfg.source
    other = resolve(environ={"KUBECONFIG": listed}, context="from-b")
    assert other.server == "https://only-b.example.test"

    with pytest.raises(ConfigError, match="none of the files it lists exists"):
        resolve_upstream(environ={"KUBECONFIG": str(tmp_path / "none")})
    with pytest.raises(ConfigError, match="is empty"):
        resolve_upstream(environ={"KUBECONFIG": str(tmp_path / "empty.yaml")})


def test_kubeconfig_file_errors_never_leak_secrets(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        resolve(kubeconfig=tmp_path / "absent")
    broken = tmp_path / "broken"
    broken.write_text('users:\n- name: u\n  user:\n    token: "leaky-secret\n  [oops: {\n')
    with pytest.raises(ConfigError, match="not valid YAML") as caught:
        resolve(kubeconfig=broken)
    assert "leaky-secret" not in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__context__ is not None
    missing_file = write_kubeconfig(
        tmp_path / "config", server="https://x", user={"tokenFile": "nope.token"}
    )
    with pytest.raises(ConfigError, match=r"nope\.token"):
        resolve(kubeconfig=missing_file)
    # The library names entries after their whole content; our messages must not show it.
    no_server = write_kubeconfig(
        tmp_path / "config",
        server="https://x",
        cluster={"certificate-authority-data": "U0VDUkVUQ0E="},
        user={"token": "leaky-secret"},
    )
    doc = yaml.safe_load(no_server.read_text())
    del doc["clusters"][0]["cluster"]["server"]
    no_server.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="server") as caught:
        resolve(kubeconfig=no_server)
    assert "U0VDUkVUQ0E=" not in str(caught.value)
    assert "leaky-secret" not in str(caught.value)


def test_exec_spec_is_validated_not_run(tmp_path: Path) -> None:
    user = exec_user(tmp_path, "token")
    path = write_kubeconfig(tmp_path / "config", server="https://x", user=user)
    cfg = resolve(kubeconfig=path)
    assert cfg.exec is not None
    assert cfg.exec.api_version == "client.authentication.k8s.io/v1"
    assert cfg.exec.args[1:] == ("token", str(tmp_path / "runs"))
    assert cfg.exec.env == (("EXEC_PREFIX", "p"),)
    assert cfg.exec.cwd == tmp_path
    assert not (tmp_path / "runs").exists()

    user["exec"]["apiVersion"] = "client.authentication.k8s.io/v1alpha1"
    write_kubeconfig(path, server="https://x", user=user)
    with pytest.raises(ConfigError, match="v1alpha1"):
        resolve(kubeconfig=path)


# --------------------------------------------------------------------------- transport security


def test_plain_http_needs_a_flag_beyond_loopback(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "c", server="http://cluster.example.test:8080")
    with pytest.raises(ConfigError, match="plain http"):
        resolve(kubeconfig=path)
    with pytest.raises(ConfigError, match="plain http"):
        resolve(server="http://10.1.2.3:8080")
    assert resolve(kubeconfig=path, allow_insecure=True).server.startswith("http://")
    assert resolve(server="http://127.0.0.1:8080").server == "http://127.0.0.1:8080"

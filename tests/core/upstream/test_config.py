"""The upstream configuration record (``gateway.core.upstream.config``): what it shows and what it
never shows.
"""

from __future__ import annotations

from pathlib import Path

from gateway.core.upstream.auth import GatewayAuth
from gateway.core.upstream.config import describe
from tests.core.upstream.upstream_fixtures import (
    Pki,
    b64,
    exec_user,
    pki,
    resolve,
    write_kubeconfig,
)

__all__ = ["pki"]  # fixtures


def test_repr_and_describe_never_show_secrets(tmp_path: Path, pki: Pki) -> None:
    user = exec_user(tmp_path, "token")
    user["exec"]["env"].append({"name": "SECRET_ENV", "value": "env-secret-value"})
    user.update(
        token="very-secret-token",
        **{
            "client-certificate-data": b64(pki.client_cert_pem),
            "client-key-data": b64(pki.client_key_pem),
        },
    )
    cfg = resolve(kubeconfig=write_kubeconfig(tmp_path / "c", server="https://x", user=user))
    key_marker = pki.client_key_pem.decode().splitlines()[1]
    for text in (
        repr(cfg),
        str(cfg),
        describe(cfg),
        describe(cfg, gateway_identity=True),
        repr(GatewayAuth(token="very-secret-token")),
    ):
        assert "very-secret-token" not in text
        assert "env-secret-value" not in text
        assert key_marker not in text
    assert "token=<redacted>" in repr(cfg)
    assert "SECRET_ENV" in repr(cfg)
    assert "identity: caller's own credential" in describe(cfg)
    assert "GATEWAY'S OWN identity" in describe(cfg, gateway_identity=True)
    assert "TLS verified with the public CA bundle" in describe(cfg)

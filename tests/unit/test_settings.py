from __future__ import annotations

from gateway.settings import Settings, load


def test_flags_win_over_env_which_wins_over_defaults() -> None:
    env = {
        "KUBE_GATEWAY_HTTP_PORT": "9000",
        "KUBE_GATEWAY_GRPC_PORT": "9001",
        "KUBE_GATEWAY_DEMO": "true",
    }
    s = load(["--http-port", "7000"], env)
    assert (s.http_port, s.grpc_port, s.demo) == (7000, 9001, True)
    assert load([], {}) == Settings()
    assert load([], {"KUBE_GATEWAY_DEMO": "0"}).demo is False

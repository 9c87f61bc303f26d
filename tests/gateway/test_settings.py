from __future__ import annotations

import re
from dataclasses import fields

import pytest

from gateway.graphql.engine.limits import Limits
from gateway.grpc.server import GrpcOptions
from gateway.runtime import grpc_options
from gateway.settings import ClusterSpec, Settings, cluster_specs, load


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


def test_grpc_server_options_are_flags_and_env_vars() -> None:
    s = load(
        [
            "--grpc-max-message-bytes",
            "1048576",
            "--no-grpc-gzip",
            "--grpc-keepalive-seconds",
            "2.5",
        ],
        {
            "KUBE_GATEWAY_GRPC_MAX_MESSAGE_BYTES": "99",  # the flag wins
            "KUBE_GATEWAY_GRPC_KEEPALIVE_TIMEOUT_SECONDS": "4",
            "KUBE_GATEWAY_GRPC_MIN_CLIENT_PING_SECONDS": "0.5",
        },
    )
    assert grpc_options(s) == GrpcOptions(
        max_message_bytes=1 << 20,
        gzip=False,
        keepalive_seconds=2.5,
        keepalive_timeout_seconds=4.0,
        min_client_ping_seconds=0.5,
    )
    assert load(["--grpc-gzip"], {"KUBE_GATEWAY_GRPC_GZIP": "false"}).grpc_gzip is True
    assert load([], {"KUBE_GATEWAY_GRPC_GZIP": "off"}).grpc_gzip is False
    # the defaults of `serve` are the server's own defaults
    assert grpc_options(load([], {})) == GrpcOptions()


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--grpc-max-message-bytes", "0"], {}, "--grpc-max-message-bytes"),
        ([], {"KUBE_GATEWAY_GRPC_KEEPALIVE_SECONDS": "-1"}, "KUBE_GATEWAY_GRPC_KEEPALIVE_SECONDS"),
        ([], {"KUBE_GATEWAY_GRPC_KEEPALIVE_SECONDS": "nan"}, "must be greater than 0"),
        ([], {"KUBE_GATEWAY_GRPC_KEEPALIVE_SECONDS": "soon"}, "must be a number, got 'soon'"),
        ([], {"KUBE_GATEWAY_GRPC_MAX_MESSAGE_BYTES": "1.5"}, "must be an integer"),
    ],
)
def test_bad_grpc_server_options_are_refused(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(SystemExit) as refused:
        load(argv, env)
    assert message in str(refused.value)


def test_every_setting_has_help_naming_its_env_var(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        load(["--help"], {})
    shown = " ".join(capsys.readouterr().out.split())
    for f in fields(Settings):
        assert "--" + f.name.replace("_", "-") in shown
        assert "KUBE_GATEWAY_" + f.name.upper() in shown


def test_the_watch_queue_is_a_setting_of_its_own() -> None:
    # Its default is the queue every subscriber had when it was borrowed from GraphQL's limits.
    assert load([], {}).watch_max_queue == Limits().max_queue == 1024
    assert load(["--watch-max-queue", "8"], {}).watch_max_queue == 8
    assert load([], {"KUBE_GATEWAY_WATCH_MAX_QUEUE": "16"}).watch_max_queue == 16
    with pytest.raises(SystemExit, match="--watch-max-queue"):
        load(["--watch-max-queue", "0"], {})


def test_clusters_are_flags_repeated_or_one_comma_separated_env_var() -> None:
    flags = load(["--cluster", "a=/k/a#ctx", "--cluster", "b=/k/b"], {})
    env = load([], {"KUBE_GATEWAY_CLUSTER": "a=/k/a#ctx, b=/k/b"})
    expected = [ClusterSpec("a", "/k/a", "ctx"), ClusterSpec("b", "/k/b")]
    assert cluster_specs(flags) == cluster_specs(env) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("Prod=/k", "'Prod' is not a valid cluster name"),
        ("default=/k", "the name 'default' is the single upstream's"),
        ("a", "expected NAME=KUBECONFIG[#CONTEXT]"),
        ("a=/k,a=/j", "--cluster 'a' is given twice"),
    ],
)
def test_an_invalid_cluster_is_refused_with_why(value: str, message: str) -> None:
    with pytest.raises(SystemExit, match=re.escape(message)):
        load([], {"KUBE_GATEWAY_CLUSTER": value})

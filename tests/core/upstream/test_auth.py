"""The gateway's own credential (``gateway.core.upstream.auth``): exec credential plugins declared
in
real kubeconfig files and run as subprocesses, and token files rotated on disk.
"""

from __future__ import annotations

import asyncio
import datetime
import sys
from pathlib import Path

import pytest

from gateway.core.upstream.auth import ExecCredentialPlugin, TokenFile
from gateway.core.upstream.config import ConfigError
from tests.core.upstream.upstream_fixtures import (
    FUTURE,
    PAST,
    PLUGIN,
    exec_user,
    resolve,
    write_kubeconfig,
)

# --------------------------------------------------------------------------- exec plugins


@pytest.mark.parametrize(
    "api_version", ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"]
)
def test_exec_plugin_token_with_args_and_env(tmp_path: Path, api_version: str) -> None:
    user = exec_user(tmp_path, "token", api_version=api_version)
    cfg = resolve(kubeconfig=write_kubeconfig(tmp_path / "c", server="https://x", user=user))
    assert cfg.exec is not None
    plugin = ExecCredentialPlugin(cfg.exec)
    cred = plugin.credential()
    assert cred.token == "exec-p-1"  # mode from args, prefix from env
    assert cred.expires_at is None
    assert plugin.credential().token == "exec-p-1"  # no expiry: cached
    assert plugin.runs == 1
    assert "exec-p-1" not in repr(cred)


def test_exec_plugin_relative_command_runs_from_kubeconfig_dir(tmp_path: Path) -> None:
    script = tmp_path / "bin" / "plugin"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\n{PLUGIN}")
    script.chmod(0o755)
    user = exec_user(tmp_path, "token")
    user["exec"].update(command="./bin/plugin", args=["token", "runs"])
    cfg = resolve(kubeconfig=write_kubeconfig(tmp_path / "c", server="https://x", user=user))
    assert cfg.exec is not None
    assert ExecCredentialPlugin(cfg.exec).credential().token == "exec-p-1"
    assert (tmp_path / "runs").read_text() == "1"


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("fail", "returned 3. plugin exploded"),
        ("garbage", "failed to decode"),
        ("wrong-version", "does not match"),
        ("empty", "neither a token nor"),
    ],
)
def test_exec_plugin_failures(tmp_path: Path, mode: str, message: str) -> None:
    user = exec_user(tmp_path, mode)
    cfg = resolve(kubeconfig=write_kubeconfig(tmp_path / "c", server="https://x", user=user))
    assert cfg.exec is not None
    with pytest.raises(ConfigError, match=message):
        ExecCredentialPlugin(cfg.exec).credential()


def test_exec_plugin_missing_command(tmp_path: Path) -> None:
    user = exec_user(tmp_path, "token")
    user["exec"].update(command=str(tmp_path / "absent"), installHint="install absent first")
    cfg = resolve(kubeconfig=write_kubeconfig(tmp_path / "c", server="https://x", user=user))
    assert cfg.exec is not None
    with pytest.raises(ConfigError, match=r"cannot be started.*install absent first"):
        ExecCredentialPlugin(cfg.exec).credential()


def test_exec_plugin_reruns_when_expired(tmp_path: Path) -> None:
    past = resolve(
        kubeconfig=write_kubeconfig(
            tmp_path / "past", server="https://x", user=exec_user(tmp_path, "token", expiry=PAST)
        )
    )
    assert past.exec is not None
    plugin = ExecCredentialPlugin(past.exec)
    assert [plugin.credential().token for _ in range(3)] == ["exec-p-1", "exec-p-2", "exec-p-3"]

    (tmp_path / "runs").unlink()
    future = resolve(
        kubeconfig=write_kubeconfig(
            tmp_path / "future",
            server="https://x",
            user=exec_user(tmp_path, "token", expiry=FUTURE),
        )
    )
    assert future.exec is not None
    now = [datetime.datetime(2998, 12, 31, tzinfo=datetime.UTC)]
    plugin = ExecCredentialPlugin(future.exec, clock=lambda: now[0])
    assert plugin.credential().token == "exec-p-1"
    assert plugin.credential().token == "exec-p-1"
    assert plugin.credential().expires_at == datetime.datetime(2999, 1, 1, tzinfo=datetime.UTC)
    now[0] = datetime.datetime(2999, 1, 1, 0, 0, 1, tzinfo=datetime.UTC)
    assert plugin.credential().token == "exec-p-2"
    assert plugin.runs == 2


async def test_exec_plugin_concurrent_refresh_runs_once(tmp_path: Path) -> None:
    user = exec_user(tmp_path, "token", expiry=FUTURE)
    cfg = resolve(kubeconfig=write_kubeconfig(tmp_path / "c", server="https://x", user=user))
    assert cfg.exec is not None
    plugin = ExecCredentialPlugin(cfg.exec)
    creds = await asyncio.gather(*(plugin.acredential() for _ in range(5)))
    assert {c.token for c in creds} == {"exec-p-1"}
    assert plugin.runs == 1


# --------------------------------------------------------------------------- token files


def test_token_file_rotation(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("one\n")
    now = [0.0]
    source = TokenFile(path, max_age=60.0, clock=lambda: now[0])
    assert source.read() == "one"
    path.write_text("two\n")
    assert source.read() == "one"  # within max_age
    now[0] = 61.0
    assert source.read() == "two"
    path.unlink()
    assert source.read(refresh=True) == "two"  # a failed re-read keeps the last token
    with pytest.raises(ConfigError, match="cannot be read"):
        TokenFile(path).read()

"""``kube-gateway serve`` as a real process on free loopback ports, for the tests that need
the command itself (start-up, signals, TLS, fuzzing)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without any Kubernetes configuration, ``HOME`` at ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "KUBERNETES_"))}
    env["HOME"] = str(home)  # no ~/.kube/config unless the test writes one
    env.update(extra or {})
    return env


def command(http_port: int, grpc_port: int, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gateway.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--http-port",
        str(http_port),
        "--grpc-port",
        str(grpc_port),
        *args,
    ]


class Served:
    def __init__(self, proc: subprocess.Popen[str], http_port: int, grpc_port: int) -> None:
        self.proc = proc
        self.http = f"http://127.0.0.1:{http_port}"
        self.grpc = f"127.0.0.1:{grpc_port}"
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._wrote = threading.Condition()
        self._ended = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._wrote:
                self.lines.append(line)
                self._wrote.notify_all()
            # "Uvicorn running on" comes after the lifespan started and signal handlers are set
            if "Uvicorn running on" in line or "Application startup failed" in line:
                self._ready.set()
        with self._wrote:
            self._ended = True
            self._wrote.notify_all()
        self._ready.set()

    def wait_ready(self, timeout: float = 60) -> None:
        assert self._ready.wait(timeout), "the gateway did not start in time"
        # listening, not only started: uvicorn binds after the lifespan's startup, and a
        # port taken meanwhile (free_port's port is free only when it was asked) ends it
        assert any("Uvicorn running on" in line for line in self.lines), "".join(self.lines)

    def wait_serving(self) -> None:
        """Once started and, with discovery on, serving the cluster's /graphql schema (what
        /readyz and the gRPC health service wait for)."""
        self.wait_ready()
        self.wait_for_line("GraphQL schema /graphql rebuilt")

    def wait_for_line(self, text: str) -> str:
        """The first log line containing ``text``, once the process has written it (fails if
        the process ends its log without it; one that never writes it is failed by the
        test's timeout)."""
        with self._wrote:
            self._wrote.wait_for(lambda: self._ended or any(text in line for line in self.lines))
            found = [line for line in self.lines if text in line]
        assert found, f"the gateway ended without logging {text!r}:\n{self.log}"
        return found[0]

    def wait_until(self, found: Callable[[list[str]], bool]) -> None:
        """Once ``found(lines)`` holds for the lines written so far (fails if the process
        ends its log first; one that never does is failed by the test's timeout)."""
        with self._wrote:
            self._wrote.wait_for(lambda: self._ended or found(self.lines))
            assert found(self.lines), f"the gateway ended without the expected lines:\n{self.log}"

    @property
    def log(self) -> str:
        return "".join(self.lines)


@contextlib.contextmanager
def serve_process(
    home: Path,
    *args: str,
    ready: bool = True,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[Served]:
    """Run ``kube-gateway serve *args`` until the block exits (SIGTERM, then kill).

    ``cwd`` and ``env`` (added to a clean environment) run another checkout of the code.
    """
    http_port, grpc_port = free_port(), free_port()
    proc = subprocess.Popen(
        command(http_port, grpc_port, *args),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=clean_env(home, env),
        cwd=cwd,
    )
    served = Served(proc, http_port, grpc_port)
    try:
        if ready:
            served.wait_ready()
        yield served
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        assert proc.stderr is not None
        proc.stderr.close()


@contextlib.asynccontextmanager
async def serve_process_async(home: Path, *args: str) -> AsyncIterator[Served]:
    """:func:`serve_process` for async tests: its blocking waits run in a thread, so the
    test's event loop (a demo upstream in it, the clients) keeps running meanwhile."""
    manager = serve_process(home, *args, ready=False)
    served = await asyncio.to_thread(manager.__enter__)
    try:
        await asyncio.to_thread(served.wait_ready)
        yield served
    finally:
        await asyncio.to_thread(manager.__exit__, None, None, None)


def health_serving(channel: grpc.Channel, timeout: float = 30) -> bool:
    """Watch the gRPC health service until it says SERVING (a client's way to wait for a
    server that becomes ready once its schema is served)."""
    stub = health_pb2_grpc.HealthStub(channel)
    for reply in stub.Watch(health_pb2.HealthCheckRequest(), timeout=timeout):
        if reply.status == health_pb2.HealthCheckResponse.SERVING:
            return True
    return False

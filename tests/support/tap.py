"""A loopback TCP proxy that keeps what each side sent.

Put in front of a server (the demo upstream, the gateway's gRPC port), it shows on the wire
what reached the server and what it answered: a request refused before the upstream was
asked leaves no byte here, and a request the gateway gave up on shows its client's side
closed with nothing answered.  Bytes are kept before they are passed on, so whatever the
server received is already here when its answer comes back.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self


@dataclass(eq=False)
class Tapped:
    """One connection through the tap."""

    from_client: bytearray = field(default_factory=bytearray)
    from_server: bytearray = field(default_factory=bytearray)
    #: Set when the client ended the connection (closed or reset it) first.
    client_closed: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set when the server ended the connection first.
    server_closed: asyncio.Event = field(default_factory=asyncio.Event)


class Tap:
    """``async with Tap(port) as tap``: a proxy on a free loopback port to ``127.0.0.1:port``.

    Attributes:
        from_client: everything the clients sent, all connections together.
        from_server: everything the server sent, all connections together.
        connections: each connection, in the order they were accepted.
        port: the tap's own port (once started).
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.from_client = bytearray()
        self.from_server = bytearray()
        self.connections: list[Tapped] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def before(cls, url: str) -> Tap:
        """A tap to the server at ``url`` (``http://127.0.0.1:<port>``)."""
        return cls(int(url.rstrip("/").rsplit(":", 1)[1]))

    @property
    def url(self) -> str:
        """The tap's address as an HTTP base URL (for a client of the tapped server)."""
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tapped = Tapped()
        self.connections.append(tapped)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)

        async def pipe(
            src: asyncio.StreamReader,
            dst: asyncio.StreamWriter,
            kept: tuple[bytearray, bytearray],
            ended: asyncio.Event,
            other_ended: asyncio.Event,
        ) -> None:
            try:
                while True:
                    try:
                        data = await src.read(65536)
                    except ConnectionError:
                        data = b""
                    if not data:
                        # closing one side closes the other: only the first end is news
                        if not other_ended.is_set():
                            ended.set()
                        return
                    for buffer in kept:
                        buffer.extend(data)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        for task in (
            asyncio.create_task(
                pipe(
                    reader,
                    up_writer,
                    (self.from_client, tapped.from_client),
                    tapped.client_closed,
                    tapped.server_closed,
                )
            ),
            asyncio.create_task(
                pipe(
                    up_reader,
                    writer,
                    (self.from_server, tapped.from_server),
                    tapped.server_closed,
                    tapped.client_closed,
                )
            ),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


def requests_carrying(wire: bytes, secret: bytes) -> list[bytes]:
    """The request line of each HTTP request on ``wire`` whose bytes contain ``secret``."""
    starts = [m.start() for m in re.finditer(rb"(?m)^(?:GET|POST|PUT|PATCH|DELETE) /", wire)]
    found = []
    for i, start in enumerate(starts):
        request = wire[start : starts[i + 1] if i + 1 < len(starts) else len(wire)]
        if secret in request:
            found.append(request.split(b"\r\n", 1)[0])
    return found

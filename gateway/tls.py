"""TLS on the gateway's own listeners, with certificates reloaded when their files change.

One certificate and key serve both listeners.  HTTPS: uvicorn's ``SSLContext`` gets the new
chain loaded into it (new handshakes use it; open connections keep theirs).  gRPC: grpc's
dynamic server credentials ask :meth:`Certificates.grpc_config` on every handshake, which
answers with a new configuration once the files changed.  With a client CA, gRPC callers
must present a certificate it signed (mutual TLS).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Where the listeners' certificate, key and (for gRPC) the client CA are."""

    cert_file: Path
    key_file: Path
    grpc_client_ca_file: Path | None = None


def _stamp(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


class Certificates:
    """The listeners' certificate, reloaded when its files change.

    Args:
        files: the certificate, key and optional gRPC client CA.
    """

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()  # grpc asks from its own threads
        self._contexts: list[ssl.SSLContext] = []
        self._stamps = self._current_stamps()
        self._grpc_stamps = self._stamps
        self.cert, self.key = self._read()
        self.client_ca = (
            files.grpc_client_ca_file.read_bytes() if files.grpc_client_ca_file else None
        )

    def _current_stamps(self) -> tuple[tuple[int, int], ...]:
        paths = [self.files.cert_file, self.files.key_file]
        if self.files.grpc_client_ca_file is not None:
            paths.append(self.files.grpc_client_ca_file)
        return tuple(_stamp(p) for p in paths)

    def _read(self) -> tuple[bytes, bytes]:
        return self.files.cert_file.read_bytes(), self.files.key_file.read_bytes()

    # -- HTTPS -----------------------------------------------------------------------------

    def serve_context(self, context: ssl.SSLContext) -> None:
        """Keep ``context`` (uvicorn's) on the current certificate."""
        self._contexts.append(context)

    def check(self) -> bool:
        """Reload if the files changed (and hold a usable pair); returns whether it did."""
        try:
            stamps = self._current_stamps()
            if stamps == self._stamps:
                return False
            cert, key = self._read()
            for context in self._contexts:
                context.load_cert_chain(self.files.cert_file, self.files.key_file)
            if self._current_stamps() != stamps:
                # Replaced while being read: the bytes for gRPC and the HTTPS context may
                # hold different pairs.  Both are read again next time.
                return False
        except (OSError, ssl.SSLError) as exc:
            # Half-written files (the cert renewed before the key): keep serving the old
            # pair and look again next time.
            log.warning("TLS certificate not reloaded yet: %s", type(exc).__name__)
            return False
        with self._lock:
            self._stamps, self.cert, self.key = stamps, cert, key
            if self.files.grpc_client_ca_file is not None:
                self.client_ca = self.files.grpc_client_ca_file.read_bytes()
        log.info("TLS certificate reloaded from %s", self.files.cert_file)
        return True

    async def watch(self, interval: float) -> None:
        """Check the files every ``interval`` seconds (owned by the lifespan)."""
        while True:
            await asyncio.sleep(interval)
            self.check()

    # -- gRPC ------------------------------------------------------------------------------

    def _grpc_configuration(self) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration(
            [(self.key, self.cert)], root_certificates=self.client_ca
        )

    def grpc_config(self) -> grpc.ServerCertificateConfiguration | None:
        """grpc's per-handshake question: a new configuration, or ``None`` for no change."""
        with self._lock:
            if self._grpc_stamps == self._stamps:
                return None
            self._grpc_stamps = self._stamps
            return self._grpc_configuration()

    def grpc_credentials(self) -> grpc.ServerCredentials:
        with self._lock:
            initial = self._grpc_configuration()
        return grpc.dynamic_ssl_server_credentials(
            initial,
            self.grpc_config,
            require_client_authentication=self.client_ca is not None,
        )

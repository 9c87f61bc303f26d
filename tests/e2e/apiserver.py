"""A real etcd + kube-apiserver, started from the binaries that ``make e2e-bins`` builds.

Used by the ``kube_apiserver`` session fixture (conftest.py), and runnable by hand to point
a local gateway at a real apiserver::

    make e2e-bins && .venv/bin/python -m tests.e2e.apiserver

Both processes listen on free loopback ports, keep all their state in one temporary
directory, and are killed (process group and all) when the context manager exits,
whatever happened.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import ipaddress
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from gateway.settings import Settings

HERE = Path(__file__).resolve().parent
BIN_DIR = Path(os.environ.get("E2E_BIN_DIR", HERE / ".bin"))
MANIFESTS = HERE / "manifests"

#: How long the apiserver may take to become ready, and to settle RBAC/CRDs afterwards.
READY_TIMEOUT_S = float(os.environ.get("E2E_READY_TIMEOUT", "120"))
SETTLE_TIMEOUT_S = 60.0
#: Starts on fresh ports when a picked port was taken in the meantime.
PORT_ATTEMPTS = 3

#: The identities in the static token file: name -> groups.  alice's rights come from
#: manifests/rbac-alice.yaml; nobody has none beyond system:authenticated's discovery.
IDENTITIES: Mapping[str, tuple[str, ...]] = {
    "admin": ("system:masters",),
    "alice": (),
    "nobody": (),
}

#: Namespaces created before any test runs (manifests/namespaces.yaml).
NAMESPACES = ("team-a", "team-b")


@dataclass(frozen=True)
class KubeAPIServer:
    """A running kube-apiserver, as the tests see it."""

    #: ``https://127.0.0.1:<port>``
    url: str
    #: PEM CA bundle that signs the serving certificate (for ``ssl.create_default_context``).
    ca_file: str
    #: Bearer tokens by identity name: ``admin``, ``alice``, ``nobody``.
    tokens: Mapping[str, str]
    #: One file per identity holding just its token (for ``--token-file``-style options).
    token_files: Mapping[str, str]
    #: A kubeconfig per identity (server, CA and that identity's token).
    kubeconfigs: Mapping[str, str]
    #: The apiserver's and etcd's logs, for debugging a failure.
    log_dir: str
    #: Seconds from process start to /readyz ok (etcd and apiserver started together).
    startup_seconds: float = field(default=0.0, compare=False)

    def ssl_context(self) -> ssl.SSLContext:
        """An SSL context trusting exactly this apiserver's CA (httpx ``verify=``)."""
        return ssl.create_default_context(cafile=self.ca_file)

    def headers(self, identity: str) -> dict[str, str]:
        """``Authorization`` header for one of the identities."""
        return {"Authorization": f"Bearer {self.tokens[identity]}"}

    def gateway_settings(self, **more: Any) -> Settings:
        """Settings of a gateway in this process serving this apiserver (``--server``,
        ``--ca-file``) on loopback ports the system picks, quiet logs; ``more`` on top."""
        return Settings(
            **{
                "host": "127.0.0.1",
                "http_port": 0,
                "grpc_port": 0,
                "server": self.url,
                "ca_file": self.ca_file,
                "log_level": "warning",
                **more,
            }
        )


# --------------------------------------------------------------------------- helpers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_pem_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _make_certs(cert_dir: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a serving certificate for 127.0.0.1 / localhost."""
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-gateway-e2e-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([x509.OID_SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = cert_dir / "ca.crt"
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_file = cert_dir / "apiserver.crt"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file = cert_dir / "apiserver.key"
    _write_pem_key(key_file, key)
    return ca_file, cert_file, key_file


def _make_service_account_keys(cert_dir: Path) -> tuple[Path, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    priv = cert_dir / "sa.key"
    _write_pem_key(priv, key)
    pub = cert_dir / "sa.pub"
    pub.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return priv, pub


def _write_kubeconfig(path: Path, url: str, ca_file: Path, name: str, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "e2e", "cluster": {"server": url, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "e2e", "user": name}}],
        "current-context": name,
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)


def _die_with_parent(argv: list[str]) -> list[str]:
    """Prefix argv so the child gets SIGKILL when the test process dies, however it dies
    (even SIGKILL, which runs no cleanup at all): util-linux's setpriv sets the Linux
    parent-death signal and execs the command in place.  Unchanged where setpriv is
    missing."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


class ProcessExited(RuntimeError):
    """etcd or kube-apiserver died while starting."""

    def __init__(self, name: str, code: int, log_tail: str) -> None:
        super().__init__(f"{name} exited with {code}:\n{log_tail}")
        self.log_tail = log_tail


class _Processes:
    """Child processes, each leading its own process group; stop() ends them all, once
    (SIGTERM to the group, SIGKILL after 10 s), and only them."""

    def __init__(self) -> None:
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                _die_with_parent(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs.append((name, proc))
        return proc

    def check_alive(self, log_dir: Path) -> None:
        for name, proc in self._procs:
            if proc.poll() is not None:
                raise ProcessExited(name, proc.returncode, _tail(log_dir / f"{name}.log"))

    def stop(self) -> None:
        # Reverse order: the apiserver first, then etcd under it.
        while self._procs:
            _name, proc = self._procs.pop()
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
            # Neither binary forks helpers, and once the leader is reaped its pid (and so
            # its group id) may belong to someone else: nothing more is signalled here.


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


def _on_sigterm_interrupt() -> signal.Handlers | None:
    """Raise KeyboardInterrupt on SIGTERM, if nobody handles SIGTERM yet (main thread only).

    Returns the handler to restore, or None when nothing was changed.
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)
    return signal.SIG_DFL


def _print_logs(log_dir: Path) -> None:
    for name in ("kube-apiserver", "etcd"):
        print(f"\n--- {name} log (last lines) ---\n{_tail(log_dir / f'{name}.log')}")


def _wait_until(what: str, check: Any, timeout: float, procs: _Processes, log_dir: Path) -> None:
    """Poll ``check()`` until it returns true, the deadline passes or a process dies."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    last: object = None
    while True:
        procs.check_alive(log_dir)
        try:
            if check():
                return
        except httpx.TransportError as e:  # not listening yet
            last = e
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last})")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def _collection_path(obj: Mapping[str, Any]) -> str:
    kind = obj["kind"]
    ns = obj.get("metadata", {}).get("namespace")
    paths = {
        "Namespace": "/api/v1/namespaces",
        "CustomResourceDefinition": "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    }
    return paths[kind]


def _apply(client: httpx.Client, manifest: Path) -> None:
    for obj in yaml.safe_load_all(manifest.read_text()):
        if not obj:
            continue
        r = client.post(_collection_path(obj), json=obj)
        if r.status_code != 409:  # already there (a re-run against the same etcd)
            r.raise_for_status()


# --------------------------------------------------------------------------- start/stop


class BinariesMissing(RuntimeError):
    """The e2e binaries have not been built (``make e2e-bins``)."""


@contextlib.contextmanager
def running_apiserver(
    bin_dir: Path = BIN_DIR, *, tokens: Mapping[str, str] | None = None
) -> Iterator[KubeAPIServer]:
    """Start etcd + kube-apiserver with CRDs, namespaces and RBAC; stop both on exit.

    ``tokens``: identities whose token is given (another apiserver's, so that one identity
    provider's token is valid on both); the others get fresh random ones.
    """
    apiserver_bin = bin_dir / "kube-apiserver"
    etcd_bin = bin_dir / "etcd"
    missing = [str(p) for p in (apiserver_bin, etcd_bin) if not os.access(p, os.X_OK)]
    if missing:
        raise BinariesMissing(f"e2e binaries missing ({', '.join(missing)}): run `make e2e-bins`")

    procs = _Processes()
    # Belt and braces: if the interpreter exits without unwinding this context
    # (os._exit aside), the processes still go.
    atexit.register(procs.stop)
    # A SIGTERM (a CI job's time-out, `kill`) would end Python without unwinding
    # anything: turn it into KeyboardInterrupt so the finally below still runs.
    previous_sigterm = _on_sigterm_interrupt()
    work: Path | None = None
    try:
        for attempt in range(1, PORT_ATTEMPTS + 1):
            work = Path(tempfile.mkdtemp(prefix="kg-e2e-"))
            try:
                server = _start(work, procs, apiserver_bin, etcd_bin, tokens or {})
                break
            except ProcessExited as e:
                # A free port picked here can be taken by someone else before the
                # child binds it: start again on new ports, a bounded number of times.
                if "address already in use" not in e.log_tail or attempt == PORT_ATTEMPTS:
                    _print_logs(work / "logs")
                    raise
                procs.stop()
                shutil.rmtree(work, ignore_errors=True)
            except BaseException:
                _print_logs(work / "logs")
                raise
        yield server
    finally:
        procs.stop()
        atexit.unregister(procs.stop)
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        if work is not None and os.environ.get("E2E_KEEP_DIR"):
            print(f"\ne2e: kept {work}")
        elif work is not None:
            shutil.rmtree(work, ignore_errors=True)


def _start(
    work: Path,
    procs: _Processes,
    apiserver_bin: Path,
    etcd_bin: Path,
    given: Mapping[str, str],
) -> KubeAPIServer:
    cert_dir = work / "pki"
    log_dir = work / "logs"
    for d in (cert_dir, log_dir, work / "tokens", work / "kubeconfigs"):
        d.mkdir(mode=0o700)
    ca_file, cert_file, key_file = _make_certs(cert_dir)
    sa_key, sa_pub = _make_service_account_keys(cert_dir)

    tokens = {name: given.get(name) or secrets.token_urlsafe(24) for name in IDENTITIES}
    token_csv = cert_dir / "tokens.csv"
    token_csv.write_text(
        "".join(
            f'{tokens[name]},{name},uid-{name},"{",".join(groups)}"\n'
            for name, groups in IDENTITIES.items()
        )
    )
    token_csv.chmod(0o600)

    etcd_client, etcd_peer, port = _free_port(), _free_port(), _free_port()
    etcd_url = f"http://127.0.0.1:{etcd_client}"
    url = f"https://127.0.0.1:{port}"

    t0 = time.monotonic()
    procs.start(
        "etcd",
        [
            str(etcd_bin),
            "--name=e2e",
            f"--data-dir={work / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
            f"--initial-cluster=e2e=http://127.0.0.1:{etcd_peer}",
            "--unsafe-no-fsync",  # throwaway data: no fsync makes writes fast
            "--log-level=warn",
        ],
        log_dir / "etcd.log",
    )
    procs.start(
        "kube-apiserver",
        [
            str(apiserver_bin),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={cert_dir}",
            f"--tls-cert-file={cert_file}",
            f"--tls-private-key-file={key_file}",
            f"--token-auth-file={token_csv}",
            "--anonymous-auth=false",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            # Only an address range in etcd: nothing is routed anywhere.
            "--service-cluster-ip-range=10.0.0.0/24",
            # No controller-manager runs, so nothing would create the `default`
            # ServiceAccount that this admission plugin waits for on every pod.
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            # Watch-lists (sendInitialEvents); beta and on by default since 1.34.
            "--feature-gates=WatchList=true",
            "--profiling=false",
            "--v=1",
        ],
        log_dir / "kube-apiserver.log",
    )

    auth = {"Authorization": f"Bearer {tokens['admin']}"}
    ctx = ssl.create_default_context(cafile=str(ca_file))
    with httpx.Client(
        base_url=url, verify=ctx, headers=auth, timeout=10.0, trust_env=False
    ) as admin:
        _wait_until(
            "kube-apiserver /readyz",
            lambda: admin.get("/readyz").status_code == 200,
            READY_TIMEOUT_S,
            procs,
            log_dir,
        )
        startup = time.monotonic() - t0

        _apply(admin, MANIFESTS / "namespaces.yaml")
        _apply(admin, MANIFESTS / "crd-images.image.openshift.io.yaml")
        _apply(admin, MANIFESTS / "rbac-alice.yaml")

        def established() -> bool:
            r = admin.get(
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/images.image.openshift.io"
            )
            conds = r.json().get("status", {}).get("conditions", [])
            ok = any(c["type"] == "Established" and c["status"] == "True" for c in conds)
            return ok and admin.get("/apis/image.openshift.io/v1/images").status_code == 200

        _wait_until("the Image CRD to be served", established, SETTLE_TIMEOUT_S, procs, log_dir)
        # The first write to a new CRD takes ~2 s (its storage warms up); pay that here,
        # with a dry run that stores nothing, rather than in the first test that writes.
        admin.post(
            "/apis/image.openshift.io/v1/images",
            params={"dryRun": "All"},
            json={
                "apiVersion": "image.openshift.io/v1",
                "kind": "Image",
                "metadata": {"name": "e2e-warm-up"},
                "dockerImageLayers": [],
            },
        ).raise_for_status()

        # RBAC is evaluated from an informer cache: wait until alice's binding counts.
        alice = {"Authorization": f"Bearer {tokens['alice']}"}

        def alice_bound() -> bool:
            return all(
                admin.get(path, headers=alice).status_code == 200
                for path in (
                    "/api/v1/namespaces/team-a/pods",
                    "/apis/image.openshift.io/v1/images",
                )
            )

        _wait_until("alice's RBAC rights", alice_bound, SETTLE_TIMEOUT_S, procs, log_dir)

    token_files: dict[str, str] = {}
    kubeconfigs: dict[str, str] = {}
    for name, token in tokens.items():
        tf = work / "tokens" / name
        tf.write_text(token)
        tf.chmod(0o600)
        token_files[name] = str(tf)
        kc = work / "kubeconfigs" / name
        _write_kubeconfig(kc, url, ca_file, name, token)
        kubeconfigs[name] = str(kc)

    return KubeAPIServer(
        url=url,
        ca_file=str(ca_file),
        tokens=tokens,
        token_files=token_files,
        kubeconfigs=kubeconfigs,
        log_dir=str(log_dir),
        startup_seconds=round(startup, 2),
    )


def main() -> None:
    """Run one apiserver until Ctrl-C, printing how to reach it."""
    with running_apiserver() as srv:
        print(f"kube-apiserver ready in {srv.startup_seconds}s at {srv.url}")
        print(f"  --ca-file {srv.ca_file}")
        for name in srv.tokens:
            print(
                f"  {name}: token file {srv.token_files[name]}, kubeconfig {srv.kubeconfigs[name]}"
            )
        print("Ctrl-C stops etcd and kube-apiserver and removes their data.")
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


if __name__ == "__main__":
    main()

"""A corpus of real, published CRDs, multiplied to any count, and installed on an apiserver.

The CRDs are the ones operators ship in their Go modules, taken from the module zips that the
Go module proxy serves (``go mod download -json MODULE@VERSION`` prints the unpacked ``Dir``);
:data:`SOURCES` pins each module's version and the files taken from it.  The YAML files are
copied once into ``tests/bench/.crds/`` (gitignored), so a second run needs neither the network
nor the Go command::

    from tests.support import crdcorpus
    corpus = crdcorpus.load()              # ~50 distinct CRDs, as parsed dicts
    crds = crdcorpus.multiply(corpus, 235)  # 235 CRDs: the corpus, then renamed copies
    asyncio.run(crdcorpus.install(url, token, ca_file, crds))
    asyncio.run(crdcorpus.delete(url, token, ca_file, crds))

:func:`multiply` makes copy ``k`` (k = 2, 3, ...) of a CRD of group ``g`` a CRD of group
``c{k}.g`` (``metadata.name`` and ``spec.group`` change; a conversion webhook, if any, becomes
``strategy: None`` so no webhook is needed); every other field is the published one.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[2]
#: Where the YAML files are kept between runs (gitignored).
CACHE = Path(os.environ.get("KG_CRD_CACHE", REPO / "tests" / "bench" / ".crds"))

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
#: Asks for an object's metadata only (a deleted CRD's last read need not carry its schema).
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


@dataclass(frozen=True)
class Source:
    """Files of one Go module version that hold CRDs (paths inside the module)."""

    module: str
    version: str
    files: tuple[str, ...]


#: The pinned corpus: 50 CRDs in 13 API groups.
SOURCES: tuple[Source, ...] = (
    Source(
        "github.com/prometheus-operator/prometheus-operator",
        "v0.85.0",
        tuple(
            f"example/prometheus-operator-crd/monitoring.coreos.com_{name}.yaml"
            for name in (
                "alertmanagerconfigs",
                "alertmanagers",
                "podmonitors",
                "probes",
                "prometheusagents",
                "prometheuses",
                "prometheusrules",
                "scrapeconfigs",
                "servicemonitors",
                "thanosrulers",
            )
        ),
    ),
    Source(
        "github.com/cert-manager/cert-manager",
        "v1.21.2",
        tuple(
            f"deploy/crds/{name}.yaml"
            for name in (
                "acme.cert-manager.io_challenges",
                "acme.cert-manager.io_orders",
                "cert-manager.io_certificaterequests",
                "cert-manager.io_certificates",
                "cert-manager.io_clusterissuers",
                "cert-manager.io_issuers",
            )
        ),
    ),
    Source(
        "github.com/kedacore/keda/v2",
        "v2.21.0",
        tuple(
            f"config/crd/bases/{name}.yaml"
            for name in (
                "eventing.keda.sh_cloudeventsources",
                "eventing.keda.sh_clustercloudeventsources",
                "keda.sh_clustertriggerauthentications",
                "keda.sh_scaledjobs",
                "keda.sh_scaledobjects",
                "keda.sh_triggerauthentications",
            )
        ),
    ),
    Source(
        "sigs.k8s.io/gateway-api",
        "v1.6.3",
        tuple(
            f"config/crd/experimental/{name}.yaml"
            for name in (
                "gateway.networking.k8s.io_backendtlspolicies",
                "gateway.networking.k8s.io_gatewayclasses",
                "gateway.networking.k8s.io_gateways",
                "gateway.networking.k8s.io_grpcroutes",
                "gateway.networking.k8s.io_httproutes",
                "gateway.networking.k8s.io_listenersets",
                "gateway.networking.k8s.io_referencegrants",
                "gateway.networking.k8s.io_tcproutes",
                "gateway.networking.k8s.io_tlsroutes",
                "gateway.networking.k8s.io_udproutes",
                "gateway.networking.x-k8s.io_xbackends",
                "gateway.networking.x-k8s.io_xbackendtrafficpolicies",
                "gateway.networking.x-k8s.io_xmeshes",
            )
        ),
    ),
    Source("istio.io/api", "v1.31.4", ("kubernetes/customresourcedefinitions.gen.yaml",)),
)

#: More operators' CRDs, for the corpus test (the scale bench keeps :data:`SOURCES`, so its
#: figures stay comparable): Argo CD, Knative Serving and Cluster API.  Crossplane, Argo
#: Workflows and Knative Eventing are not served by the Go module proxy this suite uses
#: (403), so they are not here.
MORE_SOURCES: tuple[Source, ...] = (
    Source(
        "github.com/argoproj/argo-cd/v3",
        "v3.5.7",  # v3.6 needs go >= 1.27 to download
        tuple(
            f"manifests/crds/{name}-crd.yaml"
            for name in ("application", "applicationset", "appproject")
        ),
    ),
    Source(
        "knative.dev/serving",
        "v0.51.0",
        tuple(
            f"config/core/300-resources/{name}.yaml"
            for name in (
                "configuration",
                "domain-mapping",
                "metric",
                "podautoscaler",
                "revision",
                "route",
                "service",
            )
        ),
    ),
    Source(
        "sigs.k8s.io/cluster-api",
        "v1.14.2",
        (
            *(
                f"core/config/crd/bases/{name}.yaml"
                for name in (
                    "addons.cluster.x-k8s.io_clusterresourcesetbindings",
                    "addons.cluster.x-k8s.io_clusterresourcesets",
                    "cluster.x-k8s.io_clusterclasses",
                    "cluster.x-k8s.io_clusters",
                    "cluster.x-k8s.io_machinedeployments",
                    "cluster.x-k8s.io_machinedrainrules",
                    "cluster.x-k8s.io_machinehealthchecks",
                    "cluster.x-k8s.io_machinepools",
                    "cluster.x-k8s.io_machines",
                    "cluster.x-k8s.io_machinesets",
                    "ipam.cluster.x-k8s.io_ipaddressclaims",
                    "ipam.cluster.x-k8s.io_ipaddresses",
                    "runtime.cluster.x-k8s.io_extensionconfigs",
                )
            ),
            "bootstrap/kubeadm/config/crd/bases/bootstrap.cluster.x-k8s.io_kubeadmconfigs.yaml",
            "bootstrap/kubeadm/config/crd/bases/"
            "bootstrap.cluster.x-k8s.io_kubeadmconfigtemplates.yaml",
            "controlplane/kubeadm/config/crd/bases/"
            "controlplane.cluster.x-k8s.io_kubeadmcontrolplanes.yaml",
            "controlplane/kubeadm/config/crd/bases/"
            "controlplane.cluster.x-k8s.io_kubeadmcontrolplanetemplates.yaml",
        ),
    ),
)
#: The corpus test's CRDs: the bench's and the others.
CORPUS: tuple[Source, ...] = SOURCES + MORE_SOURCES


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """A safe loader that reads a bare ``=`` (YAML 1.1's "value" tag, an enum value in some
    CRDs) as the string it is, as Kubernetes' own YAML reader does."""


_Loader.add_constructor("tag:yaml.org,2002:value", yaml.SafeLoader.construct_yaml_str)


def _source_dir(source: Source) -> Path:
    return CACHE / f"{source.module.replace('/', '_')}@{source.version}"


def _download(source: Source) -> Path:
    """The module's unpacked directory in the Go module cache (downloaded if needed)."""
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    with tempfile.TemporaryDirectory(prefix="kg-crds-") as cwd:  # outside any go.mod
        done = subprocess.run(
            ["go", "mod", "download", "-json", f"{source.module}@{source.version}"],
            check=False,
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    info = json.loads(done.stdout or "{}")
    if done.returncode != 0 or "Dir" not in info:
        raise RuntimeError(
            f"go mod download {source.module}@{source.version} failed: "
            f"{info.get('Error') or done.stderr.strip()}"
        )
    return Path(info["Dir"])


def fetch(sources: Sequence[Source] = SOURCES) -> list[Path]:
    """The corpus's YAML files in the cache, copied from the Go module cache when missing."""
    paths: list[Path] = []
    for source in sources:
        target = _source_dir(source)
        stamp = target / ".complete"
        if not stamp.exists():
            module_dir = _download(source)
            target.mkdir(parents=True, exist_ok=True)
            for rel in source.files:
                dest = target / rel.replace("/", "_")
                shutil.copyfile(module_dir / rel, dest)
                dest.chmod(0o644)  # the module cache's files are read-only
            stamp.write_text(f"{source.module}@{source.version}\n")
        paths += [target / rel.replace("/", "_") for rel in source.files]
    return paths


def load(sources: Sequence[Source] = SOURCES) -> list[dict[str, Any]]:
    """Every CRD of the corpus, parsed, in the order of :data:`SOURCES` (names unique)."""
    crds: dict[str, dict[str, Any]] = {}
    for path in fetch(sources):
        for doc in yaml.load_all(path.read_text(), Loader=_Loader):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                crds.setdefault(doc["metadata"]["name"], doc)
    return list(crds.values())


def renamed(crd: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A copy of ``crd`` in group ``{prefix}.{group}``, without a conversion webhook."""
    out = copy.deepcopy(crd)
    group = f"{prefix}.{crd['spec']['group']}"
    out["spec"]["group"] = group
    out["metadata"]["name"] = f"{crd['spec']['names']['plural']}.{group}"
    return without_webhook(out)


def without_webhook(crd: dict[str, Any]) -> dict[str, Any]:
    """``crd`` with ``spec.conversion`` at ``strategy: None`` (no webhook to call)."""
    conversion = crd["spec"].get("conversion")
    if conversion and conversion.get("strategy") != "None":
        crd["spec"]["conversion"] = {"strategy": "None"}
    return crd


def multiply(corpus: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` CRDs: the corpus itself first, then copy 2 of each CRD in group ``c2.<group>``,
    copy 3 in ``c3.<group>`` and so on, cut at ``n``."""
    out: list[dict[str, Any]] = []
    k = 1
    while len(out) < n and corpus:
        for crd in corpus:
            if len(out) == n:
                break
            out.append(without_webhook(copy.deepcopy(crd)) if k == 1 else renamed(crd, f"c{k}"))
        k += 1
    return out


def groups(crds: Iterable[dict[str, Any]]) -> list[str]:
    """The API groups of ``crds``, each once, in order."""
    return list(dict.fromkeys(c["spec"]["group"] for c in crds))


def _client(url: str, token: str, ca_file: str, timeout: float = 60.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url,
        verify=ssl.create_default_context(cafile=ca_file),
        headers={"Authorization": f"Bearer {token}"},
        timeout=timeout,
        trust_env=False,
        limits=httpx.Limits(max_connections=16),
    )


def _established(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


async def install(
    url: str,
    token: str,
    ca_file: str,
    crds: Sequence[dict[str, Any]],
    *,
    concurrency: int = 8,
    timeout: float = 600.0,
) -> float:
    """Server-side apply each CRD and wait until it is ``Established``; returns the seconds it
    took.  Raises TimeoutError past ``timeout`` (the whole install)."""
    start = time.monotonic()
    deadline = start + timeout
    gate = asyncio.Semaphore(concurrency)

    async def one(client: httpx.AsyncClient, crd: dict[str, Any]) -> None:
        name = crd["metadata"]["name"]
        async with gate:
            r = await client.patch(
                f"{CRD_PATH}/{name}",
                params={"fieldManager": "kg-bench", "force": "true"},
                content=json.dumps(crd).encode(),
                headers={"Content-Type": "application/apply-patch+yaml"},
            )
            if r.status_code >= 300:
                raise RuntimeError(f"apply {name}: {r.status_code} {r.text[:500]}")
            obj = r.json()
            delay = 0.05
            while not _established(obj):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} not Established after {timeout:.0f}s")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                r = await client.get(f"{CRD_PATH}/{name}")
                r.raise_for_status()
                obj = r.json()

    async with _client(url, token, ca_file) as client:
        await asyncio.gather(*(one(client, crd) for crd in crds))
    return time.monotonic() - start


async def wait_openapi(
    url: str, token: str, ca_file: str, crds: Sequence[dict[str, Any]], timeout: float = 300.0
) -> float:
    """Wait until ``/openapi/v3`` lists every served group/version of ``crds`` (what a
    discovering client reads next); returns the seconds waited."""
    start = time.monotonic()
    wanted = {
        f"apis/{c['spec']['group']}/{v['name']}"
        for c in crds
        for v in c["spec"]["versions"]
        if v.get("served")
    }
    async with _client(url, token, ca_file) as client:
        while True:
            r = await client.get("/openapi/v3")
            r.raise_for_status()
            missing = wanted - set(r.json().get("paths", {}))
            if not missing:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"/openapi/v3 still lacks {len(missing)}: {sorted(missing)[:5]}")
            await asyncio.sleep(0.5)


async def delete(
    url: str,
    token: str,
    ca_file: str,
    crds: Sequence[dict[str, Any]],
    *,
    concurrency: int = 8,
    wait: bool = True,
    timeout: float = 600.0,
) -> float:
    """Delete each CRD (one already gone is fine) and, with ``wait``, wait until it is gone;
    returns the seconds it took."""
    start = time.monotonic()
    deadline = start + timeout
    gate = asyncio.Semaphore(concurrency)

    async def one(client: httpx.AsyncClient, crd: dict[str, Any]) -> None:
        name = crd["metadata"]["name"]
        async with gate:
            r = await client.delete(f"{CRD_PATH}/{name}")
            if r.status_code not in (200, 202, 404):
                raise RuntimeError(f"delete {name}: {r.status_code} {r.text[:500]}")
            delay = 0.05
            while wait and r.status_code != 404:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} still there after {timeout:.0f}s")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                r = await client.get(
                    f"{CRD_PATH}/{name}",
                    headers={"Accept": METADATA_ONLY},
                )

    async with _client(url, token, ca_file) as client:
        await asyncio.gather(*(one(client, crd) for crd in crds))
    return time.monotonic() - start


def main() -> None:
    """Fetch the corpus and print what it holds (``python -m tests.support.crdcorpus``)."""
    corpus = load()
    print(f"{len(corpus)} CRDs in {len(groups(corpus))} groups, cached in {CACHE}")
    for crd in corpus:
        size = len(json.dumps(crd))
        print(f"  {crd['metadata']['name']:55} {size / 1024:8.0f} KiB")


if __name__ == "__main__":
    main()

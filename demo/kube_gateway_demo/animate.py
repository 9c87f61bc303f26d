"""Animation: keeps the sample cluster alive for a laptop demo (``serve --demo``).

Every step, "ticker" pods move Pending -> Running -> Succeeded and are replaced, write log
lines and get events; their Endpoints follow readiness; leases renew.  All writes go through
the store, so watches and subscriptions see them like any other change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Final

from gateway.core.model.registry import ENDPOINTS, EVENT, LEASE, POD
from kube_gateway_demo import sample
from kube_gateway_demo.inprocess import DemoStore
from kube_gateway_demo.jsonutil import clone
from kube_gateway_demo.kubelet import NODES, event_for, pod_ip, pod_status, started_events
from kube_gateway_demo.status import DemoApiError
from kube_gateway_demo.times import micro_time

log = logging.getLogger("kube_gateway_demo.animate")

Obj = dict[str, Any]

NAMESPACE: Final = sample.DEMO_NAMESPACE
LABEL: Final = "demo.kube-gateway.io/animated"
TICKERS: Final = 3
RUN_STEPS: Final = 4
DONE_STEPS: Final = 2
MAX_EVENTS: Final = 200


@dataclass(slots=True)
class Animator:
    """The state machine behind the animation (one :meth:`step` per tick)."""

    store: DemoStore
    ages: dict[str, int] = field(default_factory=dict)
    serial: int = 0

    async def step(self) -> None:
        """Advance every animated object by one tick."""
        await self.store.ensure_namespace(NAMESPACE)
        pods = await self.store.list(POD, namespace=NAMESPACE, label_selector=f"{LABEL}=true")
        for p in pods:
            await self._advance(p)
        missing = TICKERS - len(
            await self.store.list(POD, namespace=NAMESPACE, label_selector=f"{LABEL}=true")
        )
        for _ in range(max(0, missing)):
            await self._spawn()
        await self._sync_endpoints()
        await self._renew_leases()
        await self._trim_events()

    async def _spawn(self) -> None:
        self.serial += 1
        node = NODES[self.serial % len(NODES)]
        manifest = sample.pod(
            "",
            NAMESPACE,
            [sample.container("ticker", "quay.io/demo/ticker:1.0", port=8080)],
            labels={"app": "ticker", LABEL: "true"},
            node=node,
            restart_policy="Never",
        )
        manifest["metadata"].pop("name")
        manifest["metadata"]["generateName"] = "ticker-"
        created = await self.store.create(POD, manifest, field_manager="ticker-controller")
        self.ages[created["metadata"]["uid"]] = 0
        scheduled, *_ = started_events(created)
        await self._event(created, *scheduled)

    async def _advance(self, p: Obj) -> None:
        meta = p["metadata"]
        uid = meta["uid"]
        age = self.ages.get(uid, 0) + 1
        self.ages[uid] = age
        phase = (p.get("status") or {}).get("phase")
        name = meta["name"]
        if phase == "Pending":
            await self._report(p, "Running")
            _, *started = started_events(p)
            for event in started:
                await self._event(p, *event)
            self.ages[uid] = 0
        elif phase == "Running":
            await self.store.append_log(
                NAMESPACE, name, "ticker", f"[ticker] tick {age} at {self.store.now()}"
            )
            if age >= RUN_STEPS:
                await self._report(p, "Succeeded")
                await self._event(p, "Completed", "Container ticker completed", "kubelet")
                self.ages[uid] = 0
        elif age >= DONE_STEPS:
            await self.store.delete(POD, name, namespace=NAMESPACE)
            self.ages.pop(uid, None)

    async def _report(self, p: Obj, phase: str) -> None:
        """The kubelet reports the pod in ``phase``."""
        ip = pod_ip(p["spec"].get("nodeName", ""), 100 + self.serial % 100)
        status = pod_status(p, phase, now=self.store.now(), pod_ip=ip)
        await self.store.update(
            POD, {**p, "status": status}, subresource="status", field_manager="kubelet"
        )

    async def _event(self, p: Obj, reason: str, message: str, component: str) -> None:
        await self.store.create(
            EVENT,
            event_for(
                p, reason, message, component=component, now=self.store.now(), count=self.serial
            ),
            field_manager=component,
        )

    async def _sync_endpoints(self) -> None:
        pods = await self.store.list(POD, namespace=NAMESPACE, label_selector="app=ticker")
        wanted = sample.endpoints_for("ticker", NAMESPACE, pods, 8080)
        try:
            current = await self.store.get(ENDPOINTS, "ticker", namespace=NAMESPACE)
        except DemoApiError:
            await self.store.create(ENDPOINTS, wanted, field_manager="endpoint-controller")
            return
        if current.get("subsets") != wanted.get("subsets"):
            updated = clone(current)
            if "subsets" in wanted:
                updated["subsets"] = wanted["subsets"]
            else:
                updated.pop("subsets", None)
            await self.store.update(ENDPOINTS, updated, field_manager="endpoint-controller")

    async def _renew_leases(self) -> None:
        micro = micro_time(self.store.clock())
        for ns in ("kube-system", "kube-node-lease"):
            for lease in await self.store.list(LEASE, namespace=ns):
                renewed = {**lease, "spec": {**lease.get("spec", {}), "renewTime": micro}}
                await self.store.update(
                    LEASE, renewed, namespace=ns, field_manager=lease["metadata"]["name"]
                )

    async def _trim_events(self) -> None:
        events = await self.store.list(EVENT, namespace=NAMESPACE)
        if len(events) <= MAX_EVENTS:
            return
        events.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
        for e in events[: len(events) - MAX_EVENTS]:
            with contextlib.suppress(DemoApiError):
                await self.store.delete(EVENT, e["metadata"]["name"], namespace=NAMESPACE)


async def run(store: DemoStore, interval: float) -> None:
    """Animate ``store`` every ``interval`` seconds until cancelled."""
    animator = Animator(store)
    while True:
        try:
            await animator.step()
        except DemoApiError as exc:
            # Someone (a test, a user) changed things under us: try again next tick.
            log.debug("animation step skipped: %s", exc.message)
        await asyncio.sleep(interval)

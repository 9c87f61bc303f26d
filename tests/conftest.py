"""What every test shares: the process runs as ``kube-gateway serve`` runs it.

The gateways the tests start are served in the test's own process (``serve_app``), and a
gateway's background work (a schema build, an introspection, an OpenAPI document's parse)
runs in worker threads that share the GIL with the event loop.  ``kube-gateway serve``
sets the GIL's switch interval to :data:`gateway.app.SWITCH_INTERVAL` (1 ms; Python's is
5 ms) so that the loop gets the GIL back soon after each wait for I/O; the suite sets it
too, or a test would see a loop up to five times slower beside a build than a served
gateway is (a flood of gRPC calls opened during the first schema build was refused ~1.5 s
late on a slow machine at 5 ms).
"""

from __future__ import annotations

import sys

import pytest

from gateway.app import SWITCH_INTERVAL


def pytest_configure(config: pytest.Config) -> None:
    sys.setswitchinterval(SWITCH_INTERVAL)

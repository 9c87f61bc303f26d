"""pytest wiring for the end-to-end suite: the ``e2e`` marker and the apiserver fixture.

Every test under tests/e2e/ is marked ``e2e``, so ``pytest -m e2e`` runs only these and
``pytest -m "not e2e"`` never starts an apiserver.  Starting and stopping etcd and
kube-apiserver lives in apiserver.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.apiserver import BinariesMissing, KubeAPIServer, running_apiserver

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def kube_apiserver() -> Iterator[KubeAPIServer]:
    """One real etcd + kube-apiserver for the whole session, stopped at its end.

    Yields a :class:`KubeAPIServer` (url, ca_file, tokens by identity, token files,
    kubeconfigs); namespaces team-a and team-b, alice's RBAC and the
    images.image.openshift.io CRD are in place.  A sync fixture on purpose: it owns
    processes, not an event loop, so any async test can use it.
    """
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(running_apiserver())
        except BinariesMissing as e:
            pytest.fail(str(e))
        yield server

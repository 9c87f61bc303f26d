"""Demo mode: the gateway in front of the demo upstream, which is not part of the gateway.

The demo upstream (a Kubernetes-compatible API server with live sample data) is a
distribution of its own, ``kube-gateway-demo`` (``demo/`` in the repository, import package
``kube_gateway_demo``), so that the gateway's wheel and container image carry neither a fake
API server nor its tokens.  ``make run`` and ``make test`` install it next to the gateway;
the gateway imports it only when it is to serve it (``serve --demo``, or no cluster
configured at all), and takes its own identity there from the demo itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.core import ConfigError

if TYPE_CHECKING:
    from kube_gateway_demo import DemoUpstream

#: How to get the demo upstream (ends the error of a start that wants it).
INSTALL_HINT = "run `make run` from a checkout, or `pip install ./demo`"


def upstream_class(*, asked: bool) -> type[DemoUpstream]:
    """The demo upstream's class, imported now.

    Args:
        asked: ``--demo`` was given (else no cluster was found), for the error's wording.

    Raises:
        ConfigError: the demo upstream is not installed (one line: why the demo was wanted
            and how to get it).
    """
    try:
        from kube_gateway_demo import DemoUpstream
    except ModuleNotFoundError as exc:
        if exc.name != "kube_gateway_demo":
            raise  # installed but broken: the traceback says more than a message would
        wanted = (
            "--demo was given but"
            if asked
            else "no cluster was found (no kubeconfig or in-cluster config) and"
        )
        raise ConfigError(f"{wanted} the demo upstream is not installed: {INSTALL_HINT}") from None
    return DemoUpstream


def admin_token() -> str:
    """The demo upstream's admin token: the gateway's own identity in demo mode (discovery,
    shared watches) and the one GraphiQL's example tabs carry.  Only asked in demo mode,
    where the demo upstream is installed (and already imported)."""
    return upstream_class(asked=True).admin_token

"""The demo upstream and the gateway in front of it, as fixtures (tests/support/graphql.py)."""

from tests.support.graphql import client, demo, gateway

__all__ = ["client", "demo", "gateway"]

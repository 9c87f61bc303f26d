"""The generated message classes, found by name (the only bridge to ``gateway/grpc/gen``).

The servicer and the codec are generic over the contract, so they look message classes up
by their contract name (``Pod``, ``ListPodsRequest``) instead of importing stubs by hand.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Any, Final

from gateway.grpc.contract import Contract, contract

__all__ = ["GEN_PACKAGE", "MessageClass", "file_descriptors", "message_class", "module_for"]

GEN_PACKAGE: Final = "gateway.grpc.gen"

#: A generated message class (the stubs are untyped for mypy: see pyproject's exclude).
MessageClass = Any


def module_for(proto_path: str) -> ModuleType:
    """The ``_pb2`` module of a contract file (``kubegateway/v1/pods.proto``)."""
    stem = proto_path.removesuffix(".proto").replace("/", ".")
    return importlib.import_module(f"{GEN_PACKAGE}.{stem}_pb2")


@functools.cache
def _classes(c: Contract) -> dict[str, MessageClass]:
    found: dict[str, MessageClass] = {}
    for f in c.files:
        module = module_for(f.path)
        for m in f.messages:
            found[m.name] = getattr(module, m.name)
    return found


def message_class(name: str, c: Contract | None = None) -> MessageClass:
    """The generated class of the contract message ``name``.

    Raises:
        KeyError: no such message in the contract.
    """
    return _classes(c or contract())[name]


def file_descriptors(c: Contract | None = None) -> list[Any]:
    """The file descriptors of every contract file (for reflection)."""
    return [module_for(f.path).DESCRIPTOR for f in (c or contract()).files]

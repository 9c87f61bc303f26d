"""JSON helpers shared by the demo modules."""

from __future__ import annotations

import re
from typing import Any, ClassVar, Final, TypeVar

import orjson
import yaml

T = TypeVar("T")


def clone(value: T) -> T:
    """A deep copy of a JSON document (much faster than ``copy.deepcopy``)."""
    copied: T = orjson.loads(orjson.dumps(value, default=str))
    return copied


class _JSONishLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """A safe YAML loader that reads scalars as Go's YAML-to-JSON does: timestamps stay
    strings, and YAML 1.1's ``y``/``n`` are booleans too."""

    bool_values: ClassVar[dict[str, bool]] = {
        **yaml.constructor.SafeConstructor.bool_values,
        "y": True,
        "n": False,
    }


_JSONishLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_JSONishLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN")
)

YAML_LOADER: Final = _JSONishLoader


def load_yaml(raw: bytes) -> Any:
    """Parse YAML (or JSON) into JSON-compatible values."""
    return yaml.load(raw, Loader=YAML_LOADER)

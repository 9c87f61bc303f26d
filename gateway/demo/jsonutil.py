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

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.duplicates: list[str] = []

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                # sigs.k8s.io/yaml's strict error for a repeated key
                line = key_node.start_mark.line + 1
                self.duplicates.append(f'line {line}: key "{key}" already set in map')
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


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
    return load_yaml_strict(raw)[0]


def load_yaml_strict(raw: bytes) -> tuple[Any, list[str]]:
    """Parse YAML, also returning sigs.k8s.io/yaml's strict errors for repeated keys."""
    loader = YAML_LOADER(raw)
    try:
        value = loader.get_single_data()
    finally:
        loader.dispose()
    return value, loader.duplicates

"""Field numbers: assigned once, recorded in ``protos/field_numbers.json``, never changed.

A message's existing fields keep their numbers; a new field takes the next free number; a
field that disappears from the schema is *retired*: its number and name stay reserved in the
``.proto`` so no later field can reuse them (a retired field that comes back gets its old
number again).  Enum values are fixed in :mod:`gateway.grpc.contract` and not recorded here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["LOCK_FILE", "Assignment", "FieldNumbers"]

LOCK_FILE: Final = "field_numbers.json"
#: Numbers the protobuf implementation reserves for itself.
_IMPLEMENTATION_RESERVED: Final = range(19000, 20000)
_MAX_NUMBER: Final = 536_870_911
_COMMENT: Final = (
    "Proto field numbers of kubegateway.v1, assigned once by gateway/grpc/protogen.py and "
    "never changed: edit only by running `make protos`. 'retired' numbers are reserved."
)


@dataclass(slots=True)
class Assignment:
    """The numbers of one message."""

    fields: dict[str, int] = field(default_factory=dict)
    retired: dict[str, int] = field(default_factory=dict)

    def _next(self) -> int:
        used = set(self.fields.values()) | set(self.retired.values())
        n = max(used, default=0) + 1
        while n in _IMPLEMENTATION_RESERVED:
            n = _IMPLEMENTATION_RESERVED.stop
        if n > _MAX_NUMBER:
            raise ValueError("no field numbers left")
        return n

    def assign(self, names: Iterable[str]) -> dict[str, int]:
        """Numbers for ``names`` (in declaration order), retiring fields no longer present."""
        wanted = list(names)
        for name in wanted:
            if name in self.fields:
                continue
            if name in self.retired:
                self.fields[name] = self.retired.pop(name)
            else:
                self.fields[name] = self._next()
        present = set(wanted)
        for name in [n for n in self.fields if n not in present]:
            self.retired[name] = self.fields.pop(name)
        return {name: self.fields[name] for name in wanted}


class FieldNumbers:
    """The lock of every message's field numbers."""

    def __init__(self, messages: Mapping[str, Assignment] | None = None) -> None:
        self.messages: dict[str, Assignment] = dict(messages or {})

    @classmethod
    def loads(cls, text: str) -> FieldNumbers:
        """Read a lock file's text (``""`` for a fresh lock)."""
        if not text.strip():
            return cls()
        raw: dict[str, Any] = json.loads(text)
        messages = {
            name: Assignment(dict(entry.get("fields", {})), dict(entry.get("retired", {})))
            for name, entry in raw.get("messages", {}).items()
        }
        return cls(messages)

    def dumps(self) -> str:
        """The lock as canonical JSON text (sorted, one field per line, trailing newline)."""
        out: dict[str, Any] = {"comment": _COMMENT, "messages": {}}
        for name in sorted(self.messages):
            a = self.messages[name]
            entry: dict[str, Any] = {"fields": dict(sorted(a.fields.items(), key=lambda kv: kv[1]))}
            if a.retired:
                entry["retired"] = dict(sorted(a.retired.items(), key=lambda kv: kv[1]))
            out["messages"][name] = entry
        return json.dumps(out, indent=2, ensure_ascii=False) + "\n"

    def assign(self, message: str, names: Iterable[str]) -> dict[str, int]:
        """The numbers of ``message``'s fields, assigning new ones as needed."""
        return self.messages.setdefault(message, Assignment()).assign(names)

    def retired(self, message: str) -> dict[str, int]:
        """Retired field names and numbers of ``message``."""
        a = self.messages.get(message)
        return dict(a.retired) if a else {}

"""The wire vocabulary the core shares: a decoded Kubernetes JSON object."""

from __future__ import annotations

from typing import Any

#: A decoded JSON object as the upstream sent it (never converted into classes).
JSON = dict[str, Any]

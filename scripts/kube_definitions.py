"""Extract the trimmed Kubernetes definitions file from ``kubernetes-validate``.

``gateway/core/model/schemas/kubernetes-v1.36.json`` is generated, never edited by hand:

    .venv/bin/python scripts/extract_schemas.py            # rewrite it
    .venv/bin/python scripts/extract_schemas.py --check    # exit 1 if it has drifted

The source is the JSON schema that the ``kubernetes-validate`` package (a dev dependency)
ships per Kubernetes release, itself generated from the apiserver's OpenAPI.  It is written
as JSON Schema 2020-12 (``$defs``, nullable ``type`` lists, ``oneOf`` for IntOrString and
Quantity); the output is normalised back to the OpenAPI v2 ``definitions`` form that the
apiserver serves, keeping only the definitions reachable from the served kinds:

* the kind and list kind of every resource in the registry whose group is in Kubernetes
  (found by ``x-kubernetes-group-version-kind``, not by guessing definition names);
* the apimachinery meta types a front end needs on its own (:data:`META_ROOTS`);
* every ``io.k8s.*`` definition that a hand-written supplement (:data:`SUPPLEMENT_FILES`,
  e.g. OpenShift's ``Image``) refers to.

Only the keys in ``KEPT_KEYS`` (the field model's: :mod:`gateway.core.model.openapi`)
survive.  A key that is neither kept nor listed in :data:`DROPPED_KEYS` stops the
extraction, so a new schema feature in a later release is noticed instead of being
silently lost.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final

from gateway.core.model.openapi import KEPT_KEYS
from gateway.core.model.registry import REGISTRY, Registry
from gateway.core.model.schema import SCHEMA_DIR

#: The Kubernetes release whose definitions the gateway serves (the e2e suite builds
#: kube-apiserver v1.36.x; API types do not change within a minor release).
KUBERNETES_VERSION: Final = "v1.36.0"
SOURCE_PACKAGE: Final = "kubernetes_validate"
SOURCE_PATH: Final = f"kubernetes-json-schema/{KUBERNETES_VERSION}-local/_definitions.json"

KUBERNETES_FILE: Final = "kubernetes-v1.36.json"
#: Hand-written definition files for kinds that Kubernetes' OpenAPI does not define.
SUPPLEMENT_FILES: Final = ("image.openshift.io-v1.json",)

_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1."
#: Meta types served on their own (errors, delete bodies, watch events), beyond what the
#: kinds reach through ``metadata``.
META_ROOTS: Final = tuple(
    _META + name
    for name in (
        "DeleteOptions",
        "ListMeta",
        "ObjectMeta",
        "Preconditions",
        "Status",
        "StatusCause",
        "StatusDetails",
        "WatchEvent",
    )
)

#: Keys known to carry nothing the generators use (union discriminators are documentation
#: only: the apiserver validates them, the gateway passes the object through).
DROPPED_KEYS: Final = frozenset({"x-kubernetes-unions"})

_SOURCE_REF_PREFIXES: Final = ("#/$defs/", "/api/_definitions.json#/$defs/", "#/definitions/")
REF_PREFIX: Final = "#/definitions/"


class ExtractError(Exception):
    """The source schema has a shape this extractor does not know how to translate."""


def load_source() -> dict[str, Any]:
    """Read the release's definitions from the installed ``kubernetes-validate`` package.

    Returns:
        The ``$defs`` mapping of the source file, by definition id.

    Raises:
        ExtractError: the package (a dev dependency) is not installed.
    """
    try:
        root = resources.files(SOURCE_PACKAGE)
    except ModuleNotFoundError:
        raise ExtractError(
            f"{SOURCE_PACKAGE} is not installed: pip install -e '.[dev]' first"
        ) from None
    data: dict[str, Any] = json.loads(root.joinpath(SOURCE_PATH).read_text("utf-8"))
    defs: dict[str, Any] = data["$defs"]
    return defs


def load_supplements(schema_dir: Path = SCHEMA_DIR) -> dict[str, Any]:
    """Read the hand-written definition files, merged by definition id."""
    merged: dict[str, Any] = {}
    for name in SUPPLEMENT_FILES:
        doc = json.loads((schema_dir / name).read_text("utf-8"))
        merged.update(doc["definitions"])
    return merged


def ref_target(ref: str) -> str:
    """The definition id a ``$ref`` points to, in either the source or the output form."""
    for prefix in _SOURCE_REF_PREFIXES:
        if ref.startswith(prefix):
            return ref[len(prefix) :]
    raise ExtractError(f"unsupported $ref {ref!r}")


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                # (a property called "$ref", as JSONSchemaProps has, is a schema, not a ref)
                yield ref_target(value)
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _by_gvk(defs: Mapping[str, Any]) -> dict[tuple[str, str, str], str]:
    found: dict[tuple[str, str, str], str] = {}
    for name, schema in defs.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", ()):
            key = (gvk["group"], gvk["version"], gvk["kind"])
            # WatchEvent and friends repeat across groups; a kind is defined once per GVK.
            found.setdefault(key, name)
    return found


def roots(
    source: Mapping[str, Any], supplements: Mapping[str, Any], registry: Registry = REGISTRY
) -> list[str]:
    """The definitions the trimmed file must contain, before following references.

    Raises:
        ExtractError: a registered kind is defined neither upstream nor in a supplement.
    """
    upstream = _by_gvk(source)
    supplied = _by_gvk(supplements)
    found: list[str] = list(META_ROOTS)
    for resource in registry.values():
        for kind in (resource.kind, resource.list_kind):
            key = (resource.group, resource.version, kind)
            if key in upstream:
                found.append(upstream[key])
            elif key not in supplied:
                raise ExtractError(f"no definition for {resource.api_version} {kind}")
    found.extend(ref for ref in _refs(supplements) if ref not in supplements)
    return found


def reachable(source: Mapping[str, Any], start: Sequence[str]) -> list[str]:
    """Every definition reachable from ``start`` through ``$ref``, sorted by id.

    Raises:
        ExtractError: a reference points at a definition the source does not have.
    """
    seen: set[str] = set()
    stack = list(start)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        if name not in source:
            raise ExtractError(f"dangling reference to {name!r}")
        seen.add(name)
        stack.extend(_refs(source[name]))
    return sorted(seen)


def _type(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    kinds = [v for v in value if v != "null"]
    if len(kinds) != 1:
        raise ExtractError(f"{where}: cannot translate type {value!r}")
    return str(kinds[0])


def normalize(node: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Translate one source schema node into its OpenAPI v2 form, keeping :data:`KEPT_KEYS`.

    Raises:
        ExtractError: an unknown key, or a ``oneOf`` other than IntOrString or Quantity.
    """
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "oneOf":
            kinds = sorted(_type(alt["type"], where) for alt in value)
            if kinds == ["integer", "string"]:  # IntOrString, as the apiserver's OpenAPI has it
                out.update(type="string", format="int-or-string")
            elif kinds == ["number", "string"]:  # Quantity: a string on the wire
                out["type"] = "string"
            else:
                raise ExtractError(f"{where}: cannot translate oneOf {kinds}")
        elif key in DROPPED_KEYS:
            continue
        elif key not in KEPT_KEYS:
            raise ExtractError(f"{where}: unknown schema key {key!r}")
        elif key == "type":
            out[key] = _type(value, where)
        elif key == "$ref":
            out[key] = REF_PREFIX + ref_target(value)
        elif key == "properties":
            out[key] = {name: normalize(sub, f"{where}.{name}") for name, sub in value.items()}
        elif key == "items":
            out[key] = normalize(value, f"{where}[]")
        elif key == "additionalProperties" and isinstance(value, dict):
            out[key] = normalize(value, f"{where}{{}}")
        else:
            out[key] = value
    return out


def extract(source: Mapping[str, Any], supplements: Mapping[str, Any]) -> dict[str, Any]:
    """Build the trimmed definitions document (pure: no I/O)."""
    names = reachable(source, roots(source, supplements))
    return {
        "definitions": {name: normalize(source[name], name) for name in names},
        "info": {
            "title": f"Kubernetes {KUBERNETES_VERSION} definitions served by kube-gateway",
            "version": KUBERNETES_VERSION,
            "x-generated-by": "scripts/extract_schemas.py (do not edit by hand)",
            "x-source": f"PyPI kubernetes-validate: {SOURCE_PATH}",
        },
    }


def render(doc: Mapping[str, Any]) -> str:
    """The canonical text of a definitions file: sorted keys, two-space indent, final newline."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def generate(schema_dir: Path = SCHEMA_DIR) -> str:
    """The text ``kubernetes-v1.36.json`` should have, from the installed source package."""
    return render(extract(load_source(), load_supplements(schema_dir)))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file differs")
    args = parser.parse_args(argv)
    return write_or_check(SCHEMA_DIR / KUBERNETES_FILE, generate(), check=args.check)


def write_or_check(target: Path, text: str, *, check: bool) -> int:
    """Write a generated definitions file when it changed; with ``check``, only say whether
    the committed one is out of date (exit status 1)."""
    current = target.read_text("utf-8") if target.exists() else None
    if check:
        if current != text:
            print(f"{target} is out of date: run scripts/extract_schemas.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, "utf-8")
        print(f"wrote {target} ({len(json.loads(text)['definitions'])} definitions)")
    return 0

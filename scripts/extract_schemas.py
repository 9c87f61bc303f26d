"""Regenerate gateway/core/model/schemas/kubernetes-v1.36.json (see
scripts/kube_definitions.py) and
the demo upstream's demo/kube_gateway_demo/schemas/kubernetes-demo.json
(scripts/demo_definitions.py): build-time tools, shipped with neither distribution.

Run with the project's venv, where the ``kubernetes-validate`` dev dependency is installed:

    .venv/bin/python scripts/extract_schemas.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

# This checkout's gateway and demo (a copy being regenerated is not the one installed).
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "demo")]

from scripts.demo_definitions import main as demo_main  # noqa: E402
from scripts.kube_definitions import main  # noqa: E402

if __name__ == "__main__":
    argv = sys.argv[1:]
    raise SystemExit(max(main(argv), demo_main(argv)))

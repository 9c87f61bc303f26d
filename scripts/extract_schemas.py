"""Regenerate gateway/core/model/schemas/kubernetes-v1.36.json (see
gateway/core/model/_extract.py) and
the demo upstream's demo/kube_gateway_demo/schemas/kubernetes-demo.json
(demo/kube_gateway_demo/_extract.py).

Run with the project's venv, where the ``kubernetes-validate`` dev dependency is installed:

    .venv/bin/python scripts/extract_schemas.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

# This checkout's gateway and demo (a copy being regenerated is not the one installed).
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "demo")]

from gateway.core.model._extract import main
from kube_gateway_demo._extract import main as demo_main

if __name__ == "__main__":
    argv = sys.argv[1:]
    raise SystemExit(max(main(argv), demo_main(argv)))

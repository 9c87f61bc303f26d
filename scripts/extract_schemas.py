"""Regenerate gateway/core/schemas/kubernetes-v1.36.json (see gateway/core/_extract.py) and
the demo upstream's gateway/demo/schemas/kubernetes-demo.json (gateway/demo/_extract.py).

Run with the project's venv, where the ``kubernetes-validate`` dev dependency is installed:

    .venv/bin/python scripts/extract_schemas.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.core._extract import main
from gateway.demo._extract import main as demo_main

if __name__ == "__main__":
    argv = sys.argv[1:]
    raise SystemExit(max(main(argv), demo_main(argv)))

"""``python -m gateway.graphql [PATH]``: write the SDL (default: stdout)."""

from __future__ import annotations

import sys
from pathlib import Path

from gateway.graphql.schemas.seed import sdl


def main(argv: list[str]) -> int:
    text = sdl()
    if argv:
        Path(argv[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

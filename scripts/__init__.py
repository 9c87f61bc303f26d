"""Build-time tools: the generators of committed files (``make generate``), run from a
checkout, shipped with neither the gateway nor the demo distribution."""

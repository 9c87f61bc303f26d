"""GraphiQL, served from assets vendored in the package (no CDN: it works offline).

``static/`` holds the UMD builds of GraphiQL 3.8.3, React 18.2.0 and ReactDOM 18.2.0 as
published on npm (licences in ``static/LICENSES.txt``).  The page reads optional ``query``,
``variables`` and ``headers`` URL parameters, so a link can open a ready-to-run query.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent / "static"

PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>kube-gateway GraphiQL</title>
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <link rel="stylesheet" href="{static}/graphiql.min.css">
  <style>html, body, #graphiql {{ height: 100%; margin: 0; }}</style>
</head>
<body>
  <div id="graphiql">Loading GraphiQL...</div>
  <script src="{static}/react.production.min.js"></script>
  <script src="{static}/react-dom.production.min.js"></script>
  <script src="{static}/graphiql.min.js"></script>
  <script>
    const params = new URLSearchParams(window.location.search);
    const fetcher = GraphiQL.createFetcher({{ url: "{endpoint}" }});
    const props = {{ fetcher, defaultEditorToolsVisibility: true }};
    for (const name of ["query", "variables", "headers"]) {{
      if (params.has(name)) props[name] = params.get(name);
    }}
    ReactDOM.createRoot(document.getElementById("graphiql"))
      .render(React.createElement(GraphiQL, props));
  </script>
</body>
</html>
"""


def page(endpoint: str = "/graphql", static: str = "/graphql/static") -> str:
    """The GraphiQL HTML page for ``endpoint``, loading its assets from ``static``."""
    return PAGE.format(endpoint=endpoint, static=static)


def page_headers(html: str) -> dict[str, str]:
    """Headers that keep the page from being framed, sniffed or fed foreign scripts.

    The page's one inline script is allowed by its hash; scripts load only from this
    origin; requests (fetch, WebSocket) go only to this origin.
    """
    inline = re.findall(r"<script>(.*?)</script>", html, flags=re.DOTALL)
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in inline
    )
    policy = "; ".join(
        (
            "default-src 'none'",
            f"script-src 'self' {hashes}",
            "style-src 'self' 'unsafe-inline'",  # GraphiQL's editors set inline styles
            "img-src 'self' data:",
            "font-src 'self' data:",
            "connect-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )
    return {**NOSNIFF, "Content-Security-Policy": policy, "X-Frame-Options": "DENY"}


#: For every asset: never guess a content type.
NOSNIFF = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}

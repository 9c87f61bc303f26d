"""GraphiQL, served from assets vendored in the package (no CDN: it works offline).

``static/`` holds the UMD builds of GraphiQL 3.8.3, React 18.2.0 and ReactDOM 18.2.0 as
published on npm (licences in ``static/LICENSES.txt``).  The page reads optional ``query``,
``variables`` and ``headers`` URL parameters, so a link can open a ready-to-run query.
"""

from __future__ import annotations

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

"""GraphiQL, served from assets vendored in the package (no CDN: it works offline).

``static/`` holds the UMD builds of GraphiQL 3.8.3, React 18.2.0 and ReactDOM 18.2.0 as
published on npm (licences in ``static/LICENSES.txt``).  GraphiQL's build bundles the
``graphql-ws`` client (version 5, MIT): GraphiQL's fetcher runs subscriptions with it over
graphql-transport-ws on the same path as queries, and sends the Headers pane as the
``connection_init`` payload, where :func:`gateway.graphql.resolvers.context.credential_from_payload`
finds the ``Authorization`` header.

The page is the same for every gateway; it asks ``<endpoint>/graphiql.json`` for its
start-up settings (:func:`settings`): in demo mode the demo's admin token in the Headers
pane and example tabs on the demo data, otherwise nothing (no token is ever put in the
page).  The page reads optional ``query``, ``variables`` and ``headers`` URL parameters,
so a link can open a ready-to-run query (they replace the example tabs).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from starlette.responses import JSONResponse, Response

from gateway import demomode

STATIC_DIR = Path(__file__).resolve().parent / "static"

#: For every asset: never guess a content type.
NOSNIFF = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}

#: The localStorage namespace of GraphiQL's state in demo mode: tabs and headers saved
#: while the demo was served are never shown by a gateway of a real cluster at the same
#: address (and the other way round).
DEMO_STORAGE = "kube-gateway-demo"

DEMO_QUERY = """\
# The pods of the demo namespace. The demo's admin
# token is in the Headers pane below; the Docs button
# (top left) opens the schema.
query DemoPods {
  pods(namespace: "demo") {
    items {
      metadata { name labels }
      status { phase podIP }
    }
  }
}
"""

DEMO_SUBSCRIPTION = """\
# Live changes to the pods of "demo", over a WebSocket:
# the demo starts and ends "ticker" pods every few
# seconds. Run LabelWebPod in the next tab and watch
# its change arrive here.
subscription WatchDemoPods {
  watchPods(namespace: "demo") {
    type
    object {
      metadata { name resourceVersion labels }
      status { phase }
    }
  }
}
"""

DEMO_MUTATION = """\
# Labels a demo pod (a merge patch). Change the label
# in the Variables pane to see WatchDemoPods report it.
mutation LabelWebPod($patch: JSON!) {
  patchPod(namespace: "demo", name: "web-6d4b9c7f5-x7k2p", patch: $patch) {
    metadata { name resourceVersion labels }
  }
}
"""

DEMO_LIVE_VIEW = """\
# A live view: the "web" pods of demo, sorted,
# with their total, at once and then again only
# when what it shows changes (the ticker pods do
# not touch it). Run LabelWebPod (previous tab)
# with another label value: it arrives here.
subscription LiveWebPods {
  podsView(
    namespace: "demo"
    filter: { labelSelector: "app=web" }
    sort: [{ field: "metadata.name" }]
    first: 10
    interval: 250
  ) {
    total
    resourceVersion
    nodes { metadata { name labels } status { phase } }
  }
}
"""

DEMO_RELATIONS = """\
# Kinds the gateway discovered in the cluster, and the
# relations between them (each batched: one upstream
# list per kind, however many parents).
query DemoRelations {
  deployments(namespace: "demo") {
    items {
      metadata { name }
      replicaSets {
        metadata { name }
        pods { metadata { name } node { metadata { name } } }
      }
    }
  }
  services(namespace: "demo") {
    items {
      metadata { name }
      endpoints { subsets { addresses { ip targetRef { pod { metadata { name } } } } } }
    }
  }
}
# The demo's custom resource (Widget) has the schema of its API group:
# open /apis/demo.kube-gateway.dev/graphql
"""

#: The group tab: the demo's custom resource, in its group's schema.
DEMO_GROUP = "demo.kube-gateway.dev"
DEMO_WIDGETS = """# A custom resource, served by its API group's schema
# (/apis/demo.kube-gateway.dev/graphql), events linked as on every kind.
query DemoWidgets {
  widgets(namespace: "demo") {
    items { metadata { name } spec { color size } events { reason } }
  }
}
"""

#: The fleet endpoint's tabs (``/fleet/graphql``): every cluster at once.
DEMO_FLEET_QUERY = """# Every cluster at once (`make run ARGS=--demo-clusters=2`
# serves two): one entry per cluster, asked concurrently;
# a cluster's errors stay its own (errors[].path, extensions.cluster).
query FleetPods {
  fleet {
    cluster
    error { code message }
    pods(namespace: "demo") { items { metadata { name } status { phase } } }
  }
}
"""
DEMO_FLEET_WATCH = """# Changes in every cluster, each tagged with its cluster.
# To resume after a disconnect, pass each cluster's last
# resourceVersion: resumeFrom: {"default": "123", "demo-2": "456"}
subscription FleetWatchPods {
  watchPods(namespace: "demo") {
    cluster
    type
    resourceVersion
    object { metadata { name } status { phase } }
  }
}
"""

DEMO_MUTATION_VARIABLES = {"patch": {"metadata": {"labels": {"tried": "graphiql"}}}}


def settings(*, demo: bool, group: str | None = None, fleet: bool = False) -> dict[str, Any]:
    """The page's start-up settings: empty unless the gateway serves its demo upstream.

    In demo mode: ``headers`` (the Headers pane of every tab, new ones included),
    ``storage`` (the localStorage namespace) and ``tabs`` (an example query, subscription
    and mutation on the demo data, and at ``/graphql`` a live view and a query across
    discovered kinds' relations, or the demo's custom resource at its group's endpoint);
    ``fleet``: the fleet endpoint's (a query and a watch of every cluster).
    """
    if not demo:
        return {}
    # the demo upstream's own admin token, so every example runs as it is
    headers = json.dumps({"Authorization": f"Bearer {demomode.admin_token()}"}, indent=2)
    if fleet:
        tabs = [{"query": q, "headers": headers} for q in (DEMO_FLEET_QUERY, DEMO_FLEET_WATCH)]
        return {"headers": headers, "storage": DEMO_STORAGE, "tabs": tabs}
    variables = json.dumps(DEMO_MUTATION_VARIABLES, indent=2)
    last = DEMO_WIDGETS if group == DEMO_GROUP else DEMO_RELATIONS
    tabs = [
        {"query": DEMO_QUERY, "headers": headers},
        {"query": DEMO_SUBSCRIPTION, "headers": headers},
        {"query": DEMO_MUTATION, "variables": variables, "headers": headers},
    ]
    if group is None:
        tabs.append({"query": DEMO_LIVE_VIEW, "headers": headers})
    if group is None or group == DEMO_GROUP:
        tabs.append({"query": last, "headers": headers})
    return {"headers": headers, "storage": DEMO_STORAGE, "tabs": tabs}


def settings_response(*, demo: bool, group: str | None, fleet: bool = False) -> Response:
    """``GET <endpoint>/graphiql.json``: :func:`settings` for the serving gateway.

    ``demo``: the endpoint serves the gateway's own demo upstream, whose tokens it knows.
    Never cached, so a browser that saw the demo does not reuse its settings for another
    gateway at the same address.
    """
    return JSONResponse(
        settings(demo=demo, group=group, fleet=fleet),
        headers={**NOSNIFF, "Cache-Control": "no-store"},
    )


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
    const endpoint = "{endpoint}";
    const params = new URLSearchParams(window.location.search);
    // Subscriptions: graphql-transport-ws on the same path; the fetcher sends the Headers
    // pane as the connection_init payload.
    const socket = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + endpoint;
    const fetcher = GraphiQL.createFetcher({{ url: endpoint, subscriptionUrl: socket }});
    const start = (settings) => {{
      const props = {{ fetcher, defaultEditorToolsVisibility: true }};
      if (settings.headers) {{
        props.defaultHeaders = settings.headers;
        props.shouldPersistHeaders = true;
        props.defaultEditorToolsVisibility = "headers";
      }}
      if (settings.storage) {{
        props.storage = GraphiQL.createLocalStorage({{ namespace: settings.storage }});
      }}
      const linked = ["query", "variables", "headers"].filter((name) => params.has(name));
      for (const name of linked) props[name] = params.get(name);
      if (!linked.length && settings.tabs) props.defaultTabs = settings.tabs;
      ReactDOM.createRoot(document.getElementById("graphiql"))
        .render(React.createElement(GraphiQL, props));
    }};
    fetch("{settings}", {{ headers: {{ Accept: "application/json" }} }})
      .then((response) => (response.ok ? response.json() : {{}}))
      .catch(() => ({{}}))
      .then(start);
  </script>
</body>
</html>
"""


_SAFE_PATH = re.compile(r"/[A-Za-z0-9/._-]*")


def page(endpoint: str = "/graphql", static: str = "/graphql/static") -> str:
    """The GraphiQL HTML page for ``endpoint``, loading its assets from ``static`` and its
    settings from ``<endpoint>/graphiql.json``.  ``endpoint`` is a request's path (a group's
    endpoint, ``/apis/<group>/graphql``): anything but plain path characters is refused for
    ``/graphql``, so a path never writes into the page."""
    if not _SAFE_PATH.fullmatch(endpoint):
        endpoint = "/graphql"
    return PAGE.format(endpoint=endpoint, static=static, settings=f"{endpoint}/graphiql.json")


def page_headers(html: str) -> dict[str, str]:
    """Headers that keep the page from being framed, sniffed or fed foreign scripts.

    The page's one inline script is allowed by its hash; scripts load only from this
    origin; requests go only to this origin: ``connect-src 'self'`` also allows the
    WebSocket of subscriptions, ``ws:``/``wss:`` to this host and port only (Content
    Security Policy level 3 matches ``'self'`` so).
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

"""The wire: GraphQL over HTTP (POST, GET, SSE, multipart), both WebSocket protocols,
GraphiQL and its assets, browser origins, and the ``Endpoint`` protocol they serve.
"""

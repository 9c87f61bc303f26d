// graphql-sse, the client of the GraphQL over Server-Sent Events protocol: every operation
// is a POST whose answer is an event stream (a subscription's stays open), so it passes
// through HTTP proxies and load balancers that do not speak WebSocket.
import { createClient } from "graphql-sse";
import { run, sinkOps, token, url } from "./scenario.mjs";

const client = createClient({
  url, // http://localhost:8080/graphql
  headers: { Authorization: `Bearer ${token}` },
});

// The same API as graphql-ws: client.subscribe(request, sink), client.iterate(request).
const status = await run("graphql-sse", sinkOps(client));
client.dispose();
process.exit(status);

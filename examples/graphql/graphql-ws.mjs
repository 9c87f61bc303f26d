// graphql-ws, the plain client of the GraphQL over WebSocket protocol: queries, mutations
// and subscriptions over one WebSocket, the token sent in connection_init.
import { createClient } from "graphql-ws";
import WebSocket from "ws"; // Node 20 has no global WebSocket (browsers and Node 22 do)
import { run, sinkOps, token, wsUrl } from "./scenario.mjs";

const client = createClient({
  url: wsUrl, // ws://localhost:8080/graphql
  webSocketImpl: WebSocket,
  connectionParams: { Authorization: `Bearer ${token}` },
});

// client.subscribe(request, sink) runs any operation; client.iterate(request) too, as an
// async iterator (see sinkOps in scenario.mjs).
const status = await run("graphql-ws", sinkOps(client));
await client.dispose();
process.exit(status);

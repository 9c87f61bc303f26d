// urql: queries and mutations over HTTP (fetchExchange), subscriptions over graphql-ws
// (subscriptionExchange).
import { Client, fetchExchange, subscriptionExchange } from "@urql/core";
import { createClient as createWsClient } from "graphql-ws";
import WebSocket from "ws"; // Node 20 has no global WebSocket (browsers and Node 22 do)
import { run, token, url, wsUrl } from "./scenario.mjs";

const ws = createWsClient({
  url: wsUrl,
  webSocketImpl: WebSocket,
  connectionParams: { Authorization: `Bearer ${token}` },
});

const client = new Client({
  url,
  fetchOptions: { headers: { Authorization: `Bearer ${token}` } },
  requestPolicy: "network-only",
  exchanges: [
    fetchExchange,
    subscriptionExchange({
      forwardSubscription(request) {
        const input = { ...request, query: request.query || "" };
        return { subscribe: (sink) => ({ unsubscribe: ws.subscribe(input, sink) }) };
      },
    }),
  ],
});

/** The data of a query or mutation result (urql reports errors in `error`). */
function data({ data, error }) {
  if (error) throw error;
  return data;
}

const status = await run("urql", {
  query: async (query, variables) => data(await client.query(query, variables).toPromise()),
  mutate: async (query, variables) => data(await client.mutation(query, variables).toPromise()),
  subscribe(query, variables, onData, onError) {
    const { unsubscribe } = client
      .subscription(query, variables)
      .subscribe((r) => (r.error ? onError(r.error) : onData(r.data)));
    return unsubscribe;
  },
});
await ws.dispose();
process.exit(status);

// Apollo Client: queries and mutations over HTTP (HttpLink), subscriptions over graphql-ws
// (GraphQLWsLink), split by operation type. With MULTIPART=1 there is no WebSocket at all:
// HttpLink sends subscriptions too, read as multipart/mixed HTTP responses (Apollo's
// multipart subscription protocol, which the gateway speaks).
import { ApolloClient, HttpLink, InMemoryCache, gql, split } from "@apollo/client";
import { GraphQLWsLink } from "@apollo/client/link/subscriptions";
import { getMainDefinition } from "@apollo/client/utilities";
import { createClient } from "graphql-ws";
import WebSocket from "ws"; // Node 20 has no global WebSocket (browsers and Node 22 do)
import { run, token, url, wsUrl } from "./scenario.mjs";

const multipart = process.env.MULTIPART === "1";
const http = new HttpLink({ uri: url, headers: { Authorization: `Bearer ${token}` } });
const ws = multipart
  ? null
  : createClient({
      url: wsUrl,
      webSocketImpl: WebSocket,
      connectionParams: { Authorization: `Bearer ${token}` },
    });
const isSubscription = ({ query }) => {
  const definition = getMainDefinition(query);
  return definition.kind === "OperationDefinition" && definition.operation === "subscription";
};

const client = new ApolloClient({
  link: ws ? split(isSubscription, new GraphQLWsLink(ws), http) : http,
  cache: new InMemoryCache(),
  defaultOptions: { query: { fetchPolicy: "no-cache" } },
});

const status = await run(multipart ? "apollo-multipart" : "apollo", {
  query: async (query, variables) => (await client.query({ query: gql(query), variables })).data,
  mutate: async (query, variables) => (await client.mutate({ mutation: gql(query), variables })).data,
  subscribe(query, variables, onData, onError) {
    const subscription = client
      .subscribe({ query: gql(query), variables })
      .subscribe({ next: (r) => (r.error ? onError(r.error) : onData(r.data)), error: onError });
    return () => subscription.unsubscribe();
  },
});
await ws?.dispose();
process.exit(status);

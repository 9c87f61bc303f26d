// A typed client: graphql-codegen's client preset (codegen.ts) turns each graphql() document
// below into a TypedDocumentNode, so Apollo Client's answers are typed from the gateway's
// schema, ConfigMaps (a discovered kind) included. `tsc` fails when the schema no longer
// has what these documents select. Subscriptions go over HTTP (multipart), no WebSocket.
import { ApolloClient, HttpLink, InMemoryCache } from "@apollo/client";
import { graphql } from "./gql/index.js"; // written by `npx graphql-codegen`
import type { WatchConfigMapSubscription } from "./gql/graphql.js";

const url = process.env.GATEWAY_URL ?? "http://localhost:8080/graphql";
const token = process.env.GATEWAY_TOKEN ?? "admin-token";
const namespace = process.env.NAMESPACE ?? "default";

const CreateConfigMap = graphql(`
  mutation CreateConfigMap($namespace: String!, $name: String!, $data: JSON!) {
    createConfigMap(namespace: $namespace, object: { metadata: { name: $name }, data: $data }) {
      metadata { name resourceVersion }
    }
  }
`);

const ConfigMapData = graphql(`
  query ConfigMapData($namespace: String!, $name: String!) {
    configMap(namespace: $namespace, name: $name) { data metadata { creationTimestamp } }
  }
`);

const WatchConfigMap = graphql(`
  subscription WatchConfigMap($namespace: String!, $name: String!) {
    watchConfigMaps(namespace: $namespace, name: $name) { type object { metadata { name } } }
  }
`);

const DeleteConfigMap = graphql(`
  mutation DeleteConfigMap($namespace: String!, $name: String!) {
    deleteConfigMap(namespace: $namespace, name: $name) { status { status } }
  }
`);

type Change = WatchConfigMapSubscription["watchConfigMaps"];

const client = new ApolloClient({
  link: new HttpLink({ uri: url, headers: { Authorization: `Bearer ${token}` } }),
  cache: new InMemoryCache(),
  defaultOptions: { query: { fetchPolicy: "no-cache" } },
});

/** The first change the subscription delivers. */
function firstChange(variables: { namespace: string; name: string }): Promise<Change> {
  return new Promise((resolve, reject) => {
    const subscription = client.subscribe({ query: WatchConfigMap, variables }).subscribe({
      next({ data, error }) {
        if (error || !data) return reject(error ?? new Error("no data"));
        subscription.unsubscribe();
        resolve(data.watchConfigMaps);
      },
      error: reject,
    });
  });
}

async function main(): Promise<string[]> {
  const variables = { namespace, name: `recipe-typed-${Date.now().toString(36)}` };
  const added = firstChange(variables);
  const created = await client.mutate({
    mutation: CreateConfigMap,
    variables: { ...variables, data: { greeting: "hello" } },
  });
  const change = await added;
  const read = await client.query({ query: ConfigMapData, variables });
  const deleted = await client.mutate({ mutation: DeleteConfigMap, variables });
  const problems: string[] = [];
  if (created.data?.createConfigMap?.metadata?.name !== variables.name) problems.push("create");
  if (change.type !== "ADDED" || change.object?.metadata?.name !== variables.name) {
    problems.push(`event ${JSON.stringify(change)}`);
  }
  if (read.data?.configMap?.data?.greeting !== "hello") problems.push("read");
  if (!read.data?.configMap?.metadata?.creationTimestamp) problems.push("creationTimestamp");
  if (deleted.data?.deleteConfigMap?.status?.status !== "Success") problems.push("delete");
  return problems;
}

const timer = setTimeout(() => {
  console.error("typed: no answer in 30 s");
  process.exit(1);
}, 30_000);
const problems = await main();
clearTimeout(timer);
console.log(JSON.stringify({ client: "typed", ok: problems.length === 0, problems }));
process.exit(problems.length ? 1 : 0);

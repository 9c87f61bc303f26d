// What every recipe does, so that each recipe file shows only its client: subscribe to a
// ConfigMap's changes, create it (a mutation), receive its ADDED event, read it back (a
// query), delete it (a mutation) and receive its DELETED event. Exits 0 only if every
// answer is the expected one.
//
// ConfigMaps are not among the gateway's five built-in kinds: /graphql serves them because
// discovery found them on the cluster (the demo upstream serves them too).
//
// Environment: GATEWAY_URL (default http://localhost:8080/graphql) and GATEWAY_TOKEN (the
// demo's admin, admin-token, by default); NAMESPACE (default "default").
export const url = process.env.GATEWAY_URL ?? "http://localhost:8080/graphql";
export const token = process.env.GATEWAY_TOKEN ?? "admin-token";
export const namespace = process.env.NAMESPACE ?? "default";
export const wsUrl = url.replace(/^http/, "ws");

export const WATCH = `subscription Watch($namespace: String!, $name: String!) {
  watchConfigMaps(namespace: $namespace, name: $name) {
    type
    object { metadata { name } data }
  }
}`;

export const CREATE = `mutation Create($namespace: String!, $name: String!, $data: JSON!) {
  createConfigMap(namespace: $namespace, object: { metadata: { name: $name }, data: $data }) {
    metadata { name uid }
  }
}`;

export const READ = `query Read($namespace: String!, $name: String!) {
  configMap(namespace: $namespace, name: $name) { metadata { name } data }
}`;

export const DELETE = `mutation Delete($namespace: String!, $name: String!) {
  deleteConfigMap(namespace: $namespace, name: $name) {
    object { metadata { name } }
    status { status }
  }
}`;

/** Events pushed by a subscription callback, awaited one at a time. */
export function events() {
  const queued = [];
  const waiting = [];
  return {
    push(event) {
      const next = waiting.shift();
      if (next) next(event);
      else queued.push(event);
    },
    next() {
      return queued.length ? Promise.resolve(queued.shift()) : new Promise((r) => waiting.push(r));
    },
  };
}

/**
 * The scenario's operations through a client of graphql-ws or graphql-sse: both have the
 * same API, `subscribe(request, sink)` (every operation, subscriptions included) and
 * `iterate(request)`.
 */
export function sinkOps(client) {
  /** One result of a query or mutation (the iteration ends after it). */
  async function once(query, variables) {
    for await (const result of client.iterate({ query, variables })) {
      if (result.errors) throw new Error(JSON.stringify(result.errors));
      return result.data;
    }
  }
  return {
    query: once,
    mutate: once,
    subscribe: (query, variables, onData, onError) =>
      client.subscribe(
        { query, variables },
        { next: (r) => (r.errors ? onError(r.errors) : onData(r.data)), error: onError, complete() {} },
      ),
  };
}

function expect(what, actual, expected) {
  const a = JSON.stringify(actual);
  if (a !== JSON.stringify(expected)) throw new Error(`${what}: ${a}, expected ${JSON.stringify(expected)}`);
}

/**
 * Run the scenario through one client.
 *
 * @param client  the recipe's name, printed with the result
 * @param ops     { query(doc, variables), mutate(doc, variables): Promise<data> (throwing on
 *                GraphQL errors); subscribe(doc, variables, onData, onError): stop() }
 */
export async function run(client, ops, timeoutMs = 30_000) {
  const timer = setTimeout(() => {
    console.error(`${client}: no answer in ${timeoutMs} ms`);
    process.exit(1);
  }, timeoutMs);
  const name = `recipe-${client}-${Date.now().toString(36)}`;
  const variables = { namespace, name };
  const changes = events();
  const stop = ops.subscribe(WATCH, variables, (data) => changes.push(data.watchConfigMaps), (error) =>
    changes.push({ error }),
  );
  let status = 0;
  try {
    const created = await ops.mutate(CREATE, { ...variables, data: { greeting: "hello" } });
    expect("created", created.createConfigMap.metadata.name, name);
    const added = await changes.next();
    if (added.error) throw added.error;
    expect("event", [added.type, added.object.metadata.name, added.object.data], ["ADDED", name, { greeting: "hello" }]);
    const read = await ops.query(READ, variables);
    expect("read", read.configMap.data, { greeting: "hello" });
    const deleted = await ops.mutate(DELETE, variables);
    // A ConfigMap's delete answers a Status (a Pod's, with a grace period, the object)
    expect("deleted", deleted.deleteConfigMap.status?.status, "Success");
    let change = await changes.next();
    while (change.type === "MODIFIED") change = await changes.next(); // a graceful delete's
    if (change.error) throw change.error;
    expect("event", [change.type, change.object.metadata.name], ["DELETED", name]);
    console.log(JSON.stringify({ client, ok: true, name }));
  } catch (error) {
    console.error(`${client}: ${error?.stack ?? JSON.stringify(error)}`);
    status = 1;
  } finally {
    stop();
    clearTimeout(timer);
  }
  return status;
}

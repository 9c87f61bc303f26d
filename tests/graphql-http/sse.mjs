// Usage: node sse.mjs <graphql url> <bearer token> <request json> [Last-Event-ID]
// A subscription through graphql-sse's client (distinct connections mode): prints one JSON
// line per result ({"next": <result>}), then {"complete": true} or {"error": ...}.
import { createClient } from "graphql-sse";

const [url, token, body, lastEventId] = process.argv.slice(2);
const headers = { authorization: `Bearer ${token}` };
if (lastEventId) headers["last-event-id"] = lastEventId;
const client = createClient({ url, headers, retryAttempts: 0 });
try {
  for await (const result of client.iterate(JSON.parse(body))) {
    console.log(JSON.stringify({ next: result }));
  }
  console.log(JSON.stringify({ complete: true }));
} catch (error) {
  console.log(JSON.stringify({ error: String(error?.message ?? error) }));
} finally {
  client.dispose();
}

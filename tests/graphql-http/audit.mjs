// Usage: node audit.mjs <graphql url> <bearer token>
// Prints one JSON line per audit: {id, name, status, reason}.
import { serverAudits } from "graphql-http";

const [url, token] = process.argv.slice(2);
const fetchFn = (input, init = {}) =>
  fetch(input, {
    ...init,
    headers: { ...(init.headers || {}), authorization: `Bearer ${token}` },
  });
for (const audit of serverAudits({ url, fetchFn })) {
  const result = await audit.fn();
  console.log(
    JSON.stringify({
      id: audit.id,
      name: audit.name,
      status: result.status,
      reason: result.status === "ok" ? "" : result.reason,
    }),
  );
}

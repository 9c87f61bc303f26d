// Usage: node multipart.mjs <graphql url> <bearer token> <request json> <data parts>
// A multipart subscription as Apollo Client sends it, its parts read by meros: prints one
// JSON line per part ({"part": <json>}), then {"end": true} when the server closed the
// stream, or exits after <data parts> parts that are not heartbeats.
import http from "node:http";
import { meros } from "meros";

const [url, token, body, wanted] = process.argv.slice(2);
const limit = Number(wanted);
const request = http.request(url, {
  method: "POST",
  headers: {
    accept: 'multipart/mixed;subscriptionSpec="1.0", application/json',
    "content-type": "application/json",
    authorization: `Bearer ${token}`,
  },
});
request.end(body);
const response = await new Promise((resolve) => request.on("response", resolve));
console.log(
  JSON.stringify({ status: response.statusCode, type: response.headers["content-type"] }),
);
const parts = await meros(response);
if (!(Symbol.asyncIterator in parts)) throw new Error("not a multipart response");
let data = 0;
for await (const part of parts) {
  console.log(JSON.stringify({ part: part.body, json: part.json }));
  if (part.json && Object.keys(part.body).length > 0 && ++data >= limit) {
    request.destroy();
    process.exit(0);
  }
}
console.log(JSON.stringify({ end: true }));

// src/schema.d.ts from ../../openapi/openapi.json: openapi-typescript's types for every path
// and schema, plus `SseEvents` (event name -> data type) from the events endpoint's
// `x-sse-events`, which openapi-typescript does not read.
//
//   node scripts/schema.mjs --write   # regenerate (npm run generate)
//   node scripts/schema.mjs --check   # exit 1 if the committed file is stale (npm run check:schema)
//
// OPENAPI_JSON=path reads another document (tests use it to show the check fails on drift).
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString, COMMENT_HEADER } from "openapi-typescript";

const SPEC =
  process.env.OPENAPI_JSON || fileURLToPath(new URL("../../../openapi/openapi.json", import.meta.url));
const OUT = fileURLToPath(new URL("../src/schema.d.ts", import.meta.url));
const EVENTS_PATH = "/v1/jobs/{job_id}/events";

async function generate() {
  const raw = await readFile(SPEC, "utf8");
  const spec = JSON.parse(raw);
  // openapiTS resolves the document in place: give it its own copy. defaultNonNullable:
  // false keeps a field with a default optional, as a request body (JobSpec) needs.
  const body = astToString(await openapiTS(JSON.parse(raw), { silent: true, defaultNonNullable: false }));
  const events = spec.paths?.[EVENTS_PATH]?.get?.responses?.["200"]?.["x-sse-events"];
  if (!events || typeof events !== "object") {
    throw new Error(`${EVENTS_PATH}: no x-sse-events in the 200 response`);
  }
  const lines = Object.keys(events)
    .sort()
    .map((name) => {
      const ref = events[name].$ref;
      const match = /^#\/components\/schemas\/([A-Za-z0-9_]+)$/.exec(ref ?? "");
      if (!match) throw new Error(`x-sse-events.${name}: expected a components/schemas $ref`);
      return `    ${name}: components["schemas"]["${match[1]}"];`;
    });
  const sse =
    "/** The data of each Server-Sent Event of `GET " + EVENTS_PATH + "`, by event name (x-sse-events). */\n" +
    "export interface SseEvents {\n" + lines.join("\n") + "\n}\n";
  return COMMENT_HEADER + body + sse;
}

const mode = process.argv[2];
const text = await generate();
if (mode === "--write") {
  await writeFile(OUT, text);
  console.log(`wrote ${OUT}`);
} else if (mode === "--check") {
  const current = await readFile(OUT, "utf8").catch(() => "");
  if (current !== text) {
    console.error(
      `src/schema.d.ts is stale: openapi/openapi.json changed. Run \`npm run generate\` in clients/typescript and commit it.`,
    );
    process.exit(1);
  }
  console.log("src/schema.d.ts matches openapi/openapi.json");
} else {
  console.error("usage: node scripts/schema.mjs --write | --check");
  process.exit(2);
}

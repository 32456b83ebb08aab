// The SSE reader on bodies cut at awkward places: `node --test dist/` (npm test).
import assert from "node:assert/strict";
import { test } from "node:test";
import { parseSse } from "./client.js";

function body(...chunks: string[]): ReadableStream<Uint8Array> {
  const encoded = chunks.map((c) => new TextEncoder().encode(c));
  return new ReadableStream({
    start(controller) {
      for (const chunk of encoded) controller.enqueue(chunk);
      controller.close();
    },
  });
}

async function all(stream: ReadableStream<Uint8Array>): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const event of parseSse(stream)) out.push(event);
  return out;
}

const STREAM =
  ": ping\r\n\r\nid: 1-0\r\nevent: turn_start\r\ndata: {\"turn\": 1,\r\ndata:  \"é\": \"x\"}\r\n\r\n" +
  "id: 2-0\nevent: job_end\ndata: {\"status\": \"succeeded\"}\n\n";
const EVENTS = [
  { id: "1-0", event: "turn_start", data: { turn: 1, é: "x" } },
  { id: "2-0", event: "job_end", data: { status: "succeeded" } },
];

test("events, comments and multi-line data in one chunk", async () => {
  assert.deepEqual(await all(body(STREAM)), EVENTS);
});

test("the same stream cut at every byte, \\r\\n and UTF-8 sequences split included", async () => {
  const bytes = new TextEncoder().encode(STREAM);
  const split = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const byte of bytes) controller.enqueue(new Uint8Array([byte]));
      controller.close();
    },
  });
  assert.deepEqual(await all(split), EVENTS);
});

test("an event the stream ends in the middle of is dropped", async () => {
  const cut = await all(body('id: 1-0\nevent: turn_start\ndata: {"turn": 1}\n\nid: 2-0\ndata: {"a"'));
  assert.deepEqual(cut, [{ id: "1-0", event: "turn_start", data: { turn: 1 } }]);
});

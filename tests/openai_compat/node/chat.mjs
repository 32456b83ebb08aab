// The official openai npm package against reprompt: a structured answer, a stream with
// usage and reprompt's partials, a spent budget, and the model list. Prints one JSON line for tests/openai_compat/test_node_sdk.py.
// Env: REPROMPT_URL, REPROMPT_API_KEY, PROMPT_OK, PROMPT_STREAM, PROMPT_FAIL.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: `${process.env.REPROMPT_URL}/v1`,
  apiKey: process.env.REPROMPT_API_KEY,
  maxRetries: 0,
});
const schema = {
  type: "object",
  properties: { city: { type: "string" }, population: { type: "integer" } },
  required: ["city", "population"],
  additionalProperties: false,
};
const responseFormat = { type: "json_schema", json_schema: { name: "city", strict: true, schema } };

const { data, response } = await client.chat.completions
  .create({
    model: "sim-model",
    messages: [{ role: "user", content: process.env.PROMPT_OK }],
    response_format: responseFormat,
  })
  .withResponse();

const stream = await client.chat.completions.create({
  model: "sim-model",
  messages: [{ role: "user", content: process.env.PROMPT_STREAM }],
  response_format: responseFormat,
  stream: true,
  stream_options: { include_usage: true },
});
let streamed = "";
let streamUsage = null;
let streamId = null;
const streamEvents = []; // reprompt's extension: partial, partial_discarded, then "content"
for await (const chunk of stream) {
  streamId = chunk.id;
  if (chunk.reprompt) streamEvents.push(chunk.reprompt.event);
  if (chunk.choices.some((c) => c.delta.content)) streamEvents.push("content");
  if (chunk.usage) streamUsage = chunk.usage;
  for (const choice of chunk.choices) streamed += choice.delta.content ?? "";
}

let failure = null;
try {
  await client.chat.completions.create({
    model: "sim-model",
    messages: [{ role: "user", content: process.env.PROMPT_FAIL }],
    response_format: responseFormat,
    reprompt: { maxTurns: 1, returnRetries: 1, retryMode: "whole" },
  });
} catch (err) {
  failure = {
    unprocessable: err instanceof OpenAI.UnprocessableEntityError,
    status: err.status,
    code: err.code,
    message: err.message,
  };
}

const models = [];
for await (const model of client.models.list()) models.push([model.id, model.owned_by]);

console.log(
  JSON.stringify({
    id: data.id,
    object: data.object,
    model: data.model,
    answer: JSON.parse(data.choices[0].message.content),
    finish: data.choices[0].finish_reason,
    usage: data.usage,
    attempts: response.headers.get("x-reprompt-attempts"),
    jobId: response.headers.get("x-reprompt-job-id"),
    streamed: JSON.parse(streamed),
    streamId,
    streamUsage,
    streamEvents,
    failure,
    models,
  }),
);

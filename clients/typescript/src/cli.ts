/**
 * Submit a job file, follow it by long-poll and by Server-Sent Events at once, print the
 * envelope.
 *
 *   REPROMPT_API_KEY=... node dist/cli.js [--url URL] [--idempotency-key KEY]
 *       [--follow both|poll|sse|stream] [--wait-ms N] [--timeout-s N] [--tools OUTPUTS.json] JOB.json
 *
 * --tools: the job's client tools answered from a JSON object (tool name → its output, the
 * same for every call), by long-poll: RepromptClient.run.
 * --follow stream: POST /v1/generate streaming instead, each partial printed as it comes.
 *
 * stdout: the final envelope (JSON), or the problem+json of a refused request.
 * stderr: what happened on the way (submission, each event, each poll).
 * Exit: 0 success; 1 the job ended without success; 2 usage, unreadable file or no
 * connection; 3 the API answered a problem (non-2xx); 4 the two paths disagree.
 */
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import {
  ApiError,
  MIN_WAIT_MS,
  RepromptClient,
  TimeoutError,
  type Envelope,
  type Job,
  type JobEvent,
  type JobSpec,
  type JobStatus,
} from "./client.js";

const USAGE =
  "usage: node dist/cli.js [--url URL] [--idempotency-key KEY] [--follow both|poll|sse|stream] " +
  "[--wait-ms N] [--timeout-s N] [--tools OUTPUTS.json] JOB.json";

interface Outcome {
  status: JobStatus;
  result: Envelope;
}

function log(line: string): void {
  process.stderr.write(`${line}\n`);
}

function describe(event: JobEvent): string {
  switch (event.event) {
    case "turn_start":
      return `turn=${event.data.turn} type=${event.data.type} attempt=${event.data.attempt}`;
    case "turn_end": {
      const { turn, result, errorCode, diagnosis } = event.data;
      const why = errorCode ? ` ${errorCode}: ${(diagnosis ?? "").replace(/\s*\n\s*/g, " ")}` : "";
      return `turn=${turn} result=${result}${why}`;
    }
    case "job_end":
      return `status=${event.data.status} envelope=${event.data.result.status}`;
    case "partial":
      return JSON.stringify(event.data.data);
    case "partial_discarded":
      return event.data.reason;
    case "job_start":
    case "job_requeued":
      return `attempt=${event.data.attempt ?? "?"}` + (event.data.reason ? ` ${event.data.reason}` : "");
    default:
      return "";
  }
}

async function viaEvents(api: RepromptClient, id: string, timeoutMs: number): Promise<Outcome> {
  const ended = await api.followEvents(
    id,
    (event) => log(`sse: ${event.event} ${describe(event)}`.trimEnd()),
    { timeoutMs, onReconnect: (after) => log(`sse: reconnecting after ${after ?? "the start"}`) },
  );
  return { status: ended.status, result: ended.result };
}

/** POST /v1/generate streaming: each event logged (partials with their data) as it comes. */
async function viaStream(api: RepromptClient, spec: JobSpec, idempotencyKey: string): Promise<Outcome> {
  for await (const event of api.generateStream(spec, { idempotencyKey })) {
    log(`stream: ${event.event} ${describe(event)}`.trimEnd());
    if (event.event === "job_end") return { status: event.data.status, result: event.data.result };
  }
  throw new Error("the generate stream ended before job_end");
}

async function viaLongPoll(
  api: RepromptClient,
  id: string,
  waitMs: number,
  timeoutMs: number,
): Promise<Outcome> {
  let polls = 0;
  const job: Job = await api.waitFor(id, {
    waitMs,
    timeoutMs,
    onPoll: (answer, elapsedMs) => log(`long-poll ${++polls}: ${answer.status} after ${elapsedMs} ms`),
  });
  if (job.status === "requires_action") {
    throw new Error(`job ${id} waits for client tool outputs, which this example does not run`);
  }
  return { status: job.status, result: job.result };
}

/** JSON with sorted keys: the two paths' envelopes compared whatever their key order. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  );
}

async function main(argv: string[]): Promise<number> {
  let args;
  try {
    args = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        url: { type: "string", default: process.env.REPROMPT_URL ?? "http://127.0.0.1:8080" },
        "idempotency-key": { type: "string" },
        follow: { type: "string", default: "both" },
        "wait-ms": { type: "string", default: "30000" },
        "timeout-s": { type: "string", default: "600" },
        tools: { type: "string" },
      },
    });
  } catch (err) {
    log(`${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  const { values, positionals } = args;
  const follow = values.follow;
  const waitMs = Number(values["wait-ms"]);
  const timeoutMs = Number(values["timeout-s"]) * 1000;
  if (
    positionals.length !== 1 ||
    !["both", "poll", "sse", "stream"].includes(follow) ||
    !Number.isInteger(waitMs) ||
    waitMs < MIN_WAIT_MS ||
    !(timeoutMs > 0)
  ) {
    log(USAGE);
    return 2;
  }
  const path = positionals[0] as string;
  let spec: JobSpec;
  try {
    spec = JSON.parse(await readFile(path, "utf8")) as JobSpec;
  } catch (err) {
    log(`cannot read job ${path}: ${(err as Error).message}`);
    return 2;
  }

  const api = new RepromptClient({
    baseUrl: values.url,
    apiKey: process.env.REPROMPT_API_KEY,
    onRetry: (status, wait) => log(`retry: ${status}, again in ${wait} ms`),
  });
  const idempotencyKey = values["idempotency-key"] ?? randomUUID();
  try {
    if (values.tools !== undefined) {
      const answers = JSON.parse(await readFile(values.tools, "utf8")) as Record<string, unknown>;
      const tools = Object.fromEntries(
        Object.entries(answers).map(([name, output]) => [
          name,
          (args: unknown) => {
            log(`tool: ${name} ${JSON.stringify(args)}`);
            return output;
          },
        ]),
      );
      const job = await api.run(spec, tools, { idempotencyKey, waitMs, timeoutMs });
      process.stdout.write(`${JSON.stringify(job.result, null, 2)}\n`);
      return job.status === "succeeded" ? 0 : 1;
    }
    if (follow === "stream") {
      const streamed = await viaStream(api, spec, idempotencyKey);
      process.stdout.write(`${JSON.stringify(streamed.result, null, 2)}\n`);
      return streamed.status === "succeeded" ? 0 : 1;
    }
    const { job, replayed } = await api.submit(spec, { idempotencyKey });
    log(
      replayed
        ? `replayed ${job.id} (200 Idempotent-Replayed, Idempotency-Key ${idempotencyKey})`
        : `submitted ${job.id} (202, Idempotency-Key ${idempotencyKey})`,
    );
    const [sse, poll] = await Promise.all([
      follow === "poll" ? null : viaEvents(api, job.id, timeoutMs),
      follow === "sse" ? null : viaLongPoll(api, job.id, waitMs, timeoutMs),
    ]);
    const outcome = (poll ?? sse) as Outcome;
    if (sse && poll) {
      if (sse.status !== poll.status || canonical(sse.result) !== canonical(poll.result)) {
        log(`the paths disagree: events say ${sse.status}, long-poll says ${poll.status}`);
        process.stdout.write(`${JSON.stringify({ sse, poll }, null, 2)}\n`);
        return 4;
      }
      log(`long-poll and events agree: ${outcome.status}`);
    }
    process.stdout.write(`${JSON.stringify(outcome.result, null, 2)}\n`);
    return outcome.status === "succeeded" ? 0 : 1;
  } catch (err) {
    if (err instanceof ApiError) {
      log(`reprompt answered ${err.message}`);
      process.stdout.write(`${JSON.stringify(err.problem, null, 2)}\n`);
      return 3;
    }
    if (err instanceof TimeoutError) {
      log(err.message);
      return 2;
    }
    const cause = (err as { cause?: { message?: string } }).cause?.message;
    log(`${(err as Error).message}${cause ? `: ${cause}` : ""}`);
    return 2;
  }
}

process.exitCode = await main(process.argv.slice(2));

/**
 * A small client for reprompt's HTTP API, typed from openapi/openapi.json (src/schema.d.ts).
 *
 *   const api = new RepromptClient({ baseUrl: "http://127.0.0.1:8080", apiKey });
 *   const { job } = await api.submit(spec, { idempotencyKey: randomUUID() });
 *   const done = await api.waitFor(job.id);                 // long-poll GET /v1/jobs/{id}?waitMs=
 *   for await (const e of api.events(job.id)) { ... }       // Server-Sent Events until job_end
 *   const ended = await api.run(spec, { lookup: async (args) => ({ price: 12.5 }) });
 *   for await (const e of api.generateStream(spec)) { ... }  // partials as the answer is written
 *
 * Every non-2xx answer is thrown as an `ApiError` carrying the problem+json body. A 429 (too
 * fast, queue full, too many open waits) or 503 (Redis or the provider not reachable) is
 * retried after its Retry-After, at most `maxRetryWaitMs` a wait and `maxAttempts` tries; a
 * submission is retried after a 503 only with an Idempotency-Key (the first try may have
 * stored the job).
 */
import createClient, { type Client } from "openapi-fetch";
import type { components, paths, SseEvents } from "./schema.js";

export type Job = components["schemas"]["Job"];
export type JobSpec = components["schemas"]["JobSpec"];
export type Envelope = components["schemas"]["Envelope"];
export type Problem = components["schemas"]["Problem"];
export type ToolOutput = components["schemas"]["ToolOutputIn"];
/** Runs a client tool: the call's arguments in, its output (any JSON value) out; a throw
 * answers the call with an `error` the model reads. */
export type ToolFunction = (args: unknown) => unknown;
export type JobStatus = Job["status"];
// Batches (#30)
export type Batch = components["schemas"]["Batch"];
export type BatchSpec = components["schemas"]["BatchSpec"];
export type BatchItem = components["schemas"]["BatchItem"];
export type BatchOptions = components["schemas"]["BatchOptions"];
export type BatchResult = components["schemas"]["BatchResult"];

/** One Server-Sent Event, its `data` typed by its name (`x-sse-events` in openapi.json). */
export type JobEvent = {
  [Name in keyof SseEvents]: { id: string | null; event: Name; data: SseEvents[Name] };
}[keyof SseEvents];

export const TERMINAL: readonly JobStatus[] = ["succeeded", "failed", "cancelled"];
/** The shortest long-poll waitFor makes: shorter ones would poll in a tight loop. */
export const MIN_WAIT_MS = 100;

/** A problem+json answer (any non-2xx status). `problem` is the body as the server sent it. */
export class ApiError extends Error {
  readonly status: number;
  readonly problem: Problem;

  constructor(status: number, body: unknown) {
    const problem = asProblem(status, body);
    const fields = (problem.errors ?? []).map((e) => e.field).join(", ");
    super(`${status} ${problem.title}: ${problem.detail}` + (fields ? ` [${fields}]` : ""));
    this.name = "ApiError";
    this.status = status;
    this.problem = problem;
  }
}

export interface ClientOptions {
  /** e.g. http://127.0.0.1:8080 */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <key>` when the service has keys configured. */
  apiKey?: string;
  /** Added to every request's own wait (waitMs) to bound it: the server's answer time. */
  requestTimeoutMs?: number;
  /** Tries of a request answered 429 or 503 (default 4). */
  maxAttempts?: number;
  /** The longest wait before a retry, whatever Retry-After says (default 30 s). */
  maxRetryWaitMs?: number;
  /** Told of each retry: the status and the wait before the next try. */
  onRetry?: (status: number, waitMs: number) => void;
}

export interface Submitted {
  job: Job;
  /** true when the Idempotency-Key had already made this job (200 + Idempotent-Replayed). */
  replayed: boolean;
  location: string | null;
}

export interface WaitOptions {
  /** waitMs of each long-poll: at least MIN_WAIT_MS; the server clamps it to its maximum. */
  waitMs?: number;
  /** Give up (TimeoutError) after this long in all. */
  timeoutMs?: number;
  /** Called with each poll's answer and how long that poll took. */
  onPoll?: (job: Job, elapsedMs: number) => void;
}

export interface EventOptions {
  /** Resume after this event id (Last-Event-ID). */
  lastEventId?: string;
  /** Reconnects (with Last-Event-ID) after a stream that drops before job_end. */
  maxReconnects?: number;
  /** Give up (TimeoutError) after this long in all. */
  timeoutMs?: number;
  /** Called before a dropped stream is reopened, with the Last-Event-ID it resumes after. */
  onReconnect?: (lastEventId: string | null) => void;
}

export class RepromptClient {
  /** The typed openapi-fetch client, for the endpoints this class does not wrap. */
  readonly http: Client<paths>;
  private readonly requestTimeoutMs: number;

  constructor(options: ClientOptions) {
    const headers: Record<string, string> = {};
    if (options.apiKey) headers.Authorization = `Bearer ${options.apiKey}`;
    this.http = createClient<paths>({
      baseUrl: options.baseUrl,
      headers,
      fetch: retrying(options.maxAttempts ?? 4, options.maxRetryWaitMs ?? 30_000, options.onRetry),
    });
    this.requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
  }

  /** POST /v1/jobs. The same Idempotency-Key and body again returns the same job (200). */
  async submit(spec: JobSpec, options: { idempotencyKey?: string } = {}): Promise<Submitted> {
    const { data, error, response } = await this.http.POST("/v1/jobs", {
      body: spec,
      params: { header: { "Idempotency-Key": options.idempotencyKey } },
      signal: AbortSignal.timeout(this.requestTimeoutMs),
    });
    if (data === undefined) throw new ApiError(response.status, error);
    return {
      job: data,
      replayed: response.status === 200 && response.headers.get("Idempotent-Replayed") === "true",
      location: response.headers.get("Location"),
    };
  }

  /** GET /v1/jobs/{id}; with waitMs, answers as soon as the job ends (or at waitMs). */
  async get(jobId: string, options: { waitMs?: number } = {}): Promise<Job> {
    const waitMs = options.waitMs ?? 0;
    const { data, error, response } = await this.http.GET("/v1/jobs/{job_id}", {
      params: { path: { job_id: jobId }, query: waitMs ? { waitMs } : {} },
      signal: AbortSignal.timeout(waitMs + this.requestTimeoutMs),
    });
    if (data === undefined) throw new ApiError(response.status, error);
    return data;
  }

  /** POST /v1/jobs/{id}/tool-outputs: answer every call of the job's requiredAction. */
  async submitToolOutputs(jobId: string, outputs: ToolOutput[]): Promise<Job> {
    const { data, error, response } = await this.http.POST("/v1/jobs/{job_id}/tool-outputs", {
      params: { path: { job_id: jobId } },
      body: { outputs },
      signal: AbortSignal.timeout(this.requestTimeoutMs),
    });
    if (data === undefined) throw new ApiError(response.status, error);
    return data;
  }

  /**
   * Submit `spec` and follow it to its end, answering each pause for client tools
   * (`requires_action`) with `tools`: each call run by the function of its name, the outputs
   * posted, the job goes on. An unknown tool or a function that throws answers with an error.
   */
  async run(
    spec: JobSpec,
    tools: Record<string, ToolFunction>,
    options: WaitOptions & { idempotencyKey?: string } = {},
  ): Promise<Job> {
    const { job } = await this.submit(spec, { idempotencyKey: options.idempotencyKey });
    for (;;) {
      const now = await this.waitFor(job.id, options);
      if (now.status !== "requires_action") return now;
      const calls = now.requiredAction?.toolCalls ?? [];
      const outputs = await Promise.all(calls.map((call) => answer(call, tools)));
      await this.submitToolOutputs(job.id, outputs);
    }
  }

  /** Long-poll the job until it is terminal (or requires client tools: returned as is). */
  async waitFor(jobId: string, options: WaitOptions = {}): Promise<Job> {
    const waitMs = options.waitMs ?? 30_000;
    if (!(waitMs >= MIN_WAIT_MS)) throw new RangeError(`waitMs: at least ${MIN_WAIT_MS}`);
    const deadline = Date.now() + (options.timeoutMs ?? 600_000);
    for (;;) {
      const started = Date.now();
      const wait = Math.max(0, Math.min(waitMs, deadline - started));
      const job = await this.get(jobId, { waitMs: wait });
      options.onPoll?.(job, Date.now() - started);
      if (TERMINAL.includes(job.status) || job.status === "requires_action") return job;
      if (Date.now() >= deadline) throw new TimeoutError(`job ${jobId} is still ${job.status}`);
    }
  }

  /**
   * GET /v1/jobs/{id}/events: the job's events as they happen, ending with `job_end`. A
   * stream that drops before `job_end` is reopened after the last event seen.
   */
  async *events(jobId: string, options: EventOptions = {}): AsyncGenerator<JobEvent> {
    let lastEventId = options.lastEventId;
    let reconnects = options.maxReconnects ?? 3;
    const signal = AbortSignal.timeout(options.timeoutMs ?? 600_000);
    for (;;) {
      const { data, error, response } = await this.http.GET("/v1/jobs/{job_id}/events", {
        params: {
          path: { job_id: jobId },
          header: { "Last-Event-ID": lastEventId },
        },
        headers: { Accept: "text/event-stream" },
        parseAs: "stream",
        signal,
      });
      if (!response.ok || !data) throw new ApiError(response.status, error);
      let dropped: unknown = null;
      try {
        for await (const event of parseSse(data)) {
          if (event.id) lastEventId = event.id;
          if (!isJobEvent(event)) continue; // an event this client's schema does not know
          yield event;
          if (event.event === "job_end") return;
        }
      } catch (err) {
        if (signal.aborted) throw err;
        dropped = err; // the connection broke off: reopen it after the last event seen
      }
      if (reconnects-- <= 0) {
        throw new Error(`the event stream of ${jobId} ended before job_end`, { cause: dropped });
      }
      options.onReconnect?.(lastEventId ?? null);
    }
  }

  // -- batches (#30) ----------------------------------------------------------------------

  /** POST /v1/batches as JSON (items inline). Large batches: `submitBatchLines`. */
  async submitBatch(spec: BatchSpec, options: { idempotencyKey?: string } = {}): Promise<Batch> {
    const { data, error, response } = await this.http.POST("/v1/batches", {
      body: spec,
      params: { header: { "Idempotency-Key": options.idempotencyKey } },
      signal: AbortSignal.timeout(this.requestTimeoutMs),
    });
    if (data === undefined) throw new ApiError(response.status, error);
    return data;
  }

  /** POST /v1/batches as JSONL: the options, then one item per line, streamed. */
  async submitBatchLines(
    options: BatchOptions,
    items: AsyncIterable<BatchItem> | Iterable<BatchItem>,
    request: { idempotencyKey?: string } = {},
  ): Promise<Batch> {
    const encoder = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        controller.enqueue(encoder.encode(JSON.stringify(options) + "\n"));
        for await (const item of items) controller.enqueue(encoder.encode(JSON.stringify(item) + "\n"));
        controller.close();
      },
    });
    const { data, error, response } = await this.http.POST("/v1/batches", {
      // The JSONL body goes as is: openapi-fetch passes a stream through.
      body: body as unknown as BatchSpec,
      bodySerializer: (b) => b as unknown as string,
      headers: { "Content-Type": "application/x-ndjson" },
      params: { header: { "Idempotency-Key": request.idempotencyKey } },
      // Node's fetch needs duplex for a streamed body.
      ...({ duplex: "half" } as Record<string, unknown>),
    });
    if (data === undefined) throw new ApiError(response.status, error);
    return data;
  }

  /** GET /v1/batches/{id}: status, counts, rounds, tokens and cost so far. */
  async getBatch(batchId: string): Promise<Batch> {
    const { data, error, response } = await this.http.GET("/v1/batches/{batch_id}", {
      params: { path: { batch_id: batchId } },
      signal: AbortSignal.timeout(this.requestTimeoutMs),
    });
    if (data === undefined) throw new ApiError(response.status, error);
    return data;
  }

  /** GET /v1/batches/{id}/items: one page, with turn records; `next` is the next cursor. */
  async batchItems(
    batchId: string,
    query: { status?: "pending" | "succeeded" | "failed"; cursor?: string; limit?: number } = {},
  ): Promise<{ items: BatchResult[]; next: string | null }> {
    const { data, error, response } = await this.http.GET("/v1/batches/{batch_id}/items", {
      params: { path: { batch_id: batchId }, query },
      signal: AbortSignal.timeout(this.requestTimeoutMs),
    });
    if (data === undefined) throw new ApiError(response.status, error);
    return { items: data.items, next: data.next ?? null };
  }

  /** GET /v1/batches/{id}/results: every item's `{customId, status, result}`, streamed. */
  async *batchResults(batchId: string): AsyncGenerator<BatchResult> {
    const { data, error, response } = await this.http.GET("/v1/batches/{batch_id}/results", {
      params: { path: { batch_id: batchId } },
      parseAs: "stream",
    });
    if (!response.ok || !data) throw new ApiError(response.status, error);
    const decoder = new TextDecoder();
    let buffer = "";
    for await (const chunk of data as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(chunk, { stream: true });
      let cut: number;
      while ((cut = buffer.indexOf("\n")) !== -1) {
        const line = buffer.slice(0, cut).trim();
        buffer = buffer.slice(cut + 1);
        if (line) yield JSON.parse(line) as BatchResult;
      }
    }
    if (buffer.trim()) yield JSON.parse(buffer) as BatchResult;
  }

  /** POST /v1/batches/{id}/cancel: pending items end cancelled, the provider batch too. */
  async cancelBatch(batchId: string): Promise<Batch> {
    const { data, error, response } = await this.http.POST("/v1/batches/{batch_id}/cancel", {
      params: { path: { batch_id: batchId } },
      signal: AbortSignal.timeout(this.requestTimeoutMs),
    });
    if (data === undefined) throw new ApiError(response.status, error);
    return data;
  }

  /**
   * POST /v1/generate streaming (#31): the new job's events as they come, `partial` ones
   * (the answer so far: complete, checked values) among them, ending with `job_end`.
   * Breaking out of the loop (or aborting `signal`) closes the stream, which cancels the job.
   */
  async *generateStream(
    spec: JobSpec,
    options: { idempotencyKey?: string; signal?: AbortSignal } = {},
  ): AsyncGenerator<JobEvent> {
    const { data, error, response } = await this.http.POST("/v1/generate", {
      body: { ...spec, stream: true },
      params: { header: { "Idempotency-Key": options.idempotencyKey } },
      headers: { Accept: "text/event-stream" },
      parseAs: "stream",
      signal: options.signal ?? AbortSignal.timeout(600_000),
    });
    if (!response.ok || !data) throw new ApiError(response.status, error);
    const body = data as ReadableStream<Uint8Array>;
    let ended = false;
    try {
      for await (const event of parseSse(body)) {
        if (!isJobEvent(event)) continue;
        yield event;
        if (event.event === "job_end") {
          ended = true;
          return;
        }
      }
    } finally {
      // Left early: close the connection now (the service then cancels the job).
      if (!ended) await body.cancel().catch(() => undefined);
    }
    throw new Error("the generate stream ended before job_end");
  }

  /** Follow the events to the end: `onEvent` sees each; resolves with `job_end`'s data. */
  async followEvents(
    jobId: string,
    onEvent: (event: JobEvent) => void = () => {},
    options: EventOptions = {},
  ): Promise<SseEvents["job_end"]> {
    for await (const event of this.events(jobId, options)) {
      onEvent(event);
      if (event.event === "job_end") return event.data;
    }
    throw new Error(`the event stream of ${jobId} ended before job_end`);
  }
}

async function answer(
  call: components["schemas"]["ActionCall"],
  tools: Record<string, ToolFunction>,
): Promise<ToolOutput> {
  const tool = Object.hasOwn(tools, call.name) ? tools[call.name] : undefined;
  if (!tool) return { toolCallId: call.id, error: `no tool ${JSON.stringify(call.name)} here` };
  try {
    return { toolCallId: call.id, output: (await tool(call.arguments)) ?? null };
  } catch (err) {
    return { toolCallId: call.id, error: String((err as Error)?.message ?? err).slice(0, 2000) };
  }
}

/** Retry-After in milliseconds (delta-seconds; 1 s when absent or an HTTP date). */
export function retryAfterMs(value: string | null): number {
  const seconds = value === null ? NaN : Number(value);
  return Number.isFinite(seconds) ? Math.max(0, seconds) * 1000 : 1000;
}

/** fetch, with 429 and 503 answers retried after Retry-After (bounded). */
function retrying(
  maxAttempts: number,
  maxWaitMs: number,
  onRetry?: (status: number, waitMs: number) => void,
): (request: Request) => Promise<Response> {
  return async (request: Request) => {
    const path = new URL(request.url).pathname;
    // A submission that got a 503 may have been stored: again only under the same key.
    const submits = request.method === "POST" && /\/v1\/(jobs|generate)$/.test(path);
    const again503 = !submits || request.headers.has("Idempotency-Key");
    for (let attempt = 1; ; attempt++) {
      const response = await fetch(request.clone());
      const retried = response.status === 429 || (response.status === 503 && again503);
      if (!retried || attempt >= Math.max(1, maxAttempts)) return response;
      const waitMs = Math.min(retryAfterMs(response.headers.get("Retry-After")), maxWaitMs);
      onRetry?.(response.status, waitMs);
      await response.body?.cancel();
      await new Promise((resolve) => setTimeout(resolve, waitMs));
    }
  };
}

export class TimeoutError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TimeoutError";
  }
}

interface RawEvent {
  id: string | null;
  event: string;
  data: unknown;
}

// Every event name the schema knows, and no other: tsc fails here when openapi.json gains
// or loses one, so this list cannot drift from src/schema.d.ts.
const EVENT_NAMES: Record<keyof SseEvents, true> = {
  job_queued: true,
  job_start: true,
  job_requeued: true,
  turn_start: true,
  turn_end: true,
  requires_action: true,
  tool_outputs_received: true,
  tool_outputs: true,
  job_end: true,
  partial: true,
  partial_discarded: true,
};

function isJobEvent(event: RawEvent): event is JobEvent {
  return Object.hasOwn(EVENT_NAMES, event.event);
}

/** The events of a text/event-stream body (fields id, event, data; comments skipped). */
export async function* parseSse(body: ReadableStream<Uint8Array>): AsyncGenerator<RawEvent> {
  let id: string | null = null;
  let name = "message";
  let data: string[] = [];
  let buffer = "";
  const decoder = new TextDecoder();
  const reader = body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      const text = buffer + (done ? decoder.decode() : decoder.decode(value, { stream: true }));
      // Hold back a trailing "\r": it may be the first half of a "\r\n".
      const cut = !done && text.endsWith("\r") ? text.length - 1 : text.length;
      const lines = text.slice(0, cut).split(/\r\n|\r|\n/);
      // The last piece is a line still arriving; at the end, an unfinished event is dropped.
      buffer = (lines.pop() ?? "") + text.slice(cut);
      for (const line of lines) {
        if (line === "") {
          if (data.length) yield { id, event: name, data: JSON.parse(data.join("\n")) as unknown };
          name = "message";
          data = [];
        } else if (!line.startsWith(":")) {
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "id") id = text;
          else if (field === "event") name = text;
          else if (field === "data") data.push(text);
        }
      }
      if (done) return;
    }
  } finally {
    reader.releaseLock();
  }
}

function asProblem(status: number, body: unknown): Problem {
  if (body && typeof body === "object" && "detail" in body && "code" in body) {
    return body as Problem;
  }
  // Not problem+json (a proxy's page, an empty body): keep what came, in the same shape.
  const text = typeof body === "string" ? body.slice(0, 500) : "";
  return {
    type: "about:blank",
    title: `HTTP ${status}`,
    status,
    detail: text || `HTTP ${status}`,
    instance: "",
    code: "http-error",
  };
}

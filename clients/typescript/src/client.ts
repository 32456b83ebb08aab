/**
 * A small client for reprompt's HTTP API, typed from openapi/openapi.json (src/schema.d.ts).
 *
 *   const api = new RepromptClient({ baseUrl: "http://127.0.0.1:8080", apiKey });
 *   const { job } = await api.submit(spec, { idempotencyKey: randomUUID() });
 *   const done = await api.waitFor(job.id);                 // long-poll GET /v1/jobs/{id}?waitMs=
 *   for await (const e of api.events(job.id)) { ... }       // Server-Sent Events until job_end
 *   for await (const e of api.generateStream(spec)) { ... }  // partials as the answer is written
 *
 * Every non-2xx answer is thrown as an `ApiError` carrying the problem+json body.
 */
import createClient, { type Client } from "openapi-fetch";
import type { components, paths, SseEvents } from "./schema.js";

export type Job = components["schemas"]["Job"];
export type JobSpec = components["schemas"]["JobSpec"];
export type Envelope = components["schemas"]["Envelope"];
export type Problem = components["schemas"]["Problem"];
export type JobStatus = Job["status"];

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
    this.http = createClient<paths>({ baseUrl: options.baseUrl, headers });
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

package reprompt.client;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * A small client for reprompt's HTTP API with nothing but the JDK (java.net.http).
 *
 * <pre>
 * RepromptClient api = new RepromptClient("http://127.0.0.1:8080", System.getenv("REPROMPT_API_KEY"));
 * Submitted s = api.submit(spec, UUID.randomUUID().toString());   // Idempotency-Key
 * Map&lt;String, Object&gt; job = api.waitFor(id, 30_000, Duration.ofMinutes(10), null); // long-poll
 * Map&lt;String, Object&gt; end = api.followEvents(id, null, e -&gt; ..., Duration.ofMinutes(10)); // SSE
 * </pre>
 *
 * <p>JSON values are those of {@link Json}. Every non-2xx answer is an {@link ApiException}.
 * A 429 (too fast, queue full, too many open waits) or 503 (Redis or the provider not
 * reachable) is retried after its Retry-After, at most {@code maxRetryWait} a wait and
 * {@code maxAttempts} tries ({@link #retries}); a submission is retried after a 503 only with
 * an Idempotency-Key (the first try may have stored the job). {@link #run} answers a job's
 * pauses for client tools ({@code requires_action}) with the caller's functions.
 */
public final class RepromptClient {
  public static final Set<String> TERMINAL = Set.of("succeeded", "failed", "cancelled");
  /** The shortest long-poll waitFor makes: shorter ones would poll in a tight loop. */
  public static final long MIN_WAIT_MS = 100;
  /** Reconnects (with Last-Event-ID) after an event stream that drops before job_end. */
  public static final int MAX_RECONNECTS = 3;

  private final HttpClient http;
  private final String baseUrl;
  private final String apiKey;
  private final Duration requestTimeout;
  private int maxAttempts = 4;
  private Duration maxRetryWait = Duration.ofSeconds(30);
  private RetryListener onRetry;

  /** Told of each retry: the status and the wait before the next try. */
  public interface RetryListener {
    void onRetry(int status, Duration wait);
  }

  /** Runs a client tool: the call's arguments (a {@link Json} value) in, its output out. */
  public interface ToolFunction {
    Object apply(Object arguments) throws Exception;
  }

  /** The job as submitted; {@code replayed}: the Idempotency-Key had already made it (200). */
  public record Submitted(Map<String, Object> job, boolean replayed, String location) {
    public String id() {
      return (String) job.get("id");
    }
  }

  /** One Server-Sent Event: its {@code id:}, {@code event:} and {@code data:} (a JSON object). */
  public record Event(String id, String name, Map<String, Object> data) {}

  /** {@code apiKey}: sent as {@code Authorization: Bearer <key>}; null or empty sends none. */
  public RepromptClient(String baseUrl, String apiKey) {
    this(baseUrl, apiKey, Duration.ofSeconds(30));
  }

  public RepromptClient(String baseUrl, String apiKey, Duration requestTimeout) {
    this.baseUrl = baseUrl.replaceAll("/+$", "");
    this.apiKey = apiKey == null || apiKey.isEmpty() ? null : apiKey;
    this.requestTimeout = requestTimeout;
    this.http = HttpClient.newBuilder()
        .version(HttpClient.Version.HTTP_1_1)
        .connectTimeout(Duration.ofSeconds(10))
        .build();
  }

  /** How 429 and 503 answers are retried (defaults: 4 tries, 30 s at most a wait, no listener). */
  public RepromptClient retries(int maxAttempts, Duration maxRetryWait, RetryListener onRetry) {
    this.maxAttempts = Math.max(1, maxAttempts);
    this.maxRetryWait = maxRetryWait;
    this.onRetry = onRetry;
    return this;
  }

  /** POST /v1/jobs/{id}/tool-outputs: one {toolCallId, output | error} per call of the pause. */
  public Map<String, Object> submitToolOutputs(String jobId, List<Map<String, Object>> outputs)
      throws IOException, InterruptedException, ApiException {
    HttpRequest request = request(jobPath(jobId) + "/tool-outputs", requestTimeout)
        .header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(
            Json.write(Map.of("outputs", outputs)), StandardCharsets.UTF_8))
        .build();
    return Json.parseObject(send(request).body());
  }

  /**
   * Submit {@code spec} and long-poll it to its end, answering each pause for client tools
   * with {@code tools} (each call run by the function of its name; an unknown tool or a
   * function that throws answers with an {@code error} the model reads).
   */
  public Map<String, Object> run(
      Object spec, Map<String, ToolFunction> tools, String idempotencyKey, long waitMs,
      Duration timeout)
      throws IOException, InterruptedException, ApiException, java.util.concurrent.TimeoutException {
    String id = submit(spec, idempotencyKey).id();
    while (true) {
      Map<String, Object> job = waitFor(id, waitMs, timeout, null);
      if (!"requires_action".equals(job.get("status"))) return job;
      Object action = job.get("requiredAction");
      Object calls = action instanceof Map<?, ?> a ? a.get("toolCalls") : null;
      List<Map<String, Object>> outputs = new ArrayList<>();
      for (Object each : calls instanceof List<?> l ? l : List.of()) {
        Map<?, ?> call = (Map<?, ?>) each;
        Map<String, Object> output = new LinkedHashMap<>();
        output.put("toolCallId", call.get("id"));
        ToolFunction tool = tools.get(String.valueOf(call.get("name")));
        if (tool == null) {
          output.put("error", "no tool \"" + call.get("name") + "\" here");
        } else {
          try {
            output.put("output", tool.apply(call.get("arguments")));
          } catch (Exception e) {
            String text = e.getClass().getSimpleName() + ": " + e.getMessage();
            output.put("error", text.length() > 2000 ? text.substring(0, 2000) : text);
          }
        }
        outputs.add(output);
      }
      submitToolOutputs(id, outputs);
    }
  }

  /** POST /v1/jobs. The same Idempotency-Key and body again returns the same job (200). */
  public Submitted submit(Object spec, String idempotencyKey)
      throws IOException, InterruptedException, ApiException {
    HttpRequest.Builder request = request("/v1/jobs", requestTimeout)
        .header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(Json.write(spec), StandardCharsets.UTF_8));
    if (idempotencyKey != null) request.header("Idempotency-Key", idempotencyKey);
    HttpResponse<String> response = send(request.build());
    boolean replayed = response.statusCode() == 200
        && "true".equals(response.headers().firstValue("Idempotent-Replayed").orElse(null));
    return new Submitted(
        Json.parseObject(response.body()),
        replayed,
        response.headers().firstValue("Location").orElse(null));
  }

  /** GET /v1/jobs/{id}; with {@code waitMs} &gt; 0, answers as soon as the job ends (or then). */
  public Map<String, Object> get(String jobId, long waitMs)
      throws IOException, InterruptedException, ApiException {
    String path = jobPath(jobId) + (waitMs > 0 ? "?waitMs=" + waitMs : "");
    HttpRequest request = request(path, requestTimeout.plusMillis(waitMs)).GET().build();
    return Json.parseObject(send(request).body());
  }

  /** Called with each long-poll's answer and how long it took. */
  public interface PollListener {
    void onPoll(Map<String, Object> job, long elapsedMs);
  }

  /**
   * Long-poll the job until it is terminal or waits for client tools ({@code requires_action},
   * returned as is); {@link java.util.concurrent.TimeoutException} after {@code timeout}.
   */
  public Map<String, Object> waitFor(String jobId, long waitMs, Duration timeout, PollListener onPoll)
      throws IOException, InterruptedException, ApiException, java.util.concurrent.TimeoutException {
    if (waitMs < MIN_WAIT_MS) throw new IllegalArgumentException("waitMs: at least " + MIN_WAIT_MS);
    long deadline = System.nanoTime() + timeout.toNanos();
    while (true) {
      long started = System.nanoTime();
      long left = Math.max(0, (deadline - started) / 1_000_000);
      Map<String, Object> job = get(jobId, Math.min(waitMs, left));
      if (onPoll != null) onPoll.onPoll(job, (System.nanoTime() - started) / 1_000_000);
      Object status = job.get("status");
      if (TERMINAL.contains(status) || "requires_action".equals(status)) return job;
      if (System.nanoTime() >= deadline) {
        throw new java.util.concurrent.TimeoutException("job " + jobId + " is still " + status);
      }
    }
  }

  /**
   * GET /v1/jobs/{id}/events: hands each event to {@code onEvent} as it comes and returns the
   * data of {@code job_end} (its {@code status} and final {@code result}). A stream that drops
   * before job_end is reopened after the last event seen.
   */
  public Map<String, Object> followEvents(
      String jobId, String lastEventId, Consumer<Event> onEvent, Duration timeout)
      throws IOException, InterruptedException, ApiException, java.util.concurrent.TimeoutException {
    return followEvents(jobId, lastEventId, onEvent, timeout, after -> { });
  }

  /** As above; {@code onReconnect} hears the Last-Event-ID a dropped stream resumes after. */
  public Map<String, Object> followEvents(
      String jobId,
      String lastEventId,
      Consumer<Event> onEvent,
      Duration timeout,
      Consumer<String> onReconnect)
      throws IOException, InterruptedException, ApiException, java.util.concurrent.TimeoutException {
    long deadline = System.nanoTime() + timeout.toNanos();
    String after = lastEventId;
    IOException dropped = null;
    for (int attempt = 0; attempt <= MAX_RECONNECTS; attempt++) {
      if (attempt > 0) onReconnect.accept(after);
      HttpRequest.Builder builder = request(jobPath(jobId) + "/events", requestTimeout)
          .header("Accept", "text/event-stream")
          .GET();
      if (after != null) builder.header("Last-Event-ID", after);
      HttpResponse<Stream<String>> response =
          http.send(builder.build(), HttpResponse.BodyHandlers.ofLines());
      try (Stream<String> lines = response.body()) {
        if (response.statusCode() / 100 != 2) {
          throw problem(response.statusCode(), lines.collect(Collectors.joining("\n")));
        }
        SseReader reader = new SseReader(lines.iterator());
        Event event;
        while ((event = reader.next()) != null) {
          if (event.id() != null) after = event.id();
          onEvent.accept(event);
          if ("job_end".equals(event.name())) return event.data();
          if (System.nanoTime() > deadline) {
            throw new java.util.concurrent.TimeoutException("job " + jobId + " did not end in time");
          }
        }
      } catch (UncheckedIOException broken) {
        dropped = broken.getCause(); // the connection broke off: reopen after the last event
      }
    }
    throw new IOException("the event stream of " + jobId + " ended before job_end", dropped);
  }

  /** Reads text/event-stream lines into events (id, event, data; comments skipped). */
  static final class SseReader {
    private final Iterator<String> lines;

    SseReader(Iterator<String> lines) {
      this.lines = lines;
    }

    /** The next event, or null at the end of the stream (an unfinished event is dropped). */
    Event next() {
      String id = null;
      String name = "message";
      List<String> data = new ArrayList<>();
      while (lines.hasNext()) {
        String line = lines.next();
        if (line.isEmpty()) {
          if (!data.isEmpty()) return new Event(id, name, Json.parseObject(String.join("\n", data)));
          name = "message";
          continue;
        }
        if (line.startsWith(":")) continue; // a comment: the server's keep-alive ping
        int colon = line.indexOf(':');
        String field = colon < 0 ? line : line.substring(0, colon);
        String value = colon < 0 ? "" : line.substring(colon + 1);
        if (value.startsWith(" ")) value = value.substring(1);
        switch (field) {
          case "id" -> id = value;
          case "event" -> name = value;
          case "data" -> data.add(value);
          default -> { } // retry: and unknown fields
        }
      }
      return null;
    }
  }

  private HttpRequest.Builder request(String path, Duration timeout) {
    HttpRequest.Builder builder =
        HttpRequest.newBuilder(URI.create(baseUrl + path)).timeout(timeout);
    if (apiKey != null) builder.header("Authorization", "Bearer " + apiKey);
    return builder;
  }

  private HttpResponse<String> send(HttpRequest request)
      throws IOException, InterruptedException, ApiException {
    String path = request.uri().getPath();
    boolean submits = request.method().equals("POST") && path.matches(".*/v1/(jobs|generate)$");
    boolean again503 = !submits || request.headers().firstValue("Idempotency-Key").isPresent();
    for (int attempt = 1; ; attempt++) {
      HttpResponse<String> response =
          http.send(request, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
      int status = response.statusCode();
      if (status / 100 == 2) return response;
      boolean retried = status == 429 || (status == 503 && again503);
      if (!retried || attempt >= maxAttempts) throw problem(status, response.body());
      Duration wait = retryAfter(response.headers().firstValue("Retry-After").orElse(null));
      if (wait.compareTo(maxRetryWait) > 0) wait = maxRetryWait;
      if (onRetry != null) onRetry.onRetry(status, wait);
      Thread.sleep(wait.toMillis());
    }
  }

  /** Retry-After as a wait (delta-seconds; 1 s when absent or an HTTP date). */
  static Duration retryAfter(String value) {
    try {
      return Duration.ofMillis(Math.max(0, Math.round(Double.parseDouble(value) * 1000)));
    } catch (NullPointerException | NumberFormatException e) {
      return Duration.ofSeconds(1);
    }
  }

  private static ApiException problem(int status, String body) {
    try {
      return new ApiException(status, Json.parseObject(body));
    } catch (IllegalArgumentException notJson) {
      // Not problem+json (a proxy's page, an empty body): keep what came, in the same shape.
      Map<String, Object> problem = new LinkedHashMap<>();
      problem.put("type", "about:blank");
      problem.put("title", "HTTP " + status);
      problem.put("status", (long) status);
      problem.put("detail", body.length() > 500 ? body.substring(0, 500) : body);
      problem.put("code", "http-error");
      return new ApiException(status, problem);
    }
  }

  private static String jobPath(String jobId) {
    return "/v1/jobs/" + URLEncoder.encode(jobId, StandardCharsets.UTF_8).replace("+", "%20");
  }
}

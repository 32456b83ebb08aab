package reprompt.client;

import java.io.IOException;
import java.net.ConnectException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Collectors;

/**
 * Submit a job file, follow it by long-poll and by Server-Sent Events at once, print the
 * envelope.
 *
 * <pre>
 * REPROMPT_API_KEY=... java -cp build reprompt.client.Example [--url URL]
 *     [--idempotency-key KEY] [--follow both|poll|sse] [--wait-ms N] [--timeout-s N]
 *     [--tools OUTPUTS.json] JOB.json
 * </pre>
 *
 * <p>--tools: the job's client tools answered from a JSON object (tool name to its output, the
 * same for every call), by long-poll: {@link RepromptClient#run}.
 *
 * <p>stdout: the final envelope (JSON), or the problem+json of a refused request. stderr: what
 * happened on the way. Exit: 0 success; 1 the job ended without success; 2 usage, unreadable
 * file or no connection; 3 the API answered a problem (non-2xx); 4 the two paths disagree.
 */
public final class Example {
  private static final String USAGE = "usage: java -cp build reprompt.client.Example [--url URL] "
      + "[--idempotency-key KEY] [--follow both|poll|sse] [--wait-ms N] [--timeout-s N] "
      + "[--tools OUTPUTS.json] JOB.json";

  private record Outcome(String status, Object result) {}

  private Example() {}

  public static void main(String[] args) {
    int code;
    try {
      code = run(args);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      code = 2;
    }
    System.out.flush();
    System.exit(code);
  }

  static int run(String[] args) throws InterruptedException {
    String url = envOr("REPROMPT_URL", "http://127.0.0.1:8080");
    String key = null;
    String follow = "both";
    long waitMs = 30_000;
    long timeoutS = 600;
    String file = null;
    String toolsFile = null;
    try {
      for (int i = 0; i < args.length; i++) {
        switch (args[i]) {
          case "--url" -> url = args[++i];
          case "--idempotency-key" -> key = args[++i];
          case "--follow" -> follow = args[++i];
          case "--wait-ms" -> waitMs = Long.parseLong(args[++i]);
          case "--timeout-s" -> timeoutS = Long.parseLong(args[++i]);
          case "--tools" -> toolsFile = args[++i];
          default -> {
            if (args[i].startsWith("--") || file != null) throw new IllegalArgumentException(args[i]);
            file = args[i];
          }
        }
      }
      if (file == null || !List.of("both", "poll", "sse").contains(follow)
          || waitMs < RepromptClient.MIN_WAIT_MS
          || timeoutS <= 0) {
        throw new IllegalArgumentException("arguments");
      }
    } catch (IllegalArgumentException | ArrayIndexOutOfBoundsException e) {
      log(USAGE);
      return 2;
    }

    Object spec;
    try {
      spec = Json.parse(Files.readString(Path.of(file), StandardCharsets.UTF_8));
    } catch (IOException | IllegalArgumentException e) {
      log("cannot read job " + file + ": " + e.getMessage());
      return 2;
    }

    RepromptClient api = new RepromptClient(url, System.getenv("REPROMPT_API_KEY"))
        .retries(4, Duration.ofSeconds(30),
            (status, wait) -> log("retry: " + status + ", again in " + wait.toMillis() + " ms"));
    String idempotencyKey = key != null ? key : UUID.randomUUID().toString();
    Duration timeout = Duration.ofSeconds(timeoutS);
    ExecutorService background = Executors.newSingleThreadExecutor(r -> {
      Thread thread = new Thread(r, "reprompt-events");
      thread.setDaemon(true);
      return thread;
    });
    try {
      if (toolsFile != null) {
        Map<String, Object> answers =
            Json.parseObject(Files.readString(Path.of(toolsFile), StandardCharsets.UTF_8));
        Map<String, RepromptClient.ToolFunction> tools = new TreeMap<>();
        for (Map.Entry<String, Object> entry : answers.entrySet()) {
          tools.put(entry.getKey(), arguments -> {
            log("tool: " + entry.getKey() + " " + Json.write(arguments));
            return entry.getValue();
          });
        }
        Map<String, Object> job = api.run(spec, tools, idempotencyKey, waitMs, timeout);
        System.out.println(Json.pretty(job.get("result")));
        return "succeeded".equals(job.get("status")) ? 0 : 1;
      }
      RepromptClient.Submitted submitted = api.submit(spec, idempotencyKey);
      String id = submitted.id();
      log(submitted.replayed()
          ? "replayed " + id + " (200 Idempotent-Replayed, Idempotency-Key " + idempotencyKey + ")"
          : "submitted " + id + " (202, Idempotency-Key " + idempotencyKey + ")");

      CompletableFuture<Outcome> sse = null;
      if (!follow.equals("poll")) {
        sse = CompletableFuture.supplyAsync(() -> viaEvents(api, id, timeout), background);
      }
      Outcome poll = follow.equals("sse") ? null : viaLongPoll(api, id, waitMs, timeout);
      Outcome events = sse == null ? null : sse.get(timeoutS, TimeUnit.SECONDS);
      Outcome outcome = poll != null ? poll : events;
      if (poll != null && events != null) {
        if (!poll.status().equals(events.status())
            || !canonical(poll.result()).equals(canonical(events.result()))) {
          log("the paths disagree: events say " + events.status() + ", long-poll says "
              + poll.status());
          System.out.println(Json.pretty(Map.of("sse", events.result(), "poll", poll.result())));
          return 4;
        }
        log("long-poll and events agree: " + outcome.status());
      }
      System.out.println(Json.pretty(outcome.result()));
      return "succeeded".equals(outcome.status()) ? 0 : 1;
    } catch (ExecutionException | CompletionException e) {
      return failed(e.getCause(), url);
    } catch (ApiException | IOException | TimeoutException | IllegalStateException e) {
      return failed(e, url);
    } finally {
      background.shutdownNow();
    }
  }

  private static int failed(Throwable error, String url) {
    if (error instanceof CompletionException && error.getCause() != null) error = error.getCause();
    if (error instanceof ApiException problem) {
      log("reprompt answered " + problem.getMessage());
      System.out.println(Json.pretty(problem.problem()));
      return 3;
    }
    if (error instanceof ConnectException) {
      log("cannot connect to " + url + ": " + error);
      return 2;
    }
    log(String.valueOf(error.getMessage() != null ? error.getMessage() : error));
    return 2;
  }

  private static Outcome viaEvents(RepromptClient api, String id, Duration timeout) {
    try {
      Map<String, Object> ended = api.followEvents(
          id,
          null,
          e -> log("sse: " + (e.name() + " " + describe(e)).trim()),
          timeout,
          after -> log("sse: reconnecting after " + (after == null ? "the start" : after)));
      return new Outcome((String) ended.get("status"), ended.get("result"));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new CompletionException(e);
    } catch (Exception e) {
      throw new CompletionException(e);
    }
  }

  private static Outcome viaLongPoll(RepromptClient api, String id, long waitMs, Duration timeout)
      throws IOException, InterruptedException, ApiException, TimeoutException {
    AtomicInteger polls = new AtomicInteger();
    Map<String, Object> job = api.waitFor(id, waitMs, timeout, (answer, elapsedMs) ->
        log("long-poll " + polls.incrementAndGet() + ": " + answer.get("status") + " after "
            + elapsedMs + " ms"));
    if ("requires_action".equals(job.get("status"))) {
      throw new IllegalStateException(
          "job " + id + " waits for client tool outputs, which this example does not run");
    }
    return new Outcome((String) job.get("status"), job.get("result"));
  }

  private static String describe(RepromptClient.Event event) {
    Map<String, Object> d = event.data();
    return switch (event.name()) {
      case "turn_start" -> "turn=" + d.get("turn") + " type=" + d.get("type") + " attempt="
          + d.get("attempt");
      case "turn_end" -> "turn=" + d.get("turn") + " result=" + d.get("result")
          + (d.get("errorCode") == null ? ""
              : " " + d.get("errorCode") + ": "
                  + String.valueOf(d.get("diagnosis")).replaceAll("\\s*\\n\\s*", " "));
      case "job_end" -> "status=" + d.get("status") + " envelope="
          + (d.get("result") instanceof Map<?, ?> r ? r.get("status") : "?");
      case "job_start", "job_requeued" -> "attempt=" + d.get("attempt")
          + (d.get("reason") == null ? "" : " " + d.get("reason"));
      default -> "";
    };
  }

  /** JSON with sorted keys: the two paths' envelopes compared whatever their key order. */
  private static String canonical(Object value) {
    if (value instanceof Map<?, ?> map) {
      Map<String, String> sorted = new TreeMap<>();
      map.forEach((k, v) -> sorted.put(String.valueOf(k), canonical(v)));
      return sorted.entrySet().stream()
          .map(e -> Json.write(e.getKey()) + ":" + e.getValue())
          .collect(Collectors.joining(",", "{", "}"));
    }
    if (value instanceof List<?> list) {
      return list.stream().map(Example::canonical).collect(Collectors.joining(",", "[", "]"));
    }
    return Json.write(value);
  }

  private static String envOr(String name, String fallback) {
    String value = System.getenv(name);
    return value == null || value.isEmpty() ? fallback : value;
  }

  private static void log(String line) {
    System.err.println(line);
    System.err.flush();
  }
}

package reprompt.client;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The JSON reader and writer and the SSE reader on their own, with no service:
 * {@code ./build.sh build test && java -cp build reprompt.client.ClientTest}. Prints
 * "N passed, N failed" and exits 1 on any failure.
 */
public final class ClientTest {
  private static int passed;
  private static final List<String> failures = new ArrayList<>();

  private ClientTest() {}

  public static void main(String[] args) {
    check("objects keep their key order and types", () -> {
      Map<String, Object> v = Json.parseObject(
          "{\"b\": 1, \"a\": [true, false, null, -2.5e3, 12345678901234567890, \"x\"]}");
      equal(List.of("b", "a"), new ArrayList<>(v.keySet()));
      equal(1L, v.get("b"));
      List<?> a = (List<?>) v.get("a");
      equal(Boolean.TRUE, a.get(0));
      equal(null, a.get(2));
      equal(new BigDecimal("-2.5e3"), a.get(3));
      equal(new BigInteger("12345678901234567890"), a.get(4));
    });
    check("escapes, \\u and surrogate pairs round-trip", () -> {
      String text = "\"q\\\" b\\\\ s\\/ n\\n t\\t u\\u00e9 pair\\ud83d\\ude00 ctl\\u0001\"";
      Object v = Json.parse(text);
      equal("q\" b\\ s/ n\n t\t u\u00e9 pair\uD83D\uDE00 ctl\u0001", v);
      equal(v, Json.parse(Json.write(v)));
      equal("\"ctl\\u0001\"", Json.write("ctl\u0001"));
    });
    check("pretty output parses back to the same value", () -> {
      Object v = Json.parse("{\"a\": {\"b\": [1, {\"c\": []}, {}]}, \"d\": 0.5}");
      equal(v, Json.parse(Json.pretty(v)));
      equal("{\n  \"x\": [\n    1\n  ]\n}", Json.pretty(Map.of("x", List.of(1L))));
    });
    for (String bad : new String[] {"", "{", "[1,]", "{\"a\" 1}", "01x", "\"a", "tru", "1 2",
        "\"\\x\"", "\"\u0001\"", "-", "{\"a\":1,}"}) {
      check("refuses " + Json.write(bad), () -> refused(bad));
    }
    check("nesting deeper than MAX_DEPTH is refused, not a stack overflow", () -> {
      refused("[".repeat(100_000) + "]".repeat(100_000));
      Json.parse("[".repeat(Json.MAX_DEPTH) + "]".repeat(Json.MAX_DEPTH));
    });
    check("SSE: comments skipped, multi-line data joined, unfinished event dropped", () -> {
      List<String> lines = List.of(": ping", "", "id: 1-0", "event: turn_start",
          "data: {\"turn\": 1,", "data:  \"x\": 2}", "", "event: job_end", "data: {}", "",
          "id: 3-0", "data: {\"cut\"");
      RepromptClient.SseReader reader = new RepromptClient.SseReader(lines.iterator());
      RepromptClient.Event first = reader.next();
      equal("1-0", first.id());
      equal("turn_start", first.name());
      equal(Map.of("turn", 1L, "x", 2L), first.data());
      RepromptClient.Event second = reader.next();
      equal(null, second.id());
      equal("job_end", second.name());
      equal(null, reader.next());
    });
    System.out.println(passed + " passed, " + failures.size() + " failed");
    failures.forEach(f -> System.out.println("FAILED " + f));
    System.exit(failures.isEmpty() ? 0 : 1);
  }

  private interface Body {
    void run() throws Exception;
  }

  private static void check(String name, Body body) {
    try {
      body.run();
      passed++;
    } catch (Throwable e) {
      failures.add(name + ": " + e);
    }
  }

  private static void equal(Object want, Object got) {
    if (!Objects.equals(want, got)) throw new AssertionError("want " + want + ", got " + got);
  }

  private static void refused(String text) {
    try {
      Json.parse(text);
    } catch (IllegalArgumentException expected) {
      return;
    }
    throw new AssertionError("parsed " + text);
  }
}

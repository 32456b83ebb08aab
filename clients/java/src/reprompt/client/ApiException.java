package reprompt.client;

import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;

/** A non-2xx answer: its status and the problem+json body (RFC 9457) as the server sent it. */
public final class ApiException extends Exception {
  private static final long serialVersionUID = 1L;

  private final int status;
  private final transient Map<String, Object> problem;

  public ApiException(int status, Map<String, Object> problem) {
    super(summary(status, problem));
    this.status = status;
    this.problem = problem;
  }

  public int status() {
    return status;
  }

  /** type, title, status, detail, instance, code and, on a 422, errors (field, message). */
  public Map<String, Object> problem() {
    return problem;
  }

  private static String summary(int status, Map<String, Object> problem) {
    String text = status + " " + problem.get("title") + ": " + problem.get("detail");
    if (problem.get("errors") instanceof List<?> errors && !errors.isEmpty()) {
      text += errors.stream()
          .map(e -> e instanceof Map<?, ?> m ? String.valueOf(m.get("field")) : "?")
          .collect(Collectors.joining(", ", " [", "]"));
    }
    return text;
  }
}

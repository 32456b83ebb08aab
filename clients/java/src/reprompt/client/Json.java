package reprompt.client;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A tiny JSON reader and writer (RFC 8259), so the client needs nothing but the JDK.
 *
 * <p>Values: {@code Map<String, Object>} (key order kept), {@code List<Object>}, {@code String},
 * {@code Long} or {@code BigInteger} (integers), {@code BigDecimal} (other numbers), {@code
 * Boolean} and {@code null}. Nesting is bounded ({@link #MAX_DEPTH}): a hostile answer cannot
 * overflow the stack.
 */
public final class Json {
  public static final int MAX_DEPTH = 512;

  private final String text;
  private int pos;

  private Json(String text) {
    this.text = text;
  }

  /** The value {@code text} holds; {@link IllegalArgumentException} if it is not JSON. */
  public static Object parse(String text) {
    Json reader = new Json(text);
    reader.skipSpace();
    Object value = reader.value(0);
    reader.skipSpace();
    if (reader.pos != text.length()) throw reader.error("unexpected text after the value");
    return value;
  }

  /** {@code text} parsed as a JSON object. */
  @SuppressWarnings("unchecked")
  public static Map<String, Object> parseObject(String text) {
    Object value = parse(text);
    if (!(value instanceof Map)) throw new IllegalArgumentException("not a JSON object");
    return (Map<String, Object>) value;
  }

  /** {@code value} as compact JSON. */
  public static String write(Object value) {
    StringBuilder out = new StringBuilder();
    write(out, value, null, 0);
    return out.toString();
  }

  /** {@code value} as JSON indented by two spaces. */
  public static String pretty(Object value) {
    StringBuilder out = new StringBuilder();
    write(out, value, "  ", 0);
    return out.toString();
  }

  // -- reading ----------------------------------------------------------------------------

  private Object value(int depth) {
    if (depth > MAX_DEPTH) throw error("nested deeper than " + MAX_DEPTH);
    if (pos >= text.length()) throw error("unexpected end");
    char c = text.charAt(pos);
    switch (c) {
      case '{':
        return object(depth);
      case '[':
        return array(depth);
      case '"':
        return string();
      case 't':
        return literal("true", Boolean.TRUE);
      case 'f':
        return literal("false", Boolean.FALSE);
      case 'n':
        return literal("null", null);
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return number();
        throw error("unexpected character '" + c + "'");
    }
  }

  private Map<String, Object> object(int depth) {
    Map<String, Object> map = new LinkedHashMap<>();
    pos++; // {
    skipSpace();
    if (peek() == '}') {
      pos++;
      return map;
    }
    while (true) {
      skipSpace();
      if (peek() != '"') throw error("expected a string key");
      String key = string();
      skipSpace();
      expect(':');
      skipSpace();
      map.put(key, value(depth + 1));
      skipSpace();
      char c = next();
      if (c == '}') return map;
      if (c != ',') throw error("expected ',' or '}'");
    }
  }

  private List<Object> array(int depth) {
    List<Object> list = new ArrayList<>();
    pos++; // [
    skipSpace();
    if (peek() == ']') {
      pos++;
      return list;
    }
    while (true) {
      skipSpace();
      list.add(value(depth + 1));
      skipSpace();
      char c = next();
      if (c == ']') return list;
      if (c != ',') throw error("expected ',' or ']'");
    }
  }

  private String string() {
    pos++; // opening quote
    StringBuilder out = new StringBuilder();
    while (true) {
      char c = next();
      if (c == '"') return out.toString();
      if (c < 0x20) throw error("control character in a string");
      if (c != '\\') {
        out.append(c);
        continue;
      }
      char e = next();
      switch (e) {
        case '"', '\\', '/' -> out.append(e);
        case 'b' -> out.append('\b');
        case 'f' -> out.append('\f');
        case 'n' -> out.append('\n');
        case 'r' -> out.append('\r');
        case 't' -> out.append('\t');
        case 'u' -> {
          if (pos + 4 > text.length()) throw error("short \\u escape");
          try {
            out.append((char) Integer.parseInt(text.substring(pos, pos + 4), 16));
          } catch (NumberFormatException ex) {
            throw error("bad \\u escape");
          }
          pos += 4;
        }
        default -> throw error("bad escape '\\" + e + "'");
      }
    }
  }

  private Object number() {
    int start = pos;
    if (peek() == '-') pos++;
    digits();
    boolean integral = true;
    if (pos < text.length() && text.charAt(pos) == '.') {
      integral = false;
      pos++;
      digits();
    }
    if (pos < text.length() && (text.charAt(pos) == 'e' || text.charAt(pos) == 'E')) {
      integral = false;
      pos++;
      if (pos < text.length() && (text.charAt(pos) == '+' || text.charAt(pos) == '-')) pos++;
      digits();
    }
    String literal = text.substring(start, pos);
    if (!integral) return new BigDecimal(literal);
    BigInteger big = new BigInteger(literal);
    return big.bitLength() < 64 ? (Object) big.longValue() : big;
  }

  private void digits() {
    int start = pos;
    while (pos < text.length() && Character.isDigit(text.charAt(pos))) pos++;
    if (pos == start) throw error("expected a digit");
  }

  private Object literal(String word, Object value) {
    if (!text.startsWith(word, pos)) throw error("unexpected word");
    pos += word.length();
    return value;
  }

  private void skipSpace() {
    while (pos < text.length()) {
      char c = text.charAt(pos);
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
      pos++;
    }
  }

  private char peek() {
    if (pos >= text.length()) throw error("unexpected end");
    return text.charAt(pos);
  }

  private char next() {
    char c = peek();
    pos++;
    return c;
  }

  private void expect(char c) {
    if (next() != c) throw error("expected '" + c + "'");
  }

  private IllegalArgumentException error(String why) {
    return new IllegalArgumentException("invalid JSON at offset " + pos + ": " + why);
  }

  // -- writing ----------------------------------------------------------------------------

  private static void write(StringBuilder out, Object value, String indent, int level) {
    if (value == null) {
      out.append("null");
    } else if (value instanceof String s) {
      quote(out, s);
    } else if (value instanceof Boolean || value instanceof Long || value instanceof Integer
        || value instanceof BigInteger) {
      out.append(value);
    } else if (value instanceof BigDecimal d) {
      out.append(d.toString());
    } else if (value instanceof Double d) {
      if (d.isNaN() || d.isInfinite()) throw new IllegalArgumentException("not a JSON number");
      out.append(BigDecimal.valueOf(d).toString());
    } else if (value instanceof Map<?, ?> map) {
      if (map.isEmpty()) {
        out.append("{}");
        return;
      }
      out.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> entry : map.entrySet()) {
        if (!first) out.append(',');
        first = false;
        newline(out, indent, level + 1);
        quote(out, String.valueOf(entry.getKey()));
        out.append(indent == null ? ":" : ": ");
        write(out, entry.getValue(), indent, level + 1);
      }
      newline(out, indent, level);
      out.append('}');
    } else if (value instanceof List<?> list) {
      if (list.isEmpty()) {
        out.append("[]");
        return;
      }
      out.append('[');
      for (int i = 0; i < list.size(); i++) {
        if (i > 0) out.append(',');
        newline(out, indent, level + 1);
        write(out, list.get(i), indent, level + 1);
      }
      newline(out, indent, level);
      out.append(']');
    } else {
      throw new IllegalArgumentException("cannot write " + value.getClass().getName() + " as JSON");
    }
  }

  private static void newline(StringBuilder out, String indent, int level) {
    if (indent == null) return;
    out.append('\n');
    out.append(indent.repeat(level));
  }

  private static void quote(StringBuilder out, String s) {
    out.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        default -> {
          if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
          else out.append(c);
        }
      }
    }
    out.append('"');
  }
}

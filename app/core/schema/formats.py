"""Every JSON Schema 2020-12 ``format``, checked as its standard defines it, the same everywhere.

``format`` is asserted by this service (an answer with a wrong format is re-asked, like a
wrong type); each check is a small pure function of a string, ``True`` when it conforms::

    CHECKS["date-time"]("1998-12-31T23:59:60Z")   # True: a leap second, in UTC
    CHECKS["hostname"]("-hostname")               # False
    unknown_formats({"format": "currency"})        # ["currency"]: refused at submit

Standards (docs/validators.md lists them): RFC 3339 (date-time, date, time; duration per
its Appendix A), RFC 5321 / RFC 6531 (email, idn-email), RFC 1123 and RFC 5890-5893
(hostname, idn-hostname; IDNA 2008 through the ``idna`` package), RFC 2673 / RFC 4291
(ipv4, ipv6), RFC 3986 / RFC 3987 (uri, uri-reference, iri, iri-reference), RFC 4122
(uuid), RFC 6570 (uri-template), RFC 6901 and draft-bhutton-relative-json-pointer-00
(json-pointer, relative-json-pointer), ECMA-262 (regex, via ``app.core.schema.pattern``).

Digits are ASCII everywhere (Python's ``\\d`` would take any script's digits). Every check
is linear in its string: plain ``re`` patterns without nested quantifiers over
overlapping alternatives, and the strings are answers already bounded in size.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from datetime import date as _date
from typing import Any, Final, NamedTuple

import idna

from app.core.schema.pattern import is_regex

Check = Callable[[str], bool]

# -- dates and times (RFC 3339) ---------------------------------------------------

_DATE: Final = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", re.ASCII)
_TIME: Final = re.compile(
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))",
    re.ASCII,
)


def is_date(value: str) -> bool:
    match = _DATE.fullmatch(value)
    if match is None:
        return False
    try:
        _date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return False
    return True


def is_time(value: str) -> bool:
    match = _TIME.fullmatch(value)
    if match is None:
        return False
    hour, minute, second = int(match[1]), int(match[2]), int(match[3])
    if hour > 23 or minute > 59 or second > 60:
        return False
    offset = 0
    if not match[4]:
        off_hour, off_minute = int(match[6]), int(match[7])
        if off_hour > 23 or off_minute > 59:
            return False
        offset = (off_hour * 60 + off_minute) * (1 if match[5] == "+" else -1)
    if second == 60:
        # A leap second is 23:59:60 in UTC, whatever the local time it is written in.
        utc = (hour * 60 + minute - offset) % (24 * 60)
        return utc == 23 * 60 + 59
    return True


def is_date_time(value: str) -> bool:
    if len(value) < 11 or value[10] not in "Tt":
        return False
    return is_date(value[:10]) and is_time(value[11:])


_DURATION: Final = re.compile(
    r"P(?:[0-9]+W"
    r"|(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"
    r"(?:T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?"
    r"|T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))",
    re.ASCII,
)


def is_duration(value: str) -> bool:
    """RFC 3339 Appendix A's ``duration`` (weeks alone; no fractions)."""
    return _DURATION.fullmatch(value) is not None


# -- host names and addresses -----------------------------------------------------

_LABEL: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)
_IPV4: Final = re.compile(r"(?:0|[1-9][0-9]{0,2})(?:\.(?:0|[1-9][0-9]{0,2})){3}", re.ASCII)


def is_hostname(value: str) -> bool:
    """RFC 1123 host name: dot-separated LDH labels of 1-63, at most 253 characters; an
    ``xn--`` label must be a valid A-label (RFC 5890)."""
    name = value
    if not name or len(name) > 253:
        return False
    for label in name.split("."):
        if _LABEL.fullmatch(label) is None:
            return False
        if label[2:4] == "--" and not label.lower().startswith("xn--"):
            return False  # RFC 5891 §4.2.3.1: hyphens in positions 3 and 4 only for A-labels
        if label.lower().startswith("xn--") and not _a_label(label):
            return False
    return True


def _a_label(label: str) -> bool:
    try:
        idna.decode(label)
    except (idna.IDNAError, UnicodeError, ValueError):
        return False
    return True


_LABEL_SEPARATORS: Final = re.compile("[.\u3002\uff0e\uff61]")


def is_idn_hostname(value: str) -> bool:
    """RFC 5890-5893 (IDNA 2008) host name, each label checked by the ``idna`` package."""
    if not value:
        return False
    labels = _LABEL_SEPARATORS.split(value)
    encoded = 0
    for label in labels:
        if not label:
            return False
        if label.isascii():
            if _LABEL.fullmatch(label) is None:
                return False
            if label[2:4] == "--" and not label.lower().startswith("xn--"):
                return False
            if label.lower().startswith("xn--") and not _a_label(label):
                return False
            encoded += len(label) + 1
            continue
        try:
            ascii_label = idna.alabel(label)
        except (idna.IDNAError, UnicodeError, ValueError):
            return False
        encoded += len(ascii_label) + 1
    if any(unicodedata.bidirectional(c) in ("R", "AL", "AN") for c in value):
        # RFC 5893: in a Bidi domain name every label satisfies the Bidi rule.
        for label in labels:
            try:
                idna.check_bidi(
                    label if not label.lower().startswith("xn--") else idna.decode(label),
                    check_ltr=True,
                )
            except (idna.IDNAError, UnicodeError, ValueError):
                return False
    return encoded - 1 <= 253


def is_ipv4(value: str) -> bool:
    if _IPV4.fullmatch(value) is None:
        return False
    return all(int(part) <= 255 for part in value.split("."))


def is_ipv6(value: str) -> bool:
    if not value.isascii() or "%" in value or not re.fullmatch(r"[0-9A-Fa-f:.]+", value):
        return False  # no zone id (RFC 6874 is not RFC 4291), no other characters
    try:
        ipaddress.IPv6Address(value)
    except ValueError:
        return False
    return True


# -- email (RFC 5321 Mailbox; RFC 6531 for the internationalized one) ---------------

_ATEXT: Final = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~-"
_DOT_STRING: Final = re.compile(rf"[{_ATEXT}]+(?:\.[{_ATEXT}]+)*", re.ASCII)
_IDN_DOT_STRING: Final = re.compile(
    rf"(?:[{_ATEXT}]|[^\x00-\x7f])+(?:\.(?:[{_ATEXT}]|[^\x00-\x7f])+)*"
)


def _quoted_string(value: str, *, international: bool) -> bool:
    """RFC 5321's Quoted-string (RFC 6531 adds non-ASCII text), read one character at a time:
    a pattern for it is quadratic when searched over unclosed quotes."""
    if len(value) < 2 or value[0] != '"' or value[-1] != '"':
        return False
    inner = value[1:-1]
    at = 0
    while at < len(inner):
        char = inner[at]
        if char == "\\":
            if at + 1 == len(inner) or not "\x20" <= inner[at + 1] <= "\x7e":
                return False
            at += 2
            continue
        if not ("\x20" <= char <= "\x7e" and char != '"') and not (international and char > "\x7f"):
            return False
        at += 1
    return True


def _mailbox(value: str, *, international: bool) -> bool:
    at = value.rfind("@")
    if at <= 0:
        return False
    local, domain = value[:at], value[at + 1 :]
    dot = _IDN_DOT_STRING if international else _DOT_STRING
    if dot.fullmatch(local) is None and not _quoted_string(local, international=international):
        return False
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        if literal[:5].lower() == "ipv6:":
            return is_ipv6(literal[5:])
        return is_ipv4(literal)
    # RFC 6532 §3.1: non-NFC text is normalized, not refused.
    return (
        is_idn_hostname(unicodedata.normalize("NFC", domain))
        if international
        else is_hostname(domain)
    )


def is_email(value: str) -> bool:
    return _mailbox(value, international=False)


def is_idn_email(value: str) -> bool:
    return _mailbox(value, international=True)


# -- URIs and IRIs (RFC 3986, RFC 3987) --------------------------------------------
#
# A reference is split into its parts with plain string operations (RFC 3986 Appendix B's
# reading), and each part is checked against its character set: one pattern for the whole
# grammar is quadratic when searched (a scheme is tried from every letter of a long word).

_UCS: Final = (
    "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef"
    "\U00010000-\U0001fffd\U00020000-\U0002fffd\U00030000-\U0003fffd"
    "\U00040000-\U0004fffd\U00050000-\U0005fffd\U00060000-\U0006fffd"
    "\U00070000-\U0007fffd\U00080000-\U0008fffd\U00090000-\U0009fffd"
    "\U000a0000-\U000afffd\U000b0000-\U000bfffd\U000c0000-\U000cfffd"
    "\U000d0000-\U000dfffd\U000e1000-\U000efffd"
)
_PRIVATE: Final = "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+\-.]*", re.ASCII)
_PORT: Final = re.compile(r"[0-9]*", re.ASCII)
_IP_FUTURE: Final = re.compile(r"[vV][0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+", re.ASCII)


def _chars(extra: str, *, iri: bool) -> re.Pattern[str]:
    """Unreserved and sub-delims characters, percent-encodings, and ``extra`` (none of which
    is ``%``: the two alternatives never match the same text)."""
    ucs = _UCS if iri else ""
    return re.compile(rf"(?:[A-Za-z0-9\-._~!$&'()*+,;={ucs}{extra}]|%[0-9A-Fa-f]{{2}})*")


class _Parts(NamedTuple):
    userinfo: re.Pattern[str]
    host: re.Pattern[str]
    path: re.Pattern[str]
    first: re.Pattern[str]  # path-noscheme's first segment: no colon
    query: re.Pattern[str]
    fragment: re.Pattern[str]


def _parts(*, iri: bool) -> _Parts:
    return _Parts(
        userinfo=_chars(":", iri=iri),
        host=_chars("", iri=iri),
        path=_chars(":@/", iri=iri),
        first=_chars("@", iri=iri),
        query=_chars(":@/?" + (_PRIVATE if iri else ""), iri=iri),
        fragment=_chars(":@/?", iri=iri),
    )


_URI_PARTS: Final = _parts(iri=False)
_IRI_PARTS: Final = _parts(iri=True)


def _reference(value: str, *, iri: bool, relative: bool) -> bool:
    """An absolute URI (``relative=False``: scheme, hier-part, query, fragment) or a relative
    reference (RFC 3986 §4.2), with RFC 3987's wider character sets when ``iri``."""
    parts = _IRI_PARTS if iri else _URI_PARTS
    rest, hash_, fragment = value.partition("#")
    if hash_ and parts.fragment.fullmatch(fragment) is None:
        return False
    rest, question, query = rest.partition("?")
    if question and parts.query.fullmatch(query) is None:
        return False
    if not relative:
        scheme, colon, rest = rest.partition(":")
        if not colon or _SCHEME.fullmatch(scheme) is None:
            return False
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        return _authority(authority, parts) and parts.path.fullmatch(slash + path) is not None
    if relative:
        first = rest.partition("/")[0]
        if parts.first.fullmatch(first) is None:
            return False  # a colon in the first segment would read as a scheme
    return parts.path.fullmatch(rest) is not None


def _authority(authority: str, parts: _Parts) -> bool:
    userinfo, at, hostport = authority.rpartition("@")
    if at and parts.userinfo.fullmatch(userinfo) is None:
        return False
    if hostport.startswith("["):
        literal, bracket, port = hostport[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            return False
        if literal[:1] in ("v", "V"):
            host_ok = _IP_FUTURE.fullmatch(literal) is not None
        else:
            host_ok = is_ipv6(literal)
        return host_ok and _PORT.fullmatch(port[1:]) is not None
    host, _, port = hostport.partition(":")
    return parts.host.fullmatch(host) is not None and _PORT.fullmatch(port) is not None


def is_uri(value: str) -> bool:
    return _reference(value, iri=False, relative=False)


def is_uri_reference(value: str) -> bool:
    return _reference(value, iri=False, relative=False) or _reference(
        value, iri=False, relative=True
    )


def is_iri(value: str) -> bool:
    return _reference(value, iri=True, relative=False)


def is_iri_reference(value: str) -> bool:
    return _reference(value, iri=True, relative=False) or _reference(value, iri=True, relative=True)


# -- the rest -----------------------------------------------------------------------

_UUID: Final = re.compile(
    r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}", re.ASCII
)
_VARNAME: Final = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})(?:\.?(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2}))*"
_VARSPEC: Final = rf"{_VARNAME}(?::[1-9][0-9]{{0,3}}|\*)?"
_EXPRESSION: Final = rf"\{{[+#./;?&=,!@|]?{_VARSPEC}(?:,{_VARSPEC})*\}}"
# RFC 6570's literals, and the apostrophe (valid, as the JSON Schema Test Suite reads it).
_LITERAL: Final = (
    r"[\x21\x23\x27\x24\x26\x28-\x3b\x3d\x3f-\x5b\x5d\x5f\x61-\x7a\x7e"
    + _UCS
    + _PRIVATE
    + r"]|%[0-9A-Fa-f]{2}"
)
_URI_TEMPLATE: Final = re.compile(rf"(?:{_LITERAL}|{_EXPRESSION})*")
_JSON_POINTER: Final = re.compile(r"(?:/(?:[^~/]|~[01])*)*", re.DOTALL)
_RELATIVE_POINTER: Final = re.compile(
    r"(?:0|[1-9][0-9]*)(?:[+-](?:[1-9][0-9]*))?(?:#|(?:/(?:[^~/]|~[01])*)*)", re.DOTALL | re.ASCII
)


_INLINE_FLAGS: Final = re.compile(r"\?[A-Za-z-]*\)|\?P")


def is_ecma_regex(value: str) -> bool:
    """ECMA-262: no Python-only syntax (``(?P<name>…)``, ``(?P=name)``, a global ``(?i)``),
    then whatever ``app.core.schema.pattern`` can read."""
    escaped = in_class = False
    for at, char in enumerate(value):
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(" and _INLINE_FLAGS.match(value, at + 1):
            return False
    return is_regex(value)


def is_uuid(value: str) -> bool:
    return _UUID.fullmatch(value) is not None


def is_uri_template(value: str) -> bool:
    return _URI_TEMPLATE.fullmatch(value) is not None


def is_json_pointer(value: str) -> bool:
    return _JSON_POINTER.fullmatch(value) is not None


def is_relative_json_pointer(value: str) -> bool:
    return _RELATIVE_POINTER.fullmatch(value) is not None


CHECKS: Final[Mapping[str, Check]] = {
    "date-time": is_date_time,
    "date": is_date,
    "time": is_time,
    "duration": is_duration,
    "email": is_email,
    "idn-email": is_idn_email,
    "hostname": is_hostname,
    "idn-hostname": is_idn_hostname,
    "ipv4": is_ipv4,
    "ipv6": is_ipv6,
    "uri": is_uri,
    "uri-reference": is_uri_reference,
    "iri": is_iri,
    "iri-reference": is_iri_reference,
    "uuid": is_uuid,
    "uri-template": is_uri_template,
    "json-pointer": is_json_pointer,
    "relative-json-pointer": is_relative_json_pointer,
    "regex": is_ecma_regex,
}


def conforms(value: Any, name: str) -> bool:
    """Whether ``value`` has format ``name`` (a non-string, or an unknown name, always does)."""
    check = CHECKS.get(name)
    return check is None or not isinstance(value, str) or check(value)


def unknown_formats(schema: Any) -> list[str]:
    """The format names ``schema`` uses that this service does not check (refused at submit)."""
    found: dict[str, None] = {}
    for node in _nodes(schema):
        name = node.get("format")
        if isinstance(name, str) and name not in CHECKS:
            found[name] = None
    return list(found)


# Keywords whose values are data, not subschemas: a "format" inside them is no keyword.
_DATA: Final = frozenset({"const", "enum", "default", "examples"})


def _nodes(schema: Any) -> Iterator[Mapping[str, Any]]:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            yield node
            for key, child in node.items():
                if key in _DATA:
                    continue
                if key in ("properties", "patternProperties", "$defs", "dependentSchemas"):
                    if isinstance(child, Mapping):
                        stack.extend(child.values())
                else:
                    stack.append(child)
        elif isinstance(node, list):
            stack.extend(node)

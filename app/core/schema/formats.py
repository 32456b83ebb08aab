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
from typing import Any, Final

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
_QUOTED: Final = re.compile(r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*"', re.ASCII)
_IDN_DOT_STRING: Final = re.compile(
    rf"(?:[{_ATEXT}]|[^\x00-\x7f])+(?:\.(?:[{_ATEXT}]|[^\x00-\x7f])+)*"
)
_IDN_QUOTED: Final = re.compile(r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|[^\x00-\x7f]|\\[\x20-\x7e])*"')


def _mailbox(value: str, *, international: bool) -> bool:
    at = value.rfind("@")
    if at <= 0:
        return False
    local, domain = value[:at], value[at + 1 :]
    dot, quoted = (_IDN_DOT_STRING, _IDN_QUOTED) if international else (_DOT_STRING, _QUOTED)
    if dot.fullmatch(local) is None and quoted.fullmatch(local) is None:
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

_UCS: Final = (
    "\u00a0-\ud7ff\uf900-\ufdcf\ufdf0-\uffef"
    "\U00010000-\U0001fffd\U00020000-\U0002fffd\U00030000-\U0003fffd"
    "\U00040000-\U0004fffd\U00050000-\U0005fffd\U00060000-\U0006fffd"
    "\U00070000-\U0007fffd\U00080000-\U0008fffd\U00090000-\U0009fffd"
    "\U000a0000-\U000afffd\U000b0000-\U000bfffd\U000c0000-\U000cfffd"
    "\U000d0000-\U000dfffd\U000e1000-\U000efffd"
)
_PRIVATE: Final = "\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd"


def _uri_pattern(*, iri: bool, relative: bool) -> re.Pattern[str]:
    extra = _UCS if iri else ""
    unreserved = rf"[A-Za-z0-9\-._~{extra}]"
    pct = r"%[0-9A-Fa-f]{2}"
    sub = r"[!$&'()*+,;=]"
    pchar = rf"(?:{unreserved}|{pct}|{sub}|[:@])"
    query = rf"(?:{pchar}|[/?{_PRIVATE if iri else ''}])*"
    fragment = rf"(?:{pchar}|[/?])*"
    ip_literal = r"\[(?:[0-9A-Fa-f:.]+|[vV][0-9A-Fa-f]+\.[A-Za-z0-9\-._~!$&'()*+,;=:]+)\]"
    reg_name = rf"(?:{unreserved}|{pct}|{sub})*"
    userinfo = rf"(?:{unreserved}|{pct}|{sub}|:)*"
    authority = rf"(?:{userinfo}@)?(?P<host>{ip_literal}|{reg_name})(?::[0-9]*)?"
    segment = rf"{pchar}*"
    segment_nz = rf"{pchar}+"
    segment_nz_nc = rf"(?:{unreserved}|{pct}|{sub}|@)+"
    abempty = rf"(?:/{segment})*"
    absolute = rf"/(?:{segment_nz}(?:/{segment})*)?"
    rootless = rf"{segment_nz}(?:/{segment})*"
    noscheme = rf"{segment_nz_nc}(?:/{segment})*"
    hier = rf"(?://{authority}{abempty}|{absolute}|{rootless}|)"
    if not relative:
        return re.compile(rf"[A-Za-z][A-Za-z0-9+\-.]*:{hier}(?:\?{query})?(?:#{fragment})?")
    return re.compile(
        rf"(?://{authority}{abempty}|{absolute}|{noscheme}|)(?:\?{query})?(?:#{fragment})?"
    )


_URI: Final = _uri_pattern(iri=False, relative=False)
_RELATIVE_URI: Final = _uri_pattern(iri=False, relative=True)
_IRI: Final = _uri_pattern(iri=True, relative=False)
_RELATIVE_IRI: Final = _uri_pattern(iri=True, relative=True)


def _uri_like(value: str, *patterns: re.Pattern[str]) -> bool:
    for pattern in patterns:
        match = pattern.fullmatch(value)
        if match is None:
            continue
        host = match.group("host")
        if host and host.startswith("[") and host[1:2].lower() != "v":
            return is_ipv6(host[1:-1])
        return True
    return False


def is_uri(value: str) -> bool:
    return _uri_like(value, _URI)


def is_uri_reference(value: str) -> bool:
    return _uri_like(value, _URI, _RELATIVE_URI)


def is_iri(value: str) -> bool:
    return _uri_like(value, _IRI)


def is_iri_reference(value: str) -> bool:
    return _uri_like(value, _IRI, _RELATIVE_IRI)


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

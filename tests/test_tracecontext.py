"""W3C trace context headers: what is kept, what is dropped (never an error)."""

from __future__ import annotations

import pytest

from app.tracecontext import (
    MAX_TRACESTATE_MEMBERS,
    TraceContext,
    parse_traceparent,
    parse_tracestate,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
VALID = f"00-{TRACE}-{PARENT}-01"


@pytest.mark.parametrize(
    ("header", "kept"),
    [
        (VALID, VALID),
        (f"00-{TRACE}-{PARENT}-00", f"00-{TRACE}-{PARENT}-00"),
        (f" {VALID}\t", VALID),
        # A later version: its first four fields, read as version 00.
        (f"01-{TRACE}-{PARENT}-01", VALID),
        (f"cc-{TRACE}-{PARENT}-01-what-the-future-adds", VALID),
    ],
)
def test_a_valid_traceparent_is_kept_as_version_00(header: str, kept: str) -> None:
    assert parse_traceparent(header) == kept


@pytest.mark.parametrize(
    "header",
    [
        "",
        "garbage",
        f"ff-{TRACE}-{PARENT}-01",  # version ff is invalid
        f"00-{TRACE}-{PARENT}-01-extra",  # version 00 has exactly four fields
        f"01-{TRACE}-{PARENT}-01extra",  # a later version's extra fields follow a dash
        f"00-{'0' * 32}-{PARENT}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero parent id
        f"00-{TRACE.upper()}-{PARENT}-01",  # upper-case hex
        f"00-{TRACE[:-1]}-{PARENT}-01",
        f"00-{TRACE}-{PARENT}-1",
        f"00_{TRACE}_{PARENT}_01",
        f"00-{TRACE}-{PARENT}-0g",
        f"01-{TRACE}-{PARENT}-01-" + "x" * 300,  # longer than we read
        "00-" + "é" * 32 + f"-{PARENT}-01",
    ],
)
def test_an_invalid_traceparent_is_dropped(header: str) -> None:
    assert parse_traceparent(header) is None


def test_a_repeated_or_missing_traceparent_means_no_parent() -> None:
    assert TraceContext.from_headers([]) is None
    assert TraceContext.from_headers([VALID, VALID]) is None
    assert TraceContext.from_headers(["nonsense"], ["a=b"]) is None
    context = TraceContext.from_headers([VALID], ["a=1", "b=2"])
    assert context == TraceContext(VALID, "a=1,b=2")
    assert (context.trace_id, context.parent_id) == (TRACE, PARENT)


@pytest.mark.parametrize(
    ("headers", "kept"),
    [
        (["congo=t61rcWkgMzE"], "congo=t61rcWkgMzE"),
        (["rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"], "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
        (["a=1,,  ,b=2"], "a=1,b=2"),  # empty members are allowed and dropped
        (["tenant@vendor=x", "k/v*_-=~!"], "tenant@vendor=x,k/v*_-=~!"),
        ([], None),
        ([""], None),
    ],
)
def test_a_valid_tracestate_is_kept(headers: list[str], kept: str | None) -> None:
    assert parse_tracestate(headers) == kept


@pytest.mark.parametrize(
    "headers",
    [
        ["novalue"],
        ["Upper=1"],  # keys are lower case
        ["a=1,a=2"],  # a key twice
        ["a=1", "a=2"],
        ["a=with,comma"],
        ["a=\x7f"],  # a control character
        ["a=x=y"],  # "=" is not a value character
        ["a=é"],
        ["a=" + "v" * 257],
        ["k" * 257 + "=1"],
        [f"m{i}=1" for i in range(MAX_TRACESTATE_MEMBERS + 1)],
        ["a=" + "v" * 250, "b=" + "v" * 250, "c=" + "v" * 20],  # over MAX_TRACESTATE
        ["x" * 100_000],
    ],
)
def test_a_malformed_or_oversized_tracestate_is_dropped_whole(headers: list[str]) -> None:
    assert parse_tracestate(headers) is None


def test_the_stored_form_round_trips_and_anything_else_reads_as_none() -> None:
    context = TraceContext(VALID, "a=1")
    assert TraceContext.loads(context.dumps()) == context
    assert TraceContext.loads(TraceContext(VALID).dumps()) == TraceContext(VALID)
    assert TraceContext.loads(context.dumps().encode()) == context
    for raw in (None, "", b"", "{", "[]", '{"traceparent": 1}', '{"traceparent": "00-x"}'):
        assert TraceContext.loads(raw) is None

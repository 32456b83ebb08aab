"""Grounded extraction: values found in the input, spans that point at them, and diagnoses
that name the fabricated ones (app.core.answer.grounding, folding, numerals, approx)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.answer.contract import build_contract
from app.core.answer.grounding import MAX_LINES, Grounded, build
from app.core.schema.jsonpath import locate
from app.core.text.approx import best_match
from app.core.text.folding import fold, fold_text
from app.core.text.numerals import numeral_index, readings, value_of
from app.core.turn.loop import Runtime, run_job
from app.core.wire.envelope import Envelope, GroundingSpan
from app.core.wire.errors import InvalidInput
from app.core.wire.spec import JobSpec, ValidatorSpec
from tests.core.fakes import FakeClock, ScriptedClient, answer

INVOICE = "Invoice from ACME Corp.\nLines: H-1 widget x2 at 3.50; H-2 gadget x1 at 1,234.50."


def grounded(job_input: Any, *paths: str, **fields: Any) -> Grounded:
    spec = ValidatorSpec.model_validate({"kind": "grounded", "paths": list(paths), **fields})
    return build(spec, "validators[0]", job_input)


def evidence(text: str, span: GroundingSpan) -> str:
    return text[span.start : span.end]


def spans_of(check: Grounded, value: Any) -> dict[str, GroundingSpan]:
    ok, diagnosis = check.check(value)
    assert ok, diagnosis
    return {span.path: span for span in check.spans(value)}


# -- exact ------------------------------------------------------------------------------------


def test_exact_values_are_found_with_spans_pointing_at_them() -> None:
    check = grounded(INVOICE, "$.vendor", "$.lines[*].sku", mode="exact")
    value = {"vendor": "ACME Corp", "lines": [{"sku": "H-1"}, {"sku": "H-2"}]}
    spans = spans_of(check, value)
    assert list(spans) == ["$.vendor", "$.lines[0].sku", "$.lines[1].sku"]
    assert evidence(INVOICE, spans["$.vendor"]) == "ACME Corp"
    assert evidence(INVOICE, spans["$.lines[0].sku"]) == "H-1"
    assert evidence(INVOICE, spans["$.lines[1].sku"]) == "H-2"
    assert all(span.input_path is None for span in spans.values())


def test_exact_is_case_and_space_sensitive() -> None:
    check = grounded(INVOICE, "$.vendor", mode="exact")
    ok, diagnosis = check.check({"vendor": "acme  corp"})
    assert not ok
    assert diagnosis == '$.vendor: "acme  corp" is not in the input; closest: "ACME Corp"'


def test_a_fabricated_value_is_named_with_the_closest_text_of_the_input() -> None:
    check = grounded(INVOICE, "$.lines[*].sku")
    ok, diagnosis = check.check({"lines": [{"sku": "H-1"}, {"sku": "H-7"}]})
    assert not ok
    assert diagnosis == '$.lines[1].sku: "H-7" is not in the input; closest: "H-1"'


def test_the_closest_text_is_quoted_as_whole_words() -> None:
    ok, diagnosis = grounded("Item QX-17, qty 3", "$.sku").check({"sku": "QX-71"})
    assert not ok
    assert diagnosis == '$.sku: "QX-71" is not in the input; closest: "QX-17"'


def test_a_value_with_nothing_like_it_gets_no_closest_text() -> None:
    ok, diagnosis = grounded(INVOICE, "$.vendor").check({"vendor": "Zyxwvut Qq"})
    assert not ok
    assert diagnosis == '$.vendor: "Zyxwvut Qq" is not in the input'


def test_the_diagnosis_names_at_most_eight_values_then_counts_the_rest() -> None:
    check = grounded(INVOICE, "$[*]")
    ok, diagnosis = check.check([f"fabricated-{i}" for i in range(12)])
    assert not ok
    assert diagnosis is not None
    lines = diagnosis.splitlines()
    assert len(lines) == MAX_LINES + 1
    assert lines[0].startswith('$[0]: "fabricated-0" is not in the input')
    assert lines[-1] == "... and 4 more"


def test_the_message_heads_the_diagnosis() -> None:
    check = grounded(INVOICE, "$.vendor", message="copy the vendor from the document")
    ok, diagnosis = check.check({"vendor": "Globex"})
    assert not ok
    assert diagnosis == (
        'copy the vendor from the document:\n$.vendor: "Globex" is not in the input'
    )


def test_containers_are_walked_and_empty_strings_booleans_and_numbers_skipped() -> None:
    check = grounded(INVOICE, "$")
    value = {"vendor": "ACME", "paid": True, "note": "", "qty": 999, "x": None, "l": [["H-2"]]}
    spans = spans_of(check, value)
    assert list(spans) == ["$.vendor", "$.l[0][0]"]


def test_a_path_that_reaches_nothing_passes() -> None:
    assert grounded(INVOICE, "$.missing[*].sku").check({"lines": []}) == (True, None)


# -- normalized -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "value", "shown"),
    [
        ("Invoice from ACME   Corp.", "acme corp", "ACME   Corp"),
        ("Paid to\n\tACME\u00a0Corp", "ACME Corp", "ACME\u00a0Corp"),
        ("Straße 5, Berlin", "STRASSE 5", "Straße 5"),
        ("Ship to O\u2019Brien \u2013 Dublin", "O'Brien - Dublin", "O\u2019Brien \u2013 Dublin"),
        ("\u201cQuoted\u201d name", '"quoted"', "\u201cQuoted\u201d"),
        ("Fullwidth \uff21\uff23\uff2d\uff25 Ltd", "ACME Ltd", "\uff21\uff23\uff2d\uff25 Ltd"),
        ("the \ufb01nance team", "finance", "\ufb01nance"),
        ("Cafe\u0301 Mu\u0308ller", "Café Müller", "Cafe\u0301 Mu\u0308ller"),
        ("Café Müller", "Cafe\u0301 Mu\u0308ller", "Café Müller"),
        ("soft\u00adhyphen", "softhyphen", "soft\u00adhyphen"),
        (
            "order \U0001f355 pizza \u2764\ufe0f now",
            "\U0001f355 pizza \u2764",
            "\U0001f355 pizza \u2764",
        ),
        (
            "dev \U0001f469\u200d\U0001f4bb team",
            "\U0001f469\U0001f4bb team",
            "\U0001f469\u200d\U0001f4bb team",
        ),
    ],
    ids=[
        "spaces",
        "tabs-nbsp",
        "sharp-s",
        "curly-apostrophe-dash",
        "curly-quotes",
        "fullwidth",
        "ligature",
        "combining-in-input",
        "combining-in-value",
        "soft-hyphen",
        "emoji-variation-selector",
        "emoji-zwj",
    ],
)
def test_normalized_matches_unicode_variants_and_points_at_the_original_text(
    source: str, value: str, shown: str
) -> None:
    spans = spans_of(grounded(source, "$.v"), {"v": value})
    assert evidence(source, spans["$.v"]) == shown


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("Straße", "Stras"),  # "s" alone is half of "ß"
        ("Cafe\u0301", "Cafe"),  # the "e" carries a combining accent
        ("Café", "Cafe"),  # the same, precomposed
        ("\ufb01nance", "f"),  # half a ligature
    ],
)
def test_normalized_never_matches_part_of_a_character(source: str, value: str) -> None:
    ok, _ = grounded(source, "$.v").check({"v": value})
    assert not ok


def test_normalized_accents_still_count() -> None:
    ok, diagnosis = grounded("José Álvarez", "$.v").check({"v": "Jose Alvarez"})
    assert not ok
    assert diagnosis == '$.v: "Jose Alvarez" is not in the input; closest: "José Álvarez"'


def test_offsets_count_code_points_after_astral_characters() -> None:
    source = "\U0001f600\U0001f600 ACME"  # two emoji: 2 code points, 4 UTF-16 units
    spans = spans_of(grounded(source, "$.v"), {"v": "acme"})
    assert (spans["$.v"].start, spans["$.v"].end) == (3, 7)


# -- fuzzy ------------------------------------------------------------------------------------


def test_fuzzy_accepts_a_close_value_and_points_at_the_closest_text() -> None:
    source = "Supplier: Globex Corporation International, Springfield"
    check = grounded(source, "$.v", mode="fuzzy")
    spans = spans_of(check, {"v": "Globex Corporaton Internationl"})
    assert evidence(source, spans["$.v"]) == "Globex Corporation International"


def test_fuzzy_rejects_below_the_threshold_and_says_how_close() -> None:
    source = "Supplier: Globex Corporation, Springfield"
    check = grounded(source, "$.v", mode="fuzzy", threshold=0.95)
    ok, diagnosis = check.check({"v": "Globex Corp Intl"})
    assert not ok
    assert diagnosis is not None
    assert diagnosis.startswith(
        '$.v: "Globex Corp Intl" is not in the input; closest: "Globex Corp'
    )
    assert diagnosis.endswith("similar, 95% needed)")


def test_fuzzy_tolerates_case_and_unicode_like_normalized() -> None:
    source = "Kunde: MÜLLER GMBH, Straße 5"
    spans = spans_of(grounded(source, "$.v", mode="fuzzy"), {"v": "Muller GmbH"})
    assert evidence(source, spans["$.v"]) == "MÜLLER GMBH"


def test_fuzzy_never_matches_across_two_strings_of_a_json_input() -> None:
    source = {"a": "ACME Cor", "b": "poration"}
    ok, _ = grounded(source, "$.v", mode="fuzzy", threshold=0.9).check({"v": "ACME Corporation"})
    assert not ok


# -- JSON inputs ------------------------------------------------------------------------------


def test_a_json_input_is_searched_string_by_string_with_input_paths() -> None:
    title_text, page = 'The "Big" Deal', "Ship to: ACME\nCorp, Leeds"
    source = {"doc": {"title": title_text, "pages": ["first page", page]}, "vendorId": 42}
    check = grounded(source, "$.title", "$.vendor", "$.id", numbers=True)
    value = {"title": 'the "big" deal', "vendor": "ACME Corp", "id": 42}
    spans = spans_of(check, value)
    title, vendor, number = spans["$.title"], spans["$.vendor"], spans["$.id"]
    assert title.input_path == "$.doc.title"
    assert evidence(title_text, title) == 'The "Big" Deal'  # decoded, no escapes
    assert vendor.input_path == "$.doc.pages[1]"
    assert evidence(page, vendor) == "ACME\nCorp"
    assert number.input_path == "$.vendorId"
    assert (number.start, number.end) == (0, 2)


def test_keys_of_a_json_input_are_not_searched() -> None:
    ok, _ = grounded({"ACME": "x"}, "$.v").check({"v": "ACME"})
    assert not ok


def test_a_match_never_crosses_two_strings_of_a_json_input() -> None:
    ok, _ = grounded(["AC", "ME"], "$.v", mode="exact").check({"v": "AC\x00ME"})
    assert not ok


# -- numbers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "number", "shown"),
    [
        ("total 45.00 EUR", 45, "45.00"),
        ("total 45 EUR", 45.0, "45"),
        ("total 1,234.50 EUR", 1234.5, "1,234.50"),
        ("total 1.234,50 EUR", 1234.5, "1.234,50"),
        ("Gesamt 45,00 EUR", 45, "45,00"),
        ("change -3 units", -3, "-3"),
        ("change \u22123 units", -3, "\u22123"),
        ("item SKU-7", 7, "7"),
        ("٤٥ items", 45, "٤٥"),
        ("on 12.03.2024", 2024, "2024"),
        ("pay 0.5 now", 0.5, "0.5"),
        ("weighs 3kg", 3, "3"),
        ("cost €45", 45, "45"),
    ],
)
def test_numbers_match_their_written_forms(source: str, number: float, shown: str) -> None:
    spans = spans_of(grounded(source, "$.n", numbers=True), {"n": number})
    assert evidence(source, spans["$.n"]) == shown


@pytest.mark.parametrize(
    ("source", "number"),
    [
        ("ref 1450", 45),
        ("ref 45.67", 45),
        ("item SKU-7", -7),
        ("x 3.5", 35),
        ("n 1e3", 1000),
        ("mail alice88@example.com", 88),
        ("model v2", 2),
    ],
)
def test_numbers_do_not_match_inside_other_numbers(source: str, number: float) -> None:
    ok, diagnosis = grounded(source, "$.n", numbers=True).check({"n": number})
    assert not ok
    assert diagnosis == f"$.n: {json.dumps(number)} is not in the input"


def test_numbers_are_not_checked_unless_asked() -> None:
    assert grounded("nothing", "$.n").check({"n": 5}) == (True, None)


def test_readings_of_ambiguous_numerals() -> None:
    assert readings("1,234") == {Decimal("1234"), Decimal("1.234")}
    assert readings("1,234,567.8") == {Decimal("1234567.8")}
    assert readings("12.03.2024") == set()
    assert value_of(True) is None
    assert value_of(float("nan")) is None
    assert numeral_index("a " + "9" * 65 + " b") == {}


# -- the envelope and the loop ----------------------------------------------------------------


def test_spans_go_on_the_success_envelope_and_are_left_out_when_empty() -> None:
    span = GroundingSpan(path="$.v", start=1, end=4)
    assert Envelope.success({"v": 1}, grounding=(span,)).model_dump(mode="json")["grounding"] == [
        {"path": "$.v", "start": 1, "end": 4}
    ]
    assert "grounding" not in Envelope.success({"v": 1}).model_dump()


def job(**fields: Any) -> JobSpec:
    return JobSpec.model_validate(
        {
            "task": "Extract the invoice",
            "input": INVOICE,
            "signature": "{vendor :string, lines [{sku :string}]}",
            "budget": {"maxTurns": 1, "returnRetries": 1},
            "validators": [{"kind": "grounded", "paths": ["$.vendor", "$.lines[*].sku"]}],
            **fields,
        }
    )


async def test_a_fabricated_value_is_re_asked_and_the_fix_carries_its_spans() -> None:
    client = ScriptedClient(
        [
            answer({"vendor": "ACME Corp", "lines": [{"sku": "H-1"}, {"sku": "H-9"}]}),
            answer({"vendor": "ACME Corp", "lines": [{"sku": "H-1"}, {"sku": "H-2"}]}),
        ]
    )
    result = await run_job(job(), Runtime(client=client, clock=FakeClock()))
    envelope = result.envelope
    assert envelope.status == "success"
    first = result.turns[0]
    assert first.outcome == "rejected"
    assert first.diagnosis is not None
    assert '$.lines[1].sku: "H-9" is not in the input; closest: "H-' in first.diagnosis
    assert '"H-9" is not in the input' in client.requests[1].messages[-1].content
    assert [(s.path, INVOICE[s.start : s.end]) for s in envelope.grounding] == [
        ("$.vendor", "ACME Corp"),
        ("$.lines[0].sku", "H-1"),
        ("$.lines[1].sku", "H-2"),
    ]
    assert envelope.provenance is not None
    assert "H-9" in envelope.provenance


async def test_a_large_input_is_checked_in_a_thread_with_the_same_result() -> None:
    padding = "lorem ipsum dolor sit amet " * 4000  # > THREAD_ABOVE_CHARS
    spec = job(input=padding + INVOICE)
    client = ScriptedClient([answer({"vendor": "ACME Corp", "lines": [{"sku": "H-2"}]})])
    result = await run_job(spec, Runtime(client=client, clock=FakeClock()))
    (span, sku) = result.envelope.grounding
    assert (spec.input[span.start : span.end], spec.input[sku.start : sku.end]) == (
        "ACME Corp",
        "H-2",
    )


def test_contract_grounding_gathers_every_grounded_validator_once_per_path() -> None:
    spec = job(
        validators=[
            {"kind": "grounded", "paths": ["$.vendor"]},
            {"kind": "nonempty", "path": "$.lines"},
            {"kind": "grounded", "paths": ["$.vendor", "$.lines[*].sku"], "mode": "exact"},
        ]
    )
    contract = build_contract(spec)
    value = {"vendor": "ACME Corp", "lines": [{"sku": "H-1"}]}
    for validator in contract.validators:
        assert validator(value) == (True, None)
    assert [s.path for s in contract.grounding(value)] == ["$.vendor", "$.lines[0].sku"]


# -- the spec ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({}, "validators[0].paths"),
        ({"paths": ["$.ok", "lines"]}, "validators[0].paths[1]"),
        ({"paths": ["$.a"], "threshold": 0.9}, "validators[0].threshold"),
    ],
)
def test_a_malformed_grounded_validator_names_its_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        build_contract(job(validators=[{"kind": "grounded", **fields}]))
    assert caught.value.field == field


def test_a_grounded_validator_needs_an_input() -> None:
    with pytest.raises(InvalidInput) as caught:
        build_contract(job(input=None))
    assert caught.value.field == "validators[0]"
    assert "no input" in caught.value.detail


# -- the parts --------------------------------------------------------------------------------


def test_locate_gives_concrete_paths() -> None:
    value = {"lines": [{"sku": "A"}, {"sku": "B"}], "m": {"x": 1}}
    assert locate(value, "$.lines[*].sku") == [
        (("lines", 0, "sku"), "A"),
        (("lines", 1, "sku"), "B"),
    ]
    assert locate(value, "$.lines[-1]") == [(("lines", 1), {"sku": "B"})]
    assert locate(value, "$.m.*") == [(("m", "x"), 1)]


def test_fold_maps_every_match_back_to_whole_characters() -> None:
    folded = fold_text("ACME \n Corp’s ﬁne Straße")
    assert folded.text == "acme corp's fine strasse"
    assert folded.original(0, 9) == (0, 11)
    assert folded.original(12, 16) == (14, 17)  # "ﬁne" is 3 characters, folded to 4
    assert folded.original(13, 16) is None  # starts inside "ﬁ"
    assert folded.original(13, 16, snap=True) == (14, 17)
    assert fold("  Acme\tCORP ") == "acme corp"


def _distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


@given(st.text("abc", min_size=1, max_size=8), st.text("abcd", min_size=1, max_size=16))
def test_best_match_is_the_least_edit_distance_of_any_substring(pattern: str, text: str) -> None:
    match = best_match(pattern, text)
    assert match is not None
    assert _distance(pattern, text[match.start : match.end]) == match.distance
    least = min(
        _distance(pattern, text[i:j]) for i in range(len(text) + 1) for j in range(i, len(text) + 1)
    )
    assert match.distance == least


def test_best_match_over_long_patterns() -> None:
    pattern = "x" * 100 + "abc"
    match = best_match(pattern, "y" * 50 + "x" * 100 + "abd" + "z" * 20)
    assert match is not None
    assert (match.distance, match.start, match.end) == (1, 50, 153)

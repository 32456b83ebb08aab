"""Finding the JSON candidates in a model's raw text."""

from __future__ import annotations

from app.core.answer.extract import MAX_CANDIDATES, find_candidates


def texts(raw: str) -> list[str]:
    return [c.text for c in find_candidates(raw)]


def test_whole_text_that_parses_is_the_only_candidate() -> None:
    found = find_candidates('  {"a": "see {\\"b\\": 1}"}\n')
    assert [(c.text, c.origin, c.note) for c in found] == [
        ('{"a": "see {\\"b\\": 1}"}', "whole", None)
    ]


def test_whole_text_may_be_a_scalar() -> None:
    assert texts("42") == ["42"]
    assert texts('"just a string"') == ['"just a string"']


def test_empty_or_prose_only_text_has_no_candidates() -> None:
    assert find_candidates("   \n") == []
    assert find_candidates("I cannot answer that.") == []
    assert find_candidates("See [citation needed] and {placeholder}.") == []


def test_json_fence_contents_are_taken_with_a_note() -> None:
    found = find_candidates('Here it is:\n```json\n{"a": 1}\n```\nAnything else?')
    assert [(c.text, c.origin, c.note) for c in found] == [
        ('{"a": 1}', "fence", "extract: took the JSON object from a ```json code fence")
    ]


def test_bare_fence_and_array_contents() -> None:
    found = find_candidates("Result:\n```\n[1, 2]\n```")
    assert [(c.text, c.note) for c in found] == [
        ("[1, 2]", "extract: took the JSON array from a ``` code fence")
    ]


def test_fences_of_other_languages_are_skipped() -> None:
    raw = '```python\nx = {"a": 1}\n```\n```json\n{"b": 2}\n```'
    assert texts(raw)[0] == '{"b": 2}'


def test_unclosed_fence_runs_to_the_end_of_the_text() -> None:
    found = find_candidates('```json\n{"a": [1, 2')
    assert found[0].text == '{"a": [1, 2'
    assert found[0].note == (
        "extract: took the JSON object from a ```json code fence that was never closed"
    )


def test_span_in_prose_is_found_with_a_note_of_what_was_skipped() -> None:
    found = find_candidates('Sure! The answer is {"total": 12.5}. Hope it helps.')
    assert [(c.text, c.origin, c.note) for c in found] == [
        (
            '{"total": 12.5}',
            "prose",
            "extract: took the JSON object out of surrounding prose "
            "(ignored 19 characters before it, 16 after)",
        )
    ]


def test_brackets_inside_strings_do_not_end_a_span() -> None:
    raw = 'Answer: {"note": "use } and ] freely", "list": ["[", "{"]} done'
    assert texts(raw) == ['{"note": "use } and ] freely", "list": ["[", "{"]}']


def test_escaped_quotes_inside_strings_are_handled() -> None:
    raw = 'x {"q": "say \\"}\\" now"} y'
    assert texts(raw) == ['{"q": "say \\"}\\" now"}']


def test_almost_json_spans_are_found_for_repair() -> None:
    raw = "Result: {name: 'Ada', tags: ['x',],} -- end"
    assert texts(raw) == ["{name: 'Ada', tags: ['x',],}"]


def test_apostrophes_in_prose_do_not_confuse_the_scanner() -> None:
    raw = 'It\'s here: {"a": "it\'s"} and that\'s all'
    assert texts(raw) == ['{"a": "it\'s"}']


def test_several_candidates_are_returned_in_order() -> None:
    raw = 'The format is {"total": 0}. My answer: {"total": 7}'
    assert texts(raw) == ['{"total": 0}', '{"total": 7}']


def test_fenced_candidates_come_before_prose_ones_and_duplicates_collapse() -> None:
    raw = 'Like {"a": 0}, so:\n```json\n{"a": 1}\n```\nagain {"a": 1}'
    found = find_candidates(raw)
    assert [(c.text, c.origin) for c in found] == [('{"a": 1}', "fence"), ('{"a": 0}', "prose")]


def test_a_span_inside_non_json_brackets_is_found() -> None:
    assert texts('[see: {"a": 1}]') == ['{"a": 1}']


def test_truncated_span_is_a_candidate_and_nothing_inside_it_is() -> None:
    raw = 'Here: {"a": {"b": 1}, "c": [1, 2'
    assert texts(raw) == ['{"a": {"b": 1}, "c": [1, 2']


def test_truncated_string_ends_the_span_at_the_end_of_text() -> None:
    assert texts('ok {"a": "never closed } ]') == ['{"a": "never closed } ]']


def test_whole_text_parse_check_can_be_lenient() -> None:
    found = find_candidates("True", parses=lambda text: text == "True")
    assert [(c.text, c.origin) for c in found] == [("True", "whole")]


def test_candidate_count_is_bounded() -> None:
    raw = " ".join(f'{{"n": {i}}}' for i in range(40))
    assert len(find_candidates(raw)) == MAX_CANDIDATES


def test_a_huge_prose_answer_with_unbalanced_brackets_is_cheap() -> None:
    raw = "{ [ " * 20000 + "text"
    assert len(find_candidates(raw)) <= 1


def test_deeply_nested_prose_brackets_are_skipped_in_linear_time() -> None:
    raw = "[x " * 20000 + "]" * 20000 + ' {"a": 1}'
    assert texts(raw) == ['{"a": 1}']


def test_an_answer_cut_off_right_after_its_opening_bracket_is_a_candidate() -> None:
    assert texts("Here it comes: {") == ["{"]
    assert texts("[\n  ") == ["["]

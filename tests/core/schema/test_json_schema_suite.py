"""The official JSON Schema Test Suite (draft 2020-12: core and optional/format), run
through the answer checker (``check_answer``), as every model answer is checked.

Vendored under tests/suite/jsts with its licence (tests/suite/jsts/LICENSE, SOURCE says
which commit). A test whose schema ``check_schema`` refuses counts as a refusal: the job is
a 422 at submit, never a wrong verdict. Every other test must be judged as the suite
expects, apart from those in ``EXPECTED``, each with its reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.core.answer.check import check_answer
from app.core.schema.validation import check_schema
from app.core.wire.errors import InvalidInput

SUITE = Path(__file__).resolve().parents[2] / "suite" / "jsts" / "draft2020-12"

_ASSERTED = (
    "format is asserted by this service (docs/validators.md#formats): a wrong format is re-asked"
)
_REMOTE = "a remote $ref: nothing is fetched (no URL reaches the network); refused at submit"
_DIALECT = "a custom meta-schema ($schema other than 2020-12's): refused at submit"
# (file, case description) -> why this service's verdict differs from the suite's.
# Judged, but the other way: format.json's "only an annotation by default" tests.
WRONG: dict[tuple[str, str], str] = {
    ("format.json", f"{name} format"): _ASSERTED
    for name in (
        "email", "idn-email", "regex", "ipv4", "ipv6", "idn-hostname", "hostname", "date",
        "date-time", "time", "json-pointer", "relative-json-pointer", "iri", "iri-reference",
        "uri", "uri-reference", "uri-template", "uuid", "duration",
    )
}  # fmt: skip
# Refused at submit (a 422 naming why): never a wrong verdict, but not the suite's either.
REFUSED: dict[tuple[str, str], str] = {
    ("defs.json", "validate definition against metaschema"): _REMOTE,
    ("dynamicRef.json", "strict-tree schema, guards against misspelled properties"): _REMOTE,
    ("dynamicRef.json", "tests for implementation dynamic anchor and reference link"): _REMOTE,
    ("dynamicRef.json", "$ref and $dynamicAnchor are independent of order - $defs first"): _REMOTE,
    ("dynamicRef.json", "$ref and $dynamicAnchor are independent of order - $ref first"): _REMOTE,
    ("dynamicRef.json", "$ref to $dynamicRef finds detached $dynamicAnchor"): _REMOTE,
    ("ref.json", "remote ref, containing refs itself"): _REMOTE,
    ("refRemote.json", "*"): _REMOTE,
    (
        "vocabulary.json",
        "schema that uses custom metaschema with with no validation vocabulary",
    ): _DIALECT,
    ("vocabulary.json", "ignore unrecognized optional vocabulary"): _DIALECT,
    ("pattern.json", "pattern with Unicode property escape requires unicode mode"): (
        "\\p{Letter}: RE2 (linear time) knows only short property names (\\p{L}); the 422 "
        "names the escape"
    ),
    ("patternProperties.json", "patternProperties with Unicode property escape"): (
        "\\p{Letter}, as in pattern.json"
    ),
    ("unknown.json", "unknown format"): (
        "a format this service cannot check is refused at submit rather than left unchecked"
    ),
}


def _cases(kind: str) -> list[Any]:
    files = sorted((SUITE / "optional" / "format").glob("*.json"))
    if kind == "core":
        files = sorted(SUITE.glob("*.json"))
    found = []
    for path in files:
        for case in json.loads(path.read_text()):
            for test in case["tests"]:
                key = (path.name, case["description"], test["description"])
                found.append(
                    pytest.param(case["schema"], test["data"], test["valid"], key, id="|".join(key))
                )
    return found


def _verdict(schema: Any, data: Any) -> bool | None:
    """True/False: the answer accepted or rejected; None: the schema refused at submit."""
    if isinstance(schema, bool):
        schema = {"allOf": [schema]}
    try:
        check_schema(schema)
    except InvalidInput:
        return None
    return check_answer(json.dumps(data), schema, strict=True).ok


def _judge(schema: Any, data: Any, valid: bool, key: tuple[str, str, str]) -> None:
    verdict = _verdict(schema, data)
    case = key[:2]
    if verdict is None:
        assert case in REFUSED or (key[0], "*") in REFUSED, f"schema refused: {key}"
        return
    assert case not in REFUSED, f"listed as refused, but now accepted: {key}"
    if case in WRONG and "annotation" in key[2]:
        assert verdict != valid, f"listed as differing ({WRONG[case]}), but now agrees"
        return
    assert verdict == valid


def test_the_counts_through_the_checker() -> None:
    """optional/format: every test judged as the suite expects, but the unknown formats,
    which are refused (764 tests, 757 passed)."""
    passed = sum(_verdict(*p.values[:2]) == p.values[2] for p in _cases("format"))
    assert (len(_cases("format")), passed) == (764, 757)


@pytest.mark.parametrize(("schema", "data", "valid", "key"), _cases("format"))
def test_format(schema: Any, data: Any, valid: bool, key: tuple[str, str, str]) -> None:
    _judge(schema, data, valid, key)


@pytest.mark.parametrize(("schema", "data", "valid", "key"), _cases("core"))
def test_core(schema: Any, data: Any, valid: bool, key: tuple[str, str, str]) -> None:
    _judge(schema, data, valid, key)

"""The custom ids of a round's lines (app.providers.batch): ours parse back, others not."""

from __future__ import annotations

from app.providers.batch import custom_id, parse_custom_id


def test_custom_ids_round_trip_within_both_providers_charsets() -> None:
    cid = custom_id(41234, 3, "json_schema", True)
    assert cid == "i41234-r3-m11"
    assert parse_custom_id(cid) == (41234, 3, "json_schema", True)
    for hostile in ("", "x", "i1-r1", "i1-r1-m9", "ia-r1-m00", "i1-r1-m0"):
        assert parse_custom_id(hostile) is None

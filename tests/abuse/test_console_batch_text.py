"""Hostile text on the console's batch pages (#30): a batch's metadata and its failed
items' diagnoses carry ``<script>`` and ``<img onerror>`` payloads; the pages show them
as text. (In a real browser: tests/console/test_batches.py's browser test.)"""

from __future__ import annotations

from typing import Any

import pytest

from tests.console.fixtures import SignedIn
from tests.service import KEYS


def test_hostile_text_on_the_batch_pages_is_shown_as_text(
    batch_signed_in: SignedIn, hostile_batch_done: dict[str, Any]
) -> None:
    alice = batch_signed_in(KEYS["alice"])
    batch_id = hostile_batch_done["id"]
    for path in (f"/console/batches/{batch_id}", f"/console/batches/{batch_id}/summary"):
        html = alice.get(path).text
        assert "<script>alert" not in html, path
        assert "<img src=x" not in html, path
        assert "&lt;img src=x onerror=" in html, path  # the metadata, escaped
    failed = alice.get(f"/console/batches/{batch_id}?items=failed").text
    # Each failed item's diagnosis quotes the model's answer: escaped.
    assert failed.count("got &#34;&lt;script&gt;alert(&#39;xss-script&#39;)&lt;/script&gt;") == 2


@pytest.mark.parametrize("query", ["?items=<script>", "?items=" + "x" * 5000, "?before=-1"])
def test_odd_query_values_on_the_batch_pages_are_dropped(
    batch_signed_in: SignedIn, hostile_batch_done: dict[str, Any], query: str
) -> None:
    alice = batch_signed_in(KEYS["alice"])
    for path in (f"/console/batches/{hostile_batch_done['id']}", "/console/batches"):
        response = alice.get(path + query)
        assert response.status_code == 200, path
        assert "<script>" not in response.text


def test_a_batch_id_that_is_not_ours_or_too_long_is_not_found(batch_signed_in: SignedIn) -> None:
    alice = batch_signed_in(KEYS["alice"])
    for batch_id in ("b_" + "0" * 24, "b_" + "x" * 5000, "<script>"):
        response = alice.get(f"/console/batches/{batch_id}")
        assert response.status_code == 404
        assert "<script>" not in response.text

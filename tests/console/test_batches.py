"""The console's batch pages (#30): the list and a batch's page show counts, rounds and
cost to the batch's tenant only; cancel needs the page's CSRF token; results download as
JSONL; and in Debian's chromium one opens the list, then a batch, and cancels it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from playwright.sync_api import expect

from app.console.shown import money
from tests.batches.helpers import ended
from tests.console.batch_fixtures import SCRIPT, running_batch
from tests.console.browser import Tab, chromium
from tests.console.fixtures import OPERATOR_KEY, SignedIn, csrf_of
from tests.service import KEYS, client


def test_the_list_and_the_page_show_counts_rounds_and_cost_to_the_tenant_only(
    batch_signed_in: SignedIn, hostile_batch_done: dict[str, Any]
) -> None:
    batch_id = hostile_batch_done["id"]
    alice = batch_signed_in(KEYS["alice"])
    listing = alice.get("/console/batches").text
    assert f'data-batch="{batch_id}"' in listing
    assert '<a href="/console/batches">Batches</a>' in listing  # the nav entry
    page = alice.get(f"/console/batches/{batch_id}")
    assert page.status_code == 200
    counts = hostile_batch_done["counts"]
    assert f'<span data-testid="succeeded">{counts["succeeded"]}</span>' in page.text
    assert f'<span data-testid="failed">{counts["failed"]}</span>' in page.text
    assert f'data-testid="rounds">{hostile_batch_done["round"]} (ended)' in page.text
    assert hostile_batch_done["costUsd"] > 0
    assert f'data-testid="cost">{money(hostile_batch_done["costUsd"])}</dd>' in page.text
    assert '<td class="custom-id">doc-0</td>' in page.text  # a failed item, listed
    results = alice.get(f"/console/batches/{batch_id}/results")
    assert results.status_code == 200
    lines = [json.loads(line) for line in results.text.splitlines() if line]
    assert [line["customId"] for line in lines] == [f"doc-{i}" for i in range(6)]

    bob = batch_signed_in(KEYS["bob"])
    assert f'data-batch="{batch_id}"' not in bob.get("/console/batches").text
    for path in ("", "/summary", "/results"):
        assert bob.get(f"/console/batches/{batch_id}{path}").status_code == 404
    operator = batch_signed_in(OPERATOR_KEY)
    assert f'data-batch="{batch_id}"' in operator.get("/console/batches").text
    assert operator.get(f"/console/batches/{batch_id}").status_code == 200


def test_cancel_needs_the_pages_csrf_token(batch_console: str, batch_signed_in: SignedIn) -> None:
    batch_id = running_batch(batch_console)
    alice = batch_signed_in(KEYS["alice"])
    assert batch_signed_in(KEYS["bob"]).get(f"/console/batches/{batch_id}").status_code == 404
    assert alice.post(f"/console/batches/{batch_id}/cancel", data={}).status_code == 403
    csrf = csrf_of(alice.get(f"/console/batches/{batch_id}").text)
    done = alice.post(f"/console/batches/{batch_id}/cancel", data={"csrf": csrf})
    assert done.status_code == 303
    with client(batch_console, KEYS["alice"]) as api:
        assert ended(api, batch_id)["status"] == "cancelled"


@pytest.mark.slow
def test_in_a_browser_one_opens_the_list_then_a_batch_and_cancels_it(
    batch_console: str, hostile_batch_done: dict[str, Any]
) -> None:
    batch_id = running_batch(batch_console)
    with chromium() as browser:
        tab = Tab.open(browser, batch_console)
        try:
            tab.sign_in(KEYS["alice"])
            page = tab.go("/console/jobs")
            page.get_by_role("link", name="Batches").click()
            expect(page.get_by_role("heading", name="Batches")).to_be_visible()
            row = page.locator(f'tr[data-batch="{batch_id}"]')
            expect(row.locator(".badge")).to_have_text("running")
            expect(page.locator(f'tr[data-batch="{hostile_batch_done["id"]}"]')).to_be_visible()
            row.get_by_role("link", name=batch_id).click()
            expect(page.get_by_test_id("status")).to_have_text("running")
            expect(page.get_by_test_id("pending")).to_have_text("4")
            page.get_by_role("button", name="Cancel batch").click()
            expect(page.get_by_role("status")).to_contain_text("Cancel asked")
            # The summary refreshes itself while the batch runs: it ends cancelled.
            expect(page.get_by_test_id("status")).to_have_text("cancelled")
            expect(page.get_by_test_id("failed")).to_have_text("4")
            expect(page.get_by_role("button", name="Cancel batch")).to_have_count(0)
            # The finished batch's page: its hostile metadata and diagnosis run nothing.
            page = tab.go(f"/console/batches/{hostile_batch_done['id']}")
            expect(page.locator("td.custom-id").first).to_have_text("doc-0")
            main = page.locator("main")
            assert f'got "{SCRIPT}' in main.inner_text()  # a diagnosis, as text
            assert main.locator("img").count() == 0
            assert main.locator("script").count() == 0
            assert not tab.alarms
        finally:
            tab.close()

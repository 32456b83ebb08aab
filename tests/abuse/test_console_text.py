"""Hostile text in the console: a job's input, metadata, task and model answer carry
``<script>``, ``<img onerror>`` and ``javascript:`` payloads; the pages show them as text,
and in a real browser (Debian's chromium) no script runs: no dialog, no page error, no
CSP report, no element made from them."""

from __future__ import annotations

import json
import uuid

import pytest
from playwright.sync_api import expect

from tests.console.browser import Tab, chromium
from tests.console.fixtures import SignedIn, api
from tests.service import KEYS, finished

SCRIPT = "<script>alert('xss-script')</script>"
IMG = "<img src=x onerror=\"alert('xss-img')\">"
LINK = "javascript:alert('xss-link')"
PAYLOADS = (SCRIPT, IMG, LINK)


def hostile_job() -> dict[str, object]:
    """A job whose every shown field holds the payloads, answered with them by the model."""
    answer = {"city": f"{SCRIPT} {IMG}", "population": 7}
    directive = json.dumps({"script": ["missing_field", "ok"], "expect": answer})
    return {
        "task": f"Name a city {SCRIPT} {IMG} ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "signature": "{city :string, population :int}",
        "input": {"note": f"{SCRIPT} {IMG}", "link": LINK},
        "metadata": {"src": IMG, "href": LINK},
        "budget": {"maxTurns": 1, "returnRetries": 3},
    }


@pytest.fixture
def hostile(console: str) -> str:
    with api(console, "alice") as alice:
        job = alice.post("/v1/jobs", json=hostile_job())
        assert job.status_code == 202, job.text
        done = finished(alice, job.json()["id"])
    assert done["status"] == "succeeded"
    assert SCRIPT in done["result"]["data"]["city"]  # the model's answer carries them
    return str(done["id"])


def test_hostile_text_is_escaped_in_the_html(signed_in: SignedIn, hostile: str) -> None:
    http = signed_in(KEYS["alice"])
    for path in (f"/console/jobs/{hostile}", "/console/jobs", f"/console/jobs/{hostile}/again"):
        html = http.get(path).text
        assert "<script>alert" not in html, path
        assert "<img src=x" not in html, path
        assert 'href="javascript:' not in html, path
    page = http.get(f"/console/jobs/{hostile}").text
    assert "&lt;script&gt;alert(&#39;xss-script&#39;)&lt;/script&gt;" in page


@pytest.mark.slow
def test_hostile_text_runs_no_script_in_a_browser(console: str, hostile: str) -> None:
    with chromium() as browser:
        tab = Tab.open(browser, console)
        tab.sign_in(KEYS["alice"])
        for path in (f"/console/jobs/{hostile}", f"/console/jobs/{hostile}/again"):
            page = tab.go(path)
            expect(page.locator("h1")).to_be_visible()
            main = page.locator("main")
            boxes = main.locator("textarea")
            shown = main.inner_text() + " ".join(
                boxes.nth(i).input_value() for i in range(boxes.count())
            )
            for payload in (SCRIPT, "<img src=x onerror="):
                assert payload in shown, path  # shown, as text (in the spec: JSON-quoted)
            assert main.locator("img").count() == 0
            assert main.locator("script").count() == 0
            assert page.locator('a[href^="javascript:"]').count() == 0
        page = tab.go(f"/console/jobs/{hostile}")
        page.locator("details summary").click()  # the spec, with the input, shown too
        expect(page.locator("pre.spec")).to_contain_text(LINK)
        # An answer full of payloads and a re-ask's diagnosis: both on the page as text.
        expect(page.locator("pre.answer").first).to_be_visible()
        tab.close()
    assert tab.alarms == []

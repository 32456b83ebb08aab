"""The console's pages over HTTP: the overview's numbers, redelivery, the settings."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from app.console.shown import cut
from app.console.table import Filters
from app.settings import Settings
from tests.api.test_callbacks import delivery
from tests.console.fixtures import OPERATOR_KEY, SignedIn, api, csrf_of
from tests.outbound.receiver import Receiver, Reply
from tests.service import KEYS, finished, scripted
from tests.waiting import sync_until


def test_the_overview_counts_what_the_tenant_ran(console: str, signed_in: SignedIn) -> None:
    with api(console, "bob") as bob:
        jobs = [
            bob.post("/v1/jobs", json=scripted("Overview", script)).json()["id"]
            for script in (["ok"], ["refusal"])
        ]
        for job_id in jobs:
            finished(bob, job_id)
    page = signed_in(KEYS["bob"]).get("/console/overview").text
    assert re.search(r'<span class="big">\d+%</span> success rate', page)
    assert "llm-refusal" in page  # re-asks or failures by error code
    assert "Cost by model" in page
    assert "queued now" not in page  # the queue is every tenant's: operators only


def test_redeliver_without_a_callback_says_so(console: str, signed_in: SignedIn) -> None:
    with api(console, "alice") as alice:
        job_id = alice.post("/v1/jobs", json=scripted("No callback", ["ok"])).json()["id"]
        finished(alice, job_id)
    http = signed_in(KEYS["alice"])
    token = csrf_of(http.get(f"/console/jobs/{job_id}").text)
    response = http.post(f"/console/jobs/{job_id}/redeliver", data={"csrf": token})
    assert response.status_code == 303
    assert "Nothing+to+redeliver" in response.headers["location"]
    assert "Nothing to redeliver" in http.get(response.headers["location"]).text


def test_operator_keys_must_be_sha256_digests() -> None:
    with pytest.raises(ValidationError, match="console_operator_keys"):
        Settings.model_validate({"console_operator_keys": "not-a-digest"})
    listed = {"console_operator_keys": "a" * 64 + ", " + "b" * 64}  # as the environment has it
    assert Settings.model_validate(listed).console_operator_keys == [
        "a" * 64,
        "b" * 64,
    ]
    with pytest.raises(ValidationError, match="console_session_ttl_s"):
        Settings(console_session_ttl_s=5)


def test_filters_are_bounded_and_unknown_values_dropped() -> None:
    filters = Filters.parse(
        {"status": "nope", "model": "m" * 10_000, "since": "2026-11-28T05:00", "until": "x"}
    )
    assert filters.status == ""
    assert len(filters.model) == 200
    assert filters.since == "2026-11-28T05:00"
    assert filters.until == ""
    assert filters.query() == {"model": "m" * 200, "since": "2026-11-28T05:00"}


def test_long_text_is_cut_with_a_note() -> None:
    assert cut("abc", 5) == "abc"
    assert cut("abcdefgh", 5) == "abcde\n… (3 more characters not shown)"


def _ids(html: str) -> list[str]:
    return re.findall(r'<tr class="status-[a-z_]+" data-job="(job_[a-z0-9]+)"', html)


def _older(html: str) -> str | None:
    found = re.search(r'<a href="([^"]+)" rel="next">', html)
    return found.group(1).replace("&amp;", "&") if found else None


def test_pages_of_every_tenant_follow_each_other_newest_first(
    console: str, signed_in: SignedIn
) -> None:
    with api(console, "alice") as alice, api(console, "bob") as bob:
        for i in range(14):
            for http in (alice, bob):
                http.post("/v1/jobs", json=scripted(f"Page {i}", ["ok"]))
        expected = sorted(
            [job["id"] for job in alice.get("/v1/jobs", params={"limit": 60}).json()["jobs"]]
            + [job["id"] for job in bob.get("/v1/jobs", params={"limit": 60}).json()["jobs"]],
            reverse=True,
        )[:50]
    operator = signed_in(OPERATOR_KEY)
    first = operator.get("/console/jobs").text
    older = _older(first)
    assert older is not None
    second = operator.get(older).text
    assert _ids(first) + _ids(second) == expected


def test_operators_see_the_queue_and_the_circuits(console: str, signed_in: SignedIn) -> None:
    with api(console, "alice") as alice:
        finished(alice, alice.post("/v1/jobs", json=scripted("Circuit", ["ok"])).json()["id"])
    page = signed_in(OPERATOR_KEY).get("/console/overview").text
    assert "queued now (every tenant)" in page
    assert "sim/sim-model" in page  # the circuit of the model this process called
    assert "of every tenant" in page


def test_created_time_filters(console: str, signed_in: SignedIn) -> None:
    with api(console, "alice") as alice:
        job_id = alice.post("/v1/jobs", json=scripted("Created", ["ok"])).json()["id"]
        created = alice.get(f"/v1/jobs/{job_id}").json()["createdAt"][:16]
    http = signed_in(KEYS["alice"])
    assert job_id in http.get("/console/jobs/rows", params={"since": created}).text
    assert job_id not in http.get("/console/jobs/rows", params={"until": created}).text
    assert job_id not in http.get("/console/jobs/rows", params={"since": "2999-01-01T00:00"}).text
    assert job_id in http.get("/console/jobs/rows", params={"until": "2999-01-01T00:00"}).text


def test_redeliver_from_the_page_sends_the_callback_again(
    console: str, signed_in: SignedIn
) -> None:
    with Receiver() as receiver:
        receiver.script(Reply(200), Reply(200))
        spec = scripted("Callback", ["ok"]) | {"callback": {"url": f"{receiver.url}/hook"}}
        with api(console, "alice") as alice:
            job_id = alice.post("/v1/jobs", json=spec).json()["id"]
            delivery(alice, job_id, "succeeded", "delivered")
            http = signed_in(KEYS["alice"])
            page = http.get(f"/console/jobs/{job_id}").text
            assert "Callback deliveries" in page
            assert f"{receiver.url}/hook" in page
            response = http.post(f"/console/jobs/{job_id}/redeliver", data={"csrf": csrf_of(page)})
            assert response.status_code == 303
            assert "queued+to+be+sent+again" in response.headers["location"]
            again = sync_until(
                lambda: (
                    (d := delivery(alice, job_id, "succeeded", "delivered"))["redeliveries"] == 1
                    and d["attempts"] >= 2
                ),
                what="the redelivered callback",
            )
            assert again
        assert len(receiver.seen) == 2

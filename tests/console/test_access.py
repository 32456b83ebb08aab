"""Who may see and do what in the console, over HTTP: sessions, CSRF, headers, tenants."""

from __future__ import annotations

from pathlib import Path

import httpx

from app.assembly import api_app
from app.providers.config import ProvidersConfig
from tests.console.fixtures import OPERATOR_KEY, SignedIn, api, console_settings, csrf_of
from tests.service import KEYS, finished, scripted, serve


def test_pages_need_a_session(console: str) -> None:
    with httpx.Client(base_url=console) as http:
        for path in ("/console/jobs", "/console/overview", "/console/jobs/job_x"):
            response = http.get(path)
            assert response.status_code == 303
            assert response.headers["location"] == "/console/signin"
        assert http.get("/console/jobs/rows").status_code == 401


def test_a_wrong_key_is_refused_and_sets_no_cookie(console: str) -> None:
    with httpx.Client(base_url=console) as http:
        response = http.post("/console/signin", data={"key": "not-a-key"})
        assert response.status_code == 401
        assert "set-cookie" not in response.headers
        assert "not valid" in response.text


def test_the_session_cookie_is_httponly_strict_and_scoped(console: str) -> None:
    with httpx.Client(base_url=console) as http:
        response = http.post("/console/signin", data={"key": KEYS["alice"]})
        cookie = response.headers["set-cookie"].lower()
        assert "httponly" in cookie
        assert "samesite=strict" in cookie
        assert "path=/console" in cookie
        assert "secure" not in cookie  # plain http on loopback; https adds it
        assert KEYS["alice"] not in response.headers["set-cookie"]
        assert KEYS["alice"] not in response.headers["location"]


def test_pages_carry_a_strict_csp_and_are_not_cached(signed_in: SignedIn) -> None:
    http = signed_in(KEYS["alice"])
    for path in ("/console/jobs", "/console/signin", "/console/static/console.css"):
        response = http.get(path)
        assert response.status_code == 200, path
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert response.headers["x-frame-options"] == "DENY"
    assert http.get("/console/jobs").headers["cache-control"] == "no-store"
    page = http.get("/console/jobs").text
    assert "<script>" not in page  # external scripts only
    assert "style=" not in page


def test_sign_out_ends_the_session_everywhere(signed_in: SignedIn) -> None:
    http = signed_in(KEYS["alice"])
    cookie = http.cookies["reprompt_console"]
    page = http.get("/console/jobs").text
    response = http.post("/console/signout", data={"csrf": csrf_of(page)})
    assert response.status_code == 303
    # The old cookie, replayed by anyone who kept it, is dead.
    http.cookies.set("reprompt_console", cookie, path="/console")
    assert http.get("/console/jobs").headers["location"] == "/console/signin"


def test_actions_need_the_csrf_token_and_this_site(console: str, signed_in: SignedIn) -> None:
    with api(console, "alice") as alice:
        job = alice.post("/v1/jobs", json=scripted("csrf", ["slow", "ok"])).json()
    http = signed_in(KEYS["alice"])
    token = csrf_of(http.get(f"/console/jobs/{job['id']}").text)
    assert http.post(f"/console/jobs/{job['id']}/cancel").status_code == 403
    assert (
        http.post(f"/console/jobs/{job['id']}/cancel", data={"csrf": "x" * 32}).status_code == 403
    )
    cross = http.post(
        f"/console/jobs/{job['id']}/cancel",
        data={"csrf": token},
        headers={"origin": "https://evil.example"},
    )
    assert cross.status_code == 403
    with api(console, "alice") as alice:
        assert alice.get(f"/v1/jobs/{job['id']}").json()["status"] != "cancelled"
        ok = http.post(f"/console/jobs/{job['id']}/cancel", data={"csrf": token})
        assert ok.status_code == 303
        assert finished(alice, job["id"])["status"] == "cancelled"


def test_another_tenant_cannot_see_or_act_on_a_job(console: str, signed_in: SignedIn) -> None:
    with api(console, "alice") as alice:
        job = alice.post("/v1/jobs", json=scripted("tenant", ["slow", "ok"])).json()
    bob = signed_in(KEYS["bob"])
    token = csrf_of(bob.get("/console/jobs").text)
    assert bob.get(f"/console/jobs/{job['id']}").status_code == 404
    assert bob.get(f"/console/jobs/{job['id']}/again").status_code == 404
    assert bob.get(f"/console/jobs/{job['id']}/live").status_code == 404
    for action in ("cancel", "redeliver", "again"):
        response = bob.post(f"/console/jobs/{job['id']}/{action}", data={"csrf": token})
        assert response.status_code == 404, action
    assert job["id"] not in bob.get("/console/jobs").text
    assert job["id"] not in bob.get("/console/jobs/rows").text
    assert job["id"] not in bob.get("/console/jobs/rows", params={"tenant": "alice"}).text
    with api(console, "alice") as alice:
        assert finished(alice, job["id"])["status"] == "succeeded"  # bob's cancel did nothing
    operator = signed_in(OPERATOR_KEY)
    assert operator.get(f"/console/jobs/{job['id']}").status_code == 200
    assert job["id"] in operator.get("/console/jobs", params={"tenant": "alice"}).text
    assert job["id"] not in operator.get("/console/jobs", params={"tenant": "bob"}).text


def test_sign_in_is_rate_limited_per_address(
    redis_url: str, data_dir: Path, providers: ProvidersConfig
) -> None:
    settings = console_settings(redis_url, data_dir, console_signins_per_minute=3)
    with serve(api_app(settings, providers=providers)) as url, httpx.Client(base_url=url) as http:
        codes = [http.post("/console/signin", data={"key": "wrong"}).status_code for _ in range(5)]
        assert codes == [401, 401, 401, 429, 429]
        # Even the right key waits out the window: guessing gains nothing.
        limited = http.post("/console/signin", data={"key": KEYS["alice"]})
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "60"


def test_the_console_can_be_turned_off(
    redis_url: str, data_dir: Path, providers: ProvidersConfig
) -> None:
    settings = console_settings(redis_url, data_dir, console=False)
    with serve(api_app(settings, providers=providers)) as url, httpx.Client(base_url=url) as http:
        assert http.get("/console/signin").status_code == 404
        assert http.get("/console/static/console.css").status_code == 404


def test_run_again_submits_an_edited_copy_as_a_new_job(console: str, signed_in: SignedIn) -> None:
    with api(console, "alice") as alice:
        job = alice.post("/v1/jobs", json=scripted("again", ["ok"])).json()
        finished(alice, job["id"])
    http = signed_in(KEYS["alice"])
    form = http.get(f"/console/jobs/{job['id']}/again").text
    bad = http.post(
        f"/console/jobs/{job['id']}/again", data={"csrf": csrf_of(form), "spec": '{"task": 1}'}
    )
    assert bad.status_code == 422
    assert "task" in bad.text
    spec = '{"task": "Name a city (edited)", "signature": "{city :string}"}'
    response = http.post(
        f"/console/jobs/{job['id']}/again", data={"csrf": csrf_of(form), "spec": spec}
    )
    assert response.status_code == 303
    new_id = response.headers["location"].split("/")[-1].split("?")[0]
    assert new_id != job["id"]
    with api(console, "alice") as alice:
        assert alice.get(f"/v1/jobs/{new_id}").status_code == 200

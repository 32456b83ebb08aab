"""Client tools end to end: real HTTP, a real redis-server, the simulator calling tools, the
in-process worker. A job pauses in requires_action holding no lease, the outputs resume it,
and spec 000's turn types hold across the pauses."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis

from app.client import ApiClient
from app.store.ids import shard_of
from app.store.keys import Keys
from tests.api.test_metrics import delta, idle, scrape
from tests.service import KEYS, assert_problem, client, finished
from tests.waiting import sync_until

PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {"sku": {"type": "string"}},
    "required": ["sku"],
}
TOOLS: list[dict[str, Any]] = [
    {"name": "lookup", "description": "Price of a SKU", "parameters": PARAMS},
    {"name": "stock", "description": "Units in stock", "parameters": PARAMS},
]
ANSWER = {"sku": "A1", "price": 9.5, "available": 7}


def tool_job(script: list[Any], *, max_turns: int = 3, **extra: Any) -> dict[str, Any]:
    """A job whose model calls tools as ``script`` says, then answers ``ANSWER``."""
    directive = json.dumps({"script": script, "counter": "requests", "expect": ANSWER})
    return {
        "task": f"Price and stock of A1 ({uuid.uuid4().hex[:8]})\n[[sim {directive}]]",
        "signature": "{sku :string, price :float, available :int}",
        "tools": TOOLS,
        "budget": {"maxTurns": max_turns},
        **extra,
    }


def calls(*names: str, **arguments: Any) -> dict[str, Any]:
    return {"call": [{"name": n, "arguments": arguments.get(n, {"sku": "A1"})} for n in names]}


def waiting(http: httpx.Client, job_id: str) -> dict[str, Any]:
    """The job once it requires action (long-poll returns on it)."""

    def paused() -> dict[str, Any] | None:
        job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", params={"waitMs": 5000}).json()
        assert job["status"] in ("queued", "in_progress", "requires_action"), job
        return job if job["status"] == "requires_action" else None

    return sync_until(paused, what=f"job {job_id} to require action")


def answer(http: httpx.Client, job: dict[str, Any], **outputs: Any) -> httpx.Response:
    body = {
        "outputs": [
            {"toolCallId": call["id"], "output": outputs.get(call["name"], {"ok": True})}
            for call in job["requiredAction"]["toolCalls"]
        ]
    }
    return http.post(f"/v1/jobs/{job['id']}/tool-outputs", json=body)


def lease_of(redis_url: str, job_id: str) -> float | None:
    """The job's lease end in Redis (None: no worker holds it)."""

    async def read() -> float | None:
        client = Redis.from_url(redis_url)
        try:
            leases = Keys("api").shard(shard_of(job_id)).leases
            score: float | None = await client.zscore(leases, job_id)
            return score
        finally:
            await client.aclose()

    return asyncio.run(read())


def test_a_job_with_two_client_tools_pauses_twice_and_succeeds(
    alice: httpx.Client, redis_url: str
) -> None:
    created = alice.post("/v1/jobs", json=tool_job([calls("lookup"), calls("stock"), "ok"]))
    assert created.status_code == 202, created.text
    job_id = created.json()["id"]

    first = waiting(alice, job_id)
    action = first["requiredAction"]
    assert [(c["name"], c["arguments"]) for c in action["toolCalls"]] == [("lookup", {"sku": "A1"})]
    assert action["expiresAt"].endswith("Z")
    assert first["result"]["status"] == "in-progress"
    assert first["result"]["progress"]["phase"] == "requires_action"
    assert lease_of(redis_url, job_id) is None  # no worker holds it while it waits
    accepted = answer(alice, first, lookup={"price": 9.5})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["status"] in ("queued", "in_progress", "requires_action")
    assert "Idempotent-Replayed" not in accepted.headers

    second = waiting(alice, job_id)
    assert [c["name"] for c in second["requiredAction"]["toolCalls"]] == ["stock"]
    assert lease_of(redis_url, job_id) is None
    assert answer(alice, second, stock={"available": 7}).status_code == 200

    done = finished(alice, job_id)
    assert done["status"] == "succeeded", done["result"]
    assert done["result"]["data"] == ANSWER
    turns = done["turns"]
    # spec 000: work turns offer the tools, the last work turn is must-return without them
    assert [(t["type"], t["outcome"], t["toolsOffered"]) for t in turns] == [
        ("normal", "tool_calls", 2),
        ("normal", "tool_calls", 2),
        ("must_return", "success", 0),
    ]
    assert [d["outcome"] for d in turns[0]["toolCallDetails"]] == ["requires_action"]
    assert done["attempts"] == 1  # pauses are not lost workers
    assert done["requiredAction"] is None
    execution = done["result"]["execution"]
    assert execution["llmCalls"] == 3
    assert execution["toolCalls"] == 2
    assert execution["retryCount"] == 0
    # the tool work reached the model: the final prompt holds both exchanges
    roles = [m["role"] for m in done["transcript"]]
    assert roles.count("tool") == 2


def test_the_python_client_answers_tool_calls_from_a_mapping(api: str) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def lookup(args: dict[str, Any]) -> dict[str, Any]:
        seen.append(("lookup", args))
        return {"price": 9.5}

    def stock(args: dict[str, Any]) -> dict[str, Any]:
        seen.append(("stock", args))
        raise RuntimeError("warehouse offline")

    with ApiClient(api, key=KEYS["alice"]) as http:
        job = http.run(
            tool_job([calls("lookup", "stock"), "ok"]),
            tools={"lookup": lookup, "stock": stock},
            timeout_s=60,
        )
    assert job["status"] == "succeeded"
    assert seen == [("lookup", {"sku": "A1"}), ("stock", {"sku": "A1"})]
    tool_results = [m["content"] for m in job["transcript"] if m["role"] == "tool"]
    assert '"price": 9.5' in tool_results[0]
    assert "Tool error: RuntimeError: warehouse offline" in tool_results[1]


def test_invalid_arguments_go_back_to_the_model_and_spend_the_work_turn(
    alice: httpx.Client,
) -> None:
    bad = {"call": [{"name": "lookup", "arguments": {"sku": 7}}]}
    job_id = alice.post("/v1/jobs", json=tool_job([bad, "ok"])).json()["id"]
    done = finished(alice, job_id)
    assert done["status"] == "succeeded"
    assert [t["type"] for t in done["turns"]] == ["normal", "normal"]
    (detail,) = done["turns"][0]["toolCallDetails"]
    assert detail["outcome"] == "invalid_arguments"
    tool_message = next(m["content"] for m in done["transcript"] if m["role"] == "tool")
    assert "$.sku: expected string, got integer 7" in tool_message
    # nothing was asked of the client
    events = [json.loads(line[5:]) for line in _sse(alice, job_id) if line.startswith("data:")]
    assert not any("toolCalls" in e for e in events)


def test_outputs_are_checked_replayed_and_refused_twice(
    alice: httpx.Client, bob: httpx.Client
) -> None:
    job_id = alice.post("/v1/jobs", json=tool_job([calls("lookup", "stock"), "ok"])).json()["id"]
    job = waiting(alice, job_id)
    url = f"/v1/jobs/{job_id}/tool-outputs"
    ids = [c["id"] for c in job["requiredAction"]["toolCalls"]]
    one = {"outputs": [{"toolCallId": ids[0], "output": 1}]}
    assert_problem(alice.post(url, json=one), 422, "invalid-input", "outputs")
    wrong = {"outputs": [{"toolCallId": i, "output": 1} for i in [*ids, "call_x"]]}
    body = assert_problem(alice.post(url, json=wrong), 422, "invalid-input", "outputs")
    assert "call_x" in body["detail"]
    right = {"outputs": [{"toolCallId": i, "output": {"n": 1}} for i in ids]}
    # another tenant cannot see, so cannot answer, the job
    assert_problem(bob.post(url, json=right), 404, "not-found")
    first = alice.post(url, json=right)
    assert first.status_code == 200
    again = alice.post(url, json=right)
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    other = {"outputs": [{"toolCallId": i, "output": {"n": 2}} for i in ids]}
    assert_problem(alice.post(url, json=other), 409, "conflict")
    assert finished(alice, job_id)["status"] == "succeeded"


def test_no_outputs_in_time_fails_tool_timeout_with_the_spend(alice: httpx.Client) -> None:
    job_id = alice.post(
        "/v1/jobs", json=tool_job([calls("lookup"), "ok"], toolTimeoutMs=1000)
    ).json()["id"]
    job = waiting(alice, job_id)
    done = finished(alice, job_id)
    assert done["status"] == "failed"
    assert done["result"]["error"] == "tool-timeout"
    assert done["result"]["execution"]["llmCalls"] == 1
    late = answer(alice, job)
    assert_problem(late, 409, "conflict")


def test_no_outputs_in_time_can_go_on_in_must_return_mode(alice: httpx.Client) -> None:
    spec = tool_job([calls("lookup"), "ok"], toolTimeoutMs=1000, onToolTimeout="must_return")
    job_id = alice.post("/v1/jobs", json=spec).json()["id"]
    done = finished(alice, job_id)
    assert done["status"] == "succeeded"
    assert [t["type"] for t in done["turns"]] == ["normal", "must_return"]
    assert any("toolTimeoutMs" in w for w in done["result"]["warnings"])


def test_a_job_waiting_for_outputs_can_be_cancelled(alice: httpx.Client) -> None:
    job_id = alice.post("/v1/jobs", json=tool_job([calls("lookup"), "ok"])).json()["id"]
    job = waiting(alice, job_id)
    cancelled = alice.post(f"/v1/jobs/{job_id}/cancel")
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["requiredAction"] is None
    assert_problem(answer(alice, job), 409, "conflict")


def test_the_event_stream_says_requires_action_and_goes_on_after_the_outputs(
    alice: httpx.Client,
) -> None:
    job_id = alice.post("/v1/jobs", json=tool_job([calls("lookup"), "ok"])).json()["id"]
    names: list[str] = []

    def follow() -> None:
        with client(str(alice.base_url), KEYS["alice"]) as http:
            names.extend(
                line.removeprefix("event:").strip()
                for line in _sse(http, job_id)
                if line.startswith("event:")
            )

    reader = threading.Thread(target=follow)
    reader.start()
    job = waiting(alice, job_id)
    assert answer(alice, job).status_code == 200
    reader.join(30)
    assert not reader.is_alive()
    assert names[names.index("requires_action") :] == [
        "requires_action",
        "tool_outputs_received",
        "job_start",
        "tool_outputs",
        "turn_start",
        "turn_end",
        "job_end",
    ]


def test_tool_metrics_count_calls_by_mode_and_outcome(alice: httpx.Client) -> None:
    before = idle(alice)
    bad = {"call": [{"name": "lookup", "arguments": {}}]}
    job_id = alice.post("/v1/jobs", json=tool_job([bad, calls("stock"), "ok"])).json()["id"]
    job = waiting(alice, job_id)
    answer(alice, job)
    assert finished(alice, job_id)["status"] == "succeeded"
    after = scrape(alice)
    name = "reprompt_tool_calls_total"
    assert delta(before, after, name, mode="client", outcome="invalid_arguments") == 1
    assert delta(before, after, name, mode="client", outcome="ok") == 1
    assert delta(before, after, "reprompt_jobs_requires_action_total") == 1
    assert delta(before, after, "reprompt_requires_action_wait_seconds_count") == 1


def test_a_job_listed_by_status_requires_action(api: str) -> None:
    with client(api, KEYS["alice"]) as http:
        job_id = http.post("/v1/jobs", json=tool_job([calls("lookup"), "ok"])).json()["id"]
        waiting(http, job_id)
        listed = http.get("/v1/jobs", params={"status": "requires_action", "limit": 100})
        assert job_id in [j["id"] for j in listed.json()["jobs"]]
        http.post(f"/v1/jobs/{job_id}/cancel")


def _sse(http: httpx.Client, job_id: str) -> list[str]:
    with http.stream("GET", f"/v1/jobs/{job_id}/events", timeout=30) as response:
        return list(response.iter_lines())


def test_the_walk_through_in_docs_tools_md_does_what_it_says(alice: httpx.Client) -> None:
    text = (Path(__file__).parents[2] / "docs" / "tools.md").read_text()
    job = json.loads(text.split("cat > job.json <<'JSON'\n")[1].split("\nJSON")[0])
    job["task"] = job["task"].replace("(H-1)", f"(H-1, {uuid.uuid4().hex[:6]})")
    job_id = alice.post("/v1/jobs", json=job).json()["id"]
    first = waiting(alice, job_id)
    assert [(c["id"], c["name"], c["arguments"]) for c in first["requiredAction"]["toolCalls"]] == [
        ("call_1_1", "price", {"sku": "H-1"})
    ]
    body = {"outputs": [{"toolCallId": "call_1_1", "output": {"unitPrice": 12.5}}]}
    accepted = alice.post(f"/v1/jobs/{job_id}/tool-outputs", json=body)
    assert accepted.json()["status"] == "queued"
    second = waiting(alice, job_id)
    assert [(c["id"], c["name"]) for c in second["requiredAction"]["toolCalls"]] == [
        ("call_2_1", "stock")
    ]
    body = {"outputs": [{"toolCallId": "call_2_1", "output": {"units": 40}}]}
    alice.post(f"/v1/jobs/{job_id}/tool-outputs", json=body)
    done = finished(alice, job_id)
    assert done["result"]["data"] == {"sku": "H-1", "total": 37.5, "inStock": True}
    assert [(t["type"], t["outcome"], t["toolsOffered"]) for t in done["turns"]] == [
        ("normal", "tool_calls", 2),
        ("normal", "tool_calls", 2),
        ("must_return", "success", 0),
    ]


def test_reprompt_submit_answers_tool_calls_with_a_command(api: str, tmp_path: Path) -> None:
    spec = tool_job([calls("lookup", "stock"), "ok"])
    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec))
    tool = tmp_path / "tools.py"
    tool.write_text(
        "import json, sys\n"
        "call = json.load(sys.stdin)\n"
        "if call['name'] == 'stock':\n"
        "    sys.exit('stock service down')\n"
        "print(json.dumps({'price': 9.5, 'asked': call['arguments']}))\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "submit",
            str(path),
            "--url",
            api,
            "--key",
            KEYS["alice"],
            "--tool-command",
            f"{sys.executable} {tool}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["data"] == ANSWER
    assert "[tools] running" in proc.stderr
    assert "lookup: ok, stock: error" in proc.stderr

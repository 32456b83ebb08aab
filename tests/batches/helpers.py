"""What the batch tests share: a batch body, waiting for the end, reading results."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx

from tests.waiting import sync_until

SIGNATURE = "{city :string, population :int}"


def batch_body(n: int, *, model: str, **options: Any) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    return {
        "template": {
            "task": f"Name the city the input is about and its population ({tag}).",
            "signature": SIGNATURE,
            "model": model,
            "budget": {"maxTurns": 1, "returnRetries": 3},
        },
        "items": [{"customId": f"doc-{i}", "input": {"doc": i, "tag": tag}} for i in range(n)],
        **options,
    }


def ended(http: httpx.Client, batch_id: str) -> dict[str, Any]:
    def look() -> dict[str, Any] | None:
        response = http.get(f"/v1/batches/{batch_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body if body["status"] != "running" else None

    return sync_until(look, what=f"batch {batch_id} to end", every=0.05)


def results(http: httpx.Client, batch_id: str) -> list[dict[str, Any]]:
    response = http.get(f"/v1/batches/{batch_id}/results")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def items(http: httpx.Client, batch_id: str, **params: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        page = http.get(f"/v1/batches/{batch_id}/items", params=query)
        assert page.status_code == 200, page.text
        body = page.json()
        out += body["items"]
        cursor = body["next"]
        if cursor is None:
            return out


def sim_batches(sim_url: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{sim_url}/sim/batches").json()
    return body

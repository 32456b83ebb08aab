"""Image parts on both wires (#34): the simulator takes them as each provider does, lists
each image in its journal, and answers a malformed one with a 400."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from reprompt_sim.server import SimConfig, serve_in_background
from tests.sim.bodies import anthropic, msg, openai

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5E"
    "rkJggg=="
)


def openai_image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def anthropic_image(source: dict[str, Any]) -> dict[str, Any]:
    return {"type": "image", "source": source}


OK_OPENAI = [openai_image(f"data:image/png;base64,{PNG}"), openai_image("https://x.test/a.png")]
OK_ANTHROPIC = [
    anthropic_image({"type": "base64", "media_type": "image/png", "data": PNG}),
    anthropic_image({"type": "url", "url": "https://x.test/a.png"}),
]


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with serve_in_background(SimConfig(seed=3)) as url, httpx.Client(base_url=url) as client:
        yield client


def test_image_parts_are_taken_and_journalled_on_both_wires(http: httpx.Client) -> None:
    text = {"type": "text", "text": "What is this?"}
    http.delete("/sim/requests")
    first = http.post("/v1/chat/completions", json=openai(msg("user", [text, *OK_OPENAI])))
    second = http.post("/v1/messages", json=anthropic(msg("user", [text, *OK_ANTHROPIC])))
    entries = http.get("/sim/requests").json()
    assert first.status_code == 200, first.text
    assert second.status_code == 200, second.text
    assert [e["images"] for e in entries] == [["image/png", "url"], ["image/png", "url"]]


@pytest.mark.parametrize(
    ("path", "part"),
    [
        ("/v1/chat/completions", openai_image("file:///etc/passwd")),
        ("/v1/chat/completions", openai_image("data:text/plain;base64,aGk=")),
        ("/v1/chat/completions", {"type": "image_url", "image_url": {}}),
        (
            "/v1/messages",
            anthropic_image({"type": "base64", "media_type": "text/plain", "data": "aGk="}),
        ),
        ("/v1/messages", anthropic_image({"type": "file", "file_id": "f"})),
        ("/v1/messages", {"type": "image"}),
    ],
)
def test_a_malformed_image_part_is_a_400(
    http: httpx.Client, path: str, part: dict[str, Any]
) -> None:
    make = openai if path == "/v1/chat/completions" else anthropic
    response = http.post(path, json=make(msg("user", [{"type": "text", "text": "?"}, part])))
    assert response.status_code == 400, response.text

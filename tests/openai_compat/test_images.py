"""Image parts through the official ``openai`` package: each reaches the model in its
provider's own wire format (OpenAI's ``image_url`` parts, Anthropic's ``image`` blocks), in
a plain call and in a JSON-response-format job; an ``http`` URL is fetched by the service
through the outbound guard (loopback allowed here, REPROMPT_OUTBOUND_ALLOW) and the model
gets the bytes. The job record keeps the image once.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel

from app.loopback import serve_in_thread
from app.providers.config import ModelConfig, ProviderConfig, ProvidersConfig
from tests.abuse.test_chat_input import PNG_1PX
from tests.service import CAPS, KEYS, StartApi, api_keys

PNG = base64.b64decode(PNG_1PX)


class Seen(BaseModel):
    what: str
    count: int


@pytest.fixture(scope="module")
def pictures() -> Iterator[str]:
    """A loopback server with a picture, a text, a picture over the cap and a redirect."""
    app = FastAPI()
    over = b"\x89PNG\r\n\x1a\n" + b"\0" * CAPS["max_image_bytes"]
    app.get("/cat.png")(lambda: Response(PNG, media_type="image/png"))
    app.get("/hello")(lambda: Response(b"hello", media_type="image/png"))  # lies
    app.get("/big.png")(lambda: Response(over, media_type="image/png"))
    app.get("/moved")(lambda: RedirectResponse("/cat.png"))
    with serve_in_thread(app, name="pictures") as url:
        yield url


@pytest.fixture
def api_url(start_api: StartApi, sim_url: str) -> str:
    config = ProvidersConfig(
        default="oa-model",
        providers={
            "oa": ProviderConfig(kind="openai", base_url=f"{sim_url}/v1"),
            "an": ProviderConfig(kind="anthropic", base_url=sim_url),
        },
        models={
            "oa-model": ModelConfig(provider="oa", structured="prompt"),
            "an-model": ModelConfig(provider="an", structured="prompt"),
        },
    )
    return start_api(
        embedded_worker=True,
        api_keys=api_keys(),
        providers_config=config,
        outbound_allow=["127.0.0.1"],
    )


@pytest.fixture
def client(api_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{api_url}/v1", api_key=KEYS["alice"], max_retries=0) as sdk:
        yield sdk


def seen_by_sim(sim_url: str, marker: str) -> list[dict[str, Any]]:
    """The simulator's journal entries of the requests whose last messages hold ``marker``."""
    entries = httpx.get(f"{sim_url}/sim/requests").json()
    return [e for e in entries if any(marker in text for text in e["recentMessages"])]


def parts(text: str, *urls: str) -> list[Any]:
    return [{"type": "text", "text": text}] + [
        {"type": "image_url", "image_url": {"url": url}} for url in urls
    ]


@pytest.mark.parametrize(("model", "wire"), [("oa-model", "openai"), ("an-model", "anthropic")])
def test_a_plain_call_passes_the_image_in_the_providers_wire(
    client: openai.OpenAI, sim_url: str, model: str, wire: str
) -> None:
    marker = uuid.uuid4().hex
    completion = client.chat.completions.create(
        model=model,
        messages=[
            {
                "role": "user",
                "content": parts(f"What is this? {marker}", f"data:image/png;base64,{PNG_1PX}"),
            }
        ],
    )
    assert completion.choices[0].message.content
    (entry,) = seen_by_sim(sim_url, marker)
    assert entry["api"] == wire
    assert entry["images"] == ["image/png"]


@pytest.mark.parametrize(("model", "wire"), [("oa-model", "openai"), ("an-model", "anthropic")])
def test_a_json_job_fetches_an_image_url_through_the_guard_and_keeps_it_once(
    client: openai.OpenAI, api_url: str, sim_url: str, pictures: str, model: str, wire: str
) -> None:
    marker = uuid.uuid4().hex
    rule = json.dumps({"script": ["missing_field", "ok"], "counter": "requests"})
    raw = client.chat.completions.with_raw_response.parse(
        model=model,
        messages=[
            {
                "role": "user",
                "content": parts(
                    f"Count the cats. {marker}\n[[sim {rule}]]", f"{pictures}/cat.png"
                ),
            }
        ],
        response_format=Seen,
    )
    assert isinstance(raw.parse().choices[0].message.parsed, Seen)
    # Both calls had the image's bytes (a data URL: the simulator sees its type, not a URL).
    entries = httpx.get(f"{sim_url}/sim/requests").json()
    first = next(i for i, e in enumerate(entries) if marker in "".join(e["recentMessages"]))
    assert [e["images"] for e in entries[first : first + 2]] == [["image/png"]] * 2
    assert {e["api"] for e in entries[first : first + 2]} == {wire}
    assert entries[first + 1]["attempt"] == 2  # the re-ask, on the same task
    job_id = raw.headers["x-reprompt-job-id"]
    headers = {"Authorization": f"Bearer {KEYS['alice']}"}
    record = httpx.get(f"{api_url}/v1/jobs/{job_id}", headers=headers)
    job = record.json()
    assert [t["outcome"] for t in job["turns"]] == ["invalid", "success"]
    # The image is the job spec's alone: no turn, no transcript entry repeats it.
    assert PNG_1PX.rstrip("=") not in record.text
    assert "[image 1]" in job["transcript"][1]["content"]


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/moved", "redirect"),
        ("/hello", "not a PNG, JPEG, GIF or WebP image"),
        ("/big.png", f"over {CAPS['max_image_bytes']} bytes"),
        ("/missing.png", "404"),
    ],
)
def test_a_fetched_image_that_is_not_one_is_a_400(
    client: openai.OpenAI, pictures: str, path: str, why: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="oa-model",
            messages=[{"role": "user", "content": parts("What is this?", pictures + path)}],
        )
    assert caught.value.param == "messages[0].content[1]"
    assert why in caught.value.message

"""Hostile chat completions requests (POST /v1/chat/completions): each an error in OpenAI's
shape naming the field (``param``), nothing queued, nothing reaching a model.

The service has small caps (tests/service.py CAPS): 32 KiB bodies, 4000-character tasks,
2 KiB schemas.
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from tests.abuse.service import problem_field
from tests.service import CAPS

ROUTE = "/v1/chat/completions"
SCHEMA_PARAM = "response_format.json_schema.schema"
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def chat(**extra: Any) -> dict[str, Any]:
    return {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "Name a city."}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "city", "schema": SCHEMA},
        },
        **extra,
    }


def refused(response: httpx.Response, status: int, param: str | None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["param"] == param, error
    assert error["message"]
    return error


def image(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


# A 1×1 PNG; a PNG's signature followed by filler, of a given size.
PNG_1PX = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5E"
    "rkJggg=="
)


def png_of(size: int) -> str:
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * (size - 8)).decode()


def with_images(*urls: str, **extra: Any) -> dict[str, Any]:
    parts = [{"type": "text", "text": "What is in the picture?"}, *(image(u) for u in urls)]
    return chat(messages=[{"role": "user", "content": parts}], **extra)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://169.254.169.254/latest/meta-data/", "link-local"),  # the cloud's metadata
        ("https://127.0.0.1:6379/", "loopback"),
        ("https://10.1.2.3/cat.png", "private"),
        ("https://[::ffff:127.0.0.1]/cat.png", "loopback"),
        ("https://localhost/cat.png", "localhost"),
        ("http://example.com/cat.png", "http"),  # clear text to a host not allowed
        ("file:///etc/passwd", "https (or http) URL or a data: URL"),
        ("ftp://example.com/cat.png", "https (or http) URL or a data: URL"),
        ("https://[::1/cat.png", "not a valid URL"),
        ("data:text/plain;base64,aGVsbG8=", "PNG, JPEG, GIF or WebP"),
        ("data:image/png;base64," + base64.b64encode(b"GIF89a" + b"\0" * 20).decode(), "not a"),
        ("data:image/png;base64,%%%not-base64%%%", "not base64"),
        ("data:image/png," + PNG_1PX, "base64"),
    ],
)
def test_image_urls_are_guarded_and_never_fetched_where_they_point(
    alice: httpx.Client, url: str, why: str
) -> None:
    for body in (with_images(url), {**with_images(url), "response_format": None}):
        error = refused(alice.post(ROUTE, json=body), 400, "messages[0].content[1]")
        assert why in error["message"]


def test_image_caps_count_size_and_total(alice: httpx.Client) -> None:
    one = "data:image/png;base64," + PNG_1PX
    error = refused(alice.post(ROUTE, json=with_images(*[one] * 4)), 400, "messages[0].content[4]")
    assert f"at most {CAPS['max_images']} images" in error["message"]
    large = "data:image/png;base64," + png_of(CAPS["max_image_bytes"] + 1)
    error = refused(alice.post(ROUTE, json=with_images(large)), 400, "messages[0].content[1]")
    assert "REPROMPT_MAX_IMAGE_BYTES" in error["message"]
    near = "data:image/png;base64," + png_of(CAPS["max_image_bytes"] - 100)
    error = refused(
        alice.post(ROUTE, json=with_images(near, near, near)), 400, "messages[0].content[3]"
    )
    assert "REPROMPT_MAX_IMAGES_BYTES" in error["message"]
    system = {"role": "system", "content": [{"type": "text", "text": "x"}, image(one)]}
    body = chat(messages=[system, {"role": "user", "content": "What is it?"}])
    refused(alice.post(ROUTE, json=body), 400, "messages[0].content[1]")


def test_other_parts_are_refused(alice: httpx.Client) -> None:
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    body = chat(messages=[{"role": "user", "content": [{"type": "text", "text": "?"}, audio]}])
    error = refused(alice.post(ROUTE, json=body), 400, "messages[0].content[1]")
    assert "input_audio parts are not supported" in error["message"]


def test_a_jobs_images_are_checked_at_submit(alice: httpx.Client) -> None:
    """POST /v1/jobs takes the same images (base64, a type its bytes show), under the same caps."""
    job: dict[str, Any] = {"task": "Describe the picture", "signature": "{what :string}"}
    cases = [
        # the shape (pydantic names it dotted), then the caps (admission: brackets)
        ([{"mediaType": "image/png", "data": "%%%"}], "images.0"),
        (
            [{"mediaType": "image/png", "data": base64.b64encode(b"GIF89a....").decode()}],
            "images.0",
        ),
        ([{"mediaType": "text/plain", "data": "aGVsbG8="}], "images.0.mediaType"),
        ([{"mediaType": "image/png", "data": PNG_1PX}] * 4, "images"),
        ([{"mediaType": "image/png", "data": png_of(CAPS["max_image_bytes"] + 1)}], "images[0]"),
    ]
    for images, field in cases:
        response = alice.post("/v1/jobs", json={**job, "images": images})
        assert response.status_code == 422, response.text
        assert problem_field(response) == field, response.text


def test_too_many_messages_or_parts(alice: httpx.Client) -> None:
    many = [{"role": "user", "content": "x"}] * 257
    refused(alice.post(ROUTE, json=chat(messages=many)), 400, "messages")
    parts = [{"type": "text", "text": "x"}] * 2
    body = chat(messages=[{"role": "user", "content": parts}] * 2, n=5)
    refused(alice.post(ROUTE, json=body), 400, "n")


def test_text_over_the_task_cap(alice: httpx.Client) -> None:
    long = "a" * (CAPS["max_task_chars"] + 1)
    body = chat(messages=[{"role": "user", "content": long}])
    refused(alice.post(ROUTE, json=body), 400, "messages")
    plain = {"model": "sim-model", "messages": [{"role": "user", "content": long}]}
    refused(alice.post(ROUTE, json=plain), 400, "messages")


def test_a_body_over_the_cap_or_not_utf8_is_refused_in_openais_shape(
    alice: httpx.Client,
) -> None:
    body = chat(messages=[{"role": "user", "content": "a" * CAPS["max_body_bytes"]}])
    over = refused(alice.post(ROUTE, json=body), 413, None)
    assert over["code"] == "content-too-large"
    latin1 = b'{"model": "sim-model", "messages": [{"role": "user", "content": "caf\xe9"}]}'
    sent = alice.post(ROUTE, content=latin1, headers={"content-type": "application/json"})
    assert "not valid UTF-8" in refused(sent, 400, None)["message"]
    assert sent.headers["content-type"] == "application/json"


def test_a_schema_over_its_caps(alice: httpx.Client) -> None:
    wide = {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(200)}}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": wide}}
    refused(alice.post(ROUTE, json=chat(response_format=fmt)), 400, SCHEMA_PARAM)
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(CAPS["max_schema_depth"] + 2):
        deep = {"type": "array", "items": deep}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": deep}}
    refused(alice.post(ROUTE, json=chat(response_format=fmt)), 400, SCHEMA_PARAM)


def test_reprompt_options_are_checked(alice: httpx.Client) -> None:
    body = chat(reprompt={"maxTurns": 500})
    refused(alice.post(ROUTE, json=body), 400, "reprompt.maxTurns")
    plain = {"model": "sim-model", "messages": [{"role": "user", "content": "x"}]}
    body = {**plain, "reprompt": {"maxTurns": CAPS["max_turns"] + 1}}
    refused(alice.post(ROUTE, json=body), 400, "reprompt.maxTurns")
    body = chat(reprompt={"callback": {"url": "http://127.0.0.1/"}})
    refused(alice.post(ROUTE, json=body), 400, "reprompt.callback")
    body = chat(reprompt={"validators": [{"kind": "webhook", "url": "http://10.0.0.1/hook"}]})
    error = refused(alice.post(ROUTE, json=body), 400, "reprompt.validators[0].url")
    assert error["code"] == "invalid-input"


def test_bad_shapes_name_the_field(alice: httpx.Client) -> None:
    body = chat(messages=[{"role": "root", "content": "x"}])
    refused(alice.post(ROUTE, json=body), 400, "messages[0].role")
    body = chat(messages=[{"role": "user", "content": "x", "name": "n" * 65}])
    refused(alice.post(ROUTE, json=body), 400, "messages[0].name")
    body = chat(temperature=9)
    refused(alice.post(ROUTE, json=body), 400, "temperature")
    body = chat(logprobs=True)
    refused(alice.post(ROUTE, json=body), 400, "logprobs")
    tool = {"type": "function", "function": {"name": "bad name!"}}
    refused(alice.post(ROUTE, json=chat(tools=[tool])), 400, "tools[0].function.name")
    unknown = {"type": "function", "function": {"name": "nope"}}
    plain = {"model": "sim-model", "messages": [{"role": "user", "content": "x"}]}
    refused(alice.post(ROUTE, json={**plain, "tool_choice": unknown}), 400, "tool_choice")
    response = alice.post(ROUTE, content=b"{not json", headers={"content-type": "application/json"})
    assert refused(response, 400, None)["type"] == "invalid_request_error"
    response = alice.post(ROUTE, content=b"x", headers={"content-type": "text/plain"})
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported-media-type"


def test_without_a_key_nothing_runs(api: str) -> None:
    response = httpx.post(f"{api}{ROUTE}", json=chat())
    refused(response, 401, None)
    assert response.json()["error"]["type"] == "authentication_error"


def test_tools_with_a_response_format_are_checked_as_a_jobs(alice: httpx.Client) -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(CAPS["max_schema_depth"] + 2):
        deep = {"type": "object", "properties": {"x": deep}}
    tool = {"type": "function", "function": {"name": "lookup", "parameters": deep}}
    response = alice.post(ROUTE, json=chat(tools=[tool]))
    refused(response, 400, "tools[0].function.parameters")
    named = {"type": "function", "function": {"name": "elsewhere"}}
    ok_tool = {"type": "function", "function": {"name": "lookup"}}
    response = alice.post(ROUTE, json=chat(tools=[ok_tool], tool_choice=named))
    refused(response, 400, "tool_choice")
    response = alice.post(ROUTE, json=chat(tools=[ok_tool, ok_tool]))
    refused(response, 400, "tools")
    reserved = {"type": "function", "function": {"name": "final_answer"}}
    refused(alice.post(ROUTE, json=chat(tools=[reserved])), 400, "tools")

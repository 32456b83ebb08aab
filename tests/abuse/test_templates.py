"""A client's ``retryPrompt`` renders with no partials, no lambdas and only known keys.

Before: client templates were rendered with the shipped templates as partials and names
were not checked: ``{{> ../../some/dir/secret}}`` put a ``.mustache`` file's content into
the tenant's transcript, and ``{{> nosuchfile}}`` was accepted, made a paid call, then
failed ``internal-error``. pystache's tag regex also took ~10 s on ``"{{" * 10000``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.core.answer.feedback import RETRY_PROMPT_KEYS, Failure, render_feedback
from app.core.turn.loop import Runtime, run_job
from app.core.wire.spec import JobSpec
from tests.abuse.service import api, problem_field
from tests.core.fakes import ScriptedClient, answer, reply


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with (
        api(tmp_path_factory.mktemp("templates")) as url,
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        yield client


def job(retry_prompt: str) -> dict[str, object]:
    return {"task": "x", "signature": "{a :int}", "retryPrompt": retry_prompt}


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("{{> ../../prompts/system}}", "partials"),
        ("{{> nosuchfile}}", "partials"),
        ("{{>retry_feedback}}", "partials"),
        ("{{nosuchkey}}", "unknown tag {{nosuchkey}}"),
        ("{{#secret}}x{{/secret}}", "unknown tag {{secret}}"),
        ("{{{diagnosis.__class__}}}", "unknown tag"),
        ("{{=<% %>=}}<%diagnosis%>", "delimiters"),
        ("{{#first}}never closed", "never closed"),
        ("{{diagnosis", "never closed"),
        ("{{#first}}" * 40 + "{{/first}}" * 40, "nested"),
    ],
)
def test_a_template_that_reaches_beyond_its_keys_is_a_422_naming_retry_prompt(
    http: httpx.Client, template: str, says: str
) -> None:
    response = http.post("/v1/jobs", json=job(template))
    assert problem_field(response) == "retryPrompt"
    assert says in response.json()["detail"]


@pytest.mark.parametrize(
    "template",
    ["{{" * 10_000, " " * 19_999 + "{", "{{#first}}" + "x" * 19_000, "{{!" + "}" * 19_990],
)
def test_a_hostile_template_is_refused_or_accepted_at_once(
    http: httpx.Client, template: str
) -> None:
    response = http.post("/v1/jobs", json=job(template))
    assert response.status_code in (202, 422), response.text


def test_every_key_render_feedback_passes_is_allowed(http: httpx.Client) -> None:
    template = " ".join(f"{{{{{key}}}}}" for key in sorted(RETRY_PROMPT_KEYS))
    response = http.post("/v1/jobs", json=job(template + " {{#example}}{{.}}{{/example}}"))
    assert response.status_code == 202, response.text


def test_rendering_never_reads_a_file(tmp_path: Path) -> None:
    # Even a template that was never checked renders a partial tag as nothing at all.
    failure = Failure(outcome="invalid", code="llm-invalid-output", diagnosis="bad")
    text = render_feedback(
        failure,
        first=True,
        example=None,
        retry_prompt="A {{{diagnosis}}} B",
        attempt=1,
        total_retries=1,
        previous_answer=None,
    )
    assert text == "A bad B"


async def test_a_custom_prompt_reaches_the_model_with_its_keys_filled() -> None:
    spec = JobSpec.model_validate(
        {
            **job(
                "Attempt {{attempt}} of {{total_retries}}:\n{{{diagnosis}}}\n"
                "{{^excerpt}}-{{/excerpt}}"
            ),
            "budget": {"maxTurns": 1, "returnRetries": 1},
        }
    )
    client = ScriptedClient([reply('{"a": "x"}'), answer({"a": 1})])
    result = await run_job(spec, Runtime(client=client))
    assert result.envelope.status == "success"
    feedback = client.requests[1].messages[-1].content
    assert feedback.startswith("Attempt 1 of 1:\nThe answer does not match the schema")
    assert feedback.rstrip().endswith("-") or "Correction attempt" in feedback

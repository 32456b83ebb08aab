"""langchain-openai's ``ChatOpenAI(...).with_structured_output(Model)`` pointed at reprompt:
the simulator's first answer is invalid, the framework gets a validated object."""

from __future__ import annotations

from typing import Any

import httpx
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, SecretStr

from tests.openai_compat.test_python_sdk import MODEL, directive, job_of
from tests.service import KEYS


class City(BaseModel):
    city: str
    population: int


def test_with_structured_output_gets_a_validated_object(api: str) -> None:
    with httpx.Client() as http:
        llm = ChatOpenAI(
            model=MODEL,
            base_url=f"{api}/v1",
            api_key=SecretStr(KEYS["alice"]),
            max_retries=0,
            http_client=http,
        )
        structured = llm.with_structured_output(City, include_raw=True)
        result: Any = structured.invoke(directive(["missing_field", "ok"]))
    city = result["parsed"]
    assert isinstance(city, City)
    raw = result["raw"]
    usage = raw.usage_metadata
    job = job_of(api, raw.response_metadata["id"])
    turns = job["turns"]
    assert [t["outcome"] for t in turns] == ["invalid", "success"]
    assert usage["input_tokens"] == sum(t["usage"]["inputTokens"] for t in turns)
    assert usage["output_tokens"] == sum(t["usage"]["outputTokens"] for t in turns)

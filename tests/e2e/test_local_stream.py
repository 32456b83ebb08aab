"""The embedded local model (gemma 3 270M on llama.cpp's OpenAI-compatible server) streams a
real answer: partials as its tokens come, the last one the result, usage from the stream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.turn.loop import Runtime, run_job
from app.core.wire.partial import PartialAnswer, PartialEvent
from app.core.wire.spec import JobSpec
from app.providers.config import ProvidersConfig
from app.providers.embedded import open_router
from app.providers.http import make_client
from app.providers.local import local_available

JOBS = Path(__file__).parent / "jobs"

pytestmark = [
    pytest.mark.llama,
    pytest.mark.slow,
    pytest.mark.skipif(not local_available(), reason="needs pip install '.[local]'"),
]


async def test_the_local_model_streams_a_real_answer(tmp_path: Path) -> None:
    raw = json.loads((JOBS / "constrained.json").read_text(encoding="utf-8"))
    job = JobSpec.model_validate({**raw, "stream": True})
    seen: list[PartialEvent] = []
    async with (
        make_client() as http,
        open_router(http, data_dir=tmp_path, config=ProvidersConfig()) as router,
    ):
        result = await run_job(job, Runtime(client=router, partials=seen.append))
    envelope = result.envelope
    assert envelope.status == "success", envelope
    assert envelope.data == {"name": "Alice Smith", "age": 30}
    partials = [e for e in seen if isinstance(e, PartialAnswer)]
    assert len(partials) >= 2  # the name showed before the answer was whole
    assert partials[0].data == {"name": "Alice Smith"}
    assert partials[-1].data == envelope.data
    assert not any("did not stream" in w for w in envelope.warnings)
    assert envelope.execution is not None
    assert envelope.execution.output_tokens > 0  # the usage came with the stream

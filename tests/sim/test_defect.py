"""Every defect the simulator writes is one its own diagnosis (and a client) can see."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprompt_sim.config import ANSWER_MODES
from reprompt_sim.conversation import Turn
from reprompt_sim.defect import inject
from reprompt_sim.diagnosis import examine
from reprompt_sim.instance import valid_instance
from tests.sim.schemas import RICH_SCHEMA, json_schemas

TEXT_AND_STRUCTURE = [m for m in ANSWER_MODES if m not in ("refusal", "truncation")]


@settings(max_examples=40, deadline=None)
@given(schema=json_schemas, seed=st.integers(0, 2**16), mode=st.sampled_from(TEXT_AND_STRUCTURE))
def test_every_injected_defect_is_diagnosable(schema: dict[str, Any], seed: int, mode: str) -> None:
    expected = valid_instance(schema, seed=seed, task="t")
    draft = inject(mode, expected, schema, random.Random(seed))

    diagnosis = examine(
        Turn("assistant", draft.text), expected=expected, schema=schema, structured=True
    )

    assert diagnosis.defect != "none", (mode, draft)


@pytest.mark.parametrize("mode", TEXT_AND_STRUCTURE)
@pytest.mark.parametrize("compact", [False, True])
def test_defects_in_a_rich_schema_keep_their_mode(mode: str, compact: bool) -> None:
    expected = valid_instance(RICH_SCHEMA, seed=3, task="rich")

    draft = inject(mode, expected, RICH_SCHEMA, random.Random(3), compact=compact)

    assert draft.mode == mode
    assert (
        examine(
            Turn("assistant", draft.text), expected=expected, schema=RICH_SCHEMA, structured=True
        ).defect
        != "none"
    )

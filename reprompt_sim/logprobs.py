"""Token log-probabilities for an answer, as OpenAI's ``logprobs: true`` returns them.

    token_logprobs('{"a": 1}', outcome="ok", key="k")
    # {"content": [{"token": '{"a"', "logprob": -0.012, "bytes": [...], "top_logprobs": []}, ...]}

Tokens are the text in pieces of ``CHARS_PER_TOKEN`` characters (the simulator's token
estimate); they spell the answer exactly. A correct answer's tokens are likely (probability
above 0.95 each), a defective answer's much less so (0.1 to 0.6): a client sees a
confidence that tells the two apart, as a calibrated model's would. Seeded by ``key``.
"""

from __future__ import annotations

import math
import random
from typing import Any

from reprompt_sim.behaviour import CHARS_PER_TOKEN


def token_logprobs(text: str, *, outcome: str, key: str) -> dict[str, Any]:
    rnd = random.Random(key)
    low, high = (0.95, 0.999) if outcome == "ok" else (0.1, 0.6)
    content = []
    for start in range(0, len(text), CHARS_PER_TOKEN):
        token = text[start : start + CHARS_PER_TOKEN]
        logprob = round(math.log(rnd.uniform(low, high)), 6)
        content.append(
            {"token": token, "logprob": logprob, "bytes": list(token.encode()), "top_logprobs": []}
        )
    return {"content": content}

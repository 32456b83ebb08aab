"""The base of every shape reprompt writes out: camelCase on the wire, frozen, typed.

The envelope, the turn records, the loop's events and the API's responses are pydantic
models built on ``Wire``; each shape is declared once and serialised from its model
(``model_dump_json()``), in Redis and on the wire alike::

    class Usage(Wire):
        input_tokens: int          # "inputTokens" in JSON

Unknown fields are ignored when reading, so a record written by a newer version of the
service still reads during a rolling upgrade.
"""

from __future__ import annotations

import json
from typing import Any, Final

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Wire(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        frozen=True,
        extra="ignore",
    )


# ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``'s encoder, made once
# (``json.dumps`` with options builds one per call).
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def compact_json(value: Any) -> str:
    """``value`` as the JSON text reprompt stores and measures: no spaces, text as is."""
    return _COMPACT.encode(value)

"""The checked-in OpenAPI document, generated from the code.

    python -m app.api.openapi > openapi/openapi.json      # make openapi

Deterministic: sorted keys, two-space indent, a final newline. The document does not
depend on the settings (caps and keys are described, not embedded).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from app.api.app import create_app
from app.settings import Settings


def document() -> dict[str, Any]:
    """The OpenAPI document of the API (no lifespan runs: nothing is started)."""

    def nothing() -> Any:
        raise RuntimeError("the OpenAPI document needs no resources")

    return create_app(Settings.model_construct(), nothing).openapi()


def render() -> str:
    return json.dumps(document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

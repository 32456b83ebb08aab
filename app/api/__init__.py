"""The HTTP API: FastAPI over the job store (see docs/api.md and openapi/openapi.json).

from app.api import create_app
app = create_app(Settings(), embedded_worker=True)
"""

from app.api.app import create_app

__all__ = ["create_app"]

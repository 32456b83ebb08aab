"""The HTTP API: FastAPI over the job store (see docs/api.md and openapi/openapi.json).

Built by ``app.assembly.api_app(settings)``, which provides its resources.
"""

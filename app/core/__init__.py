"""The pure turn engine: no FastAPI, redis or httpx in here (tests/core/test_purity.py checks)."""

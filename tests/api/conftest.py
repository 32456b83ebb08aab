"""The API's fixtures are tests/api/fixtures.py's (shared by tests/conftest.py); the helpers
that go with them are plain functions in tests/service.py."""

"""Fixtures every folder may use, as plugins (not re-exported by hand from a conftest).

tests/api/fixtures.py: the API on loopback (``api``, ``alice``, ``bob``, ``start_api``) and
what it runs on. A folder that needs its own ``redis_url`` or ``sim_url`` defines it in its
conftest, which wins there.
"""

pytest_plugins = (
    "tests.api.fixtures",
    "tests.batches.fixtures",
    "tests.console.fixtures",
    "tests.console.batch_fixtures",
)

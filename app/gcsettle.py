"""The cyclic garbage collector tuned for a long-running service, once it has started::

    settle_gc()   # the API's lifespan and the worker's run call it; idempotent

What start-up built (modules, settings, clients, compiled schemas) lives as long as the
process, so it is frozen out of every later collection; and young collections run less
often. A job or a request allocates thousands of short-lived containers (parsed JSON,
models, HTTP objects) that reference counting frees anyway; at CPython's default of 700
young objects the collector ran several times per job (~3.5% of a worker's CPU).
"""

from __future__ import annotations

import gc
from typing import Final

GC_YOUNG_THRESHOLD: Final = 20_000


def settle_gc() -> None:
    gc.freeze()
    young, older, oldest = gc.get_threshold()
    gc.set_threshold(max(GC_YOUNG_THRESHOLD, young), older, oldest)

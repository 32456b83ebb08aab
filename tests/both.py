"""Both roles of the store over one client, so a test can play API and worker at once."""

from __future__ import annotations

from app.store import JobStore, Leases


class Store(JobStore, Leases):
    """``JobStore`` (submit, get, wait, events, cancel) and ``Leases`` (claim, write, reap)."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from app.store import new_job_id
from app.store.keys import Keys


def test_every_key_hashes_to_one_cluster_slot() -> None:
    keys = Keys("rp")
    job_id = new_job_id()
    every = [
        keys.job(job_id),
        keys.turns(job_id),
        keys.events(job_id),
        keys.queue,
        keys.leases,
        keys.wake,
        keys.fence,
        keys.tenant("acme"),
        keys.tenant("{odd}"),
        keys.idempotency("acme", "order-1"),
    ]

    assert len({key_slot(key.encode()) for key in every}) == 1
    assert all(key.startswith("rp:{jobs}:") for key in every)


def test_idempotency_keys_hold_a_digest_not_the_clients_key() -> None:
    key = Keys("rp").idempotency("acme", "secret order id")

    assert "secret" not in key
    assert len(key.rsplit(":", 1)[1]) == 64


@pytest.mark.parametrize("prefix", ["", "a{b}", "x:y", "a" * 33])
def test_a_prefix_that_could_break_the_layout_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        Keys(prefix)

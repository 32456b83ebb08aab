from __future__ import annotations

import itertools

import pytest
from redis.crc import key_slot

from app.store import new_job_id, shard_of
from app.store.ids import _JobIds, id_floor
from app.store.keys import Keys, shard_tag


def test_every_key_of_a_shard_hashes_to_one_cluster_slot() -> None:
    keys = Keys("rp", shards=4)
    for index in range(4):
        shard = keys.shard(index)
        job_id = new_job_id(shard=index)
        every = [
            shard.job(job_id),
            shard.tenant_queue("acme"),
            shard.tenant_queue("{odd}"),
            shard.ring,
            shard.leases,
            shard.tenant_index("acme"),
            shard.tenant_bytes("acme", 7),
            shard.idempotency("acme", "order-1"),
        ]
        assert len({key_slot(key.encode()) for key in every}) == 1
        assert shard_of(job_id) == index


def test_shards_spread_over_the_slot_space_whatever_their_number() -> None:
    for count in range(2, 33):
        slots = sorted(key_slot(shard_tag(i).encode()) for i in range(count))
        ring = [*slots, slots[0] + 16384]
        gaps = [after - before for before, after in itertools.pairwise(ring)]
        # No gap wider than twice the even share: with at least twice as many shards as
        # masters, every master's slot range holds a shard.
        assert max(gaps) <= 2 * 16384 / count + 64, (count, slots)


def test_idempotency_keys_hold_a_digest_not_the_clients_key() -> None:
    key = Keys("rp").shard(0).idempotency("acme", "secret order id")

    assert "secret" not in key
    assert len(key.rsplit(":", 1)[1]) == 64


def test_an_idempotency_key_always_picks_the_same_shard() -> None:
    keys = Keys("rp", shards=8)
    picks = {keys.shard_for("acme", "order-1", fallback) for fallback in range(20)}
    assert len(picks) == 1


@pytest.mark.parametrize("prefix", ["", "a{b}", "x:y", "a" * 33])
def test_a_prefix_that_could_break_the_layout_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="prefix"):
        Keys(prefix)


def test_the_shard_of_an_id_is_the_low_8_bits_of_its_whole_value() -> None:
    alphabet = "0123456789abcdefghjkmnpqrstvwxyz"

    def whole(job_id: str) -> int:  # every character decoded
        value = 0
        for char in job_id[4:]:
            value = value * 32 + alphabet.index(char)
        return value & 0xFF

    ids = [new_job_id(shard=shard) for shard in range(256)]
    ids += ["job_", "job_z", "job_0z", "job_" + "z" * 26, "job_7" + "y" * 25]
    for job_id in ids:
        assert shard_of(job_id) == whole(job_id)
    assert [shard_of(job_id) for job_id in ids[:256]] == list(range(256))
    for bad in ("job_0000000000000000000000000!", "job_u0", "job_ab c", "job_é0"):
        with pytest.raises(ValueError, match="not a job id"):
            shard_of(bad)


def test_a_job_id_is_its_time_random_and_shard_bits_in_crockford_base32() -> None:
    alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
    for shard in (0, 1, 31, 200, 255):
        for ms in (0, 1, 1_764_000_000_123, 2**48 - 1):
            job_id = _JobIds()(ms, shard=shard)
            value = 0
            for char in job_id[4:]:
                value = value * 32 + alphabet.index(char)
            assert len(job_id) == 30
            assert value >> 80 == ms
            assert value & 0xFF == shard
            assert id_floor(ms) == "job_" + job_id[4:14] + "0" * 16
            assert id_floor(ms) <= job_id

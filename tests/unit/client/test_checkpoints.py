"""Checkpoint stores and group arithmetic without servers: the file store's fencing, the
resharding rule (no loss, no repeat) and the shard assignment."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from headwater.coordination import FencedError
from headwater.coordination.checkpoints import FileStore, GroupState, claim_all, reshard_state
from headwater.coordination.groups import assignment


def test_file_store_refuses_a_deposed_owner(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.create("g", 2, 100)
    epoch, nxt = store.claim("g", 0, None)
    assert (epoch, nxt) == (1, 100)
    store.save("g", 0, 150, epoch)
    newer, nxt = store.claim("g", 0, None)
    assert (newer, nxt) == (2, 150)
    with pytest.raises(FencedError):
        store.save("g", 0, 170, epoch)
    assert store.load("g").next[0] == 150  # type: ignore[union-attr]
    with pytest.raises(FencedError):
        store.claim("g", 0, 2)  # an epoch is never reused


def test_create_keeps_an_existing_group(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.create("g", 3, 5)
    assert store.create("g", 3, 99).next == {0: 5, 1: 5, 2: 5}


def test_reshard_delivers_each_change_once_across_generations() -> None:
    """A differential check against a direct simulation: with random old checkpoints, the
    changes the new generation delivers are exactly those the old one had not handled."""
    rng = random.Random(7)
    changes = [(rng.randrange(1 << 32), seq) for seq in range(2000)]  # (key hash, sequence)
    old = GroupState(8, {s: rng.randrange(2000) for s in range(8)})
    not_handled = {(h, q) for h, q in changes if q >= old.next[h % 8]}
    new = reshard_state(old, 12)
    assert set(new.next.values()) == {min(old.next.values())}
    delivered = {(h, q) for h, q in changes if q >= new.next[h % 12] and new.wants(h, q)}
    assert delivered == not_handled
    # and once more, from 12 to 5 shards after some progress
    for s in range(12):
        new.next[s] = max(new.next[s], rng.randrange(2000))
    pending = {(h, q) for h, q in delivered if q >= new.next[h % 12]}
    again = reshard_state(new, 5)
    assert {(h, q) for h, q in changes if q >= again.next[h % 5] and again.wants(h, q)} == pending


def test_assignment_gives_every_shard_to_exactly_one_member() -> None:
    members = ["b", "a", "c"]
    owned = [assignment(members, 8, m) for m in members]
    assert sorted(s for o in owned for s in o) == list(range(8))
    assert assignment(members, 8, "z") == set()


def test_claim_many_claims_each_shard_as_claim_does(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.create("g", 3, 100)
    store.save("g", 1, 150, store.claim("g", 1, None)[0])  # shard 1 at epoch 1, next 150
    assert claim_all(store, "g", range(3)) == {0: (1, 100), 1: (2, 150), 2: (1, 100)}
    with pytest.raises(FencedError):
        store.save("g", 1, 160, 1)  # the epoch before the claim is deposed
    store.save("g", 1, 160, 2)
    state = store.load("g")
    assert state is not None and state.epochs == {0: 1, 1: 2, 2: 1} and state.next[1] == 160


def test_create_claiming_equals_create_then_claim_all(tmp_path: Path) -> None:
    one, two = FileStore(tmp_path / "one"), FileStore(tmp_path / "two")
    for _ in range(2):  # a new group, then the same group again (a restart)
        state, claims = one.create_claiming("g", 3, 100)
        assert claims is not None
        assert (state.count, state.next) == (3, {0: 100, 1: 100, 2: 100})
        two.create("g", 3, 100)
        assert claims == claim_all(two, "g", range(3))
    assert one.load("g") == two.load("g")
    assert claims == {0: (2, 100), 1: (2, 100), 2: (2, 100)}


def test_create_claiming_claims_nothing_when_the_count_differs(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.create("g", 2, 100)
    state, claims = store.create_claiming("g", 3, 100)
    assert claims is None and state.count == 2
    assert store.load("g") == GroupState(2, {0: 100, 1: 100})

"""Sparse index pieces: GTID containment, the summary tree, entry parsing and damage."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings, strategies as st

from headwater.errors import CorruptRecordError
from headwater.position import MariadbGtidPos, MysqlGtidSet
from headwater.store.index import (
    ENTRY,
    GtidTree,
    GtidWanted,
    IndexBuilder,
    IndexView,
    encode_trailer,
    gtid_key,
    split_sealed,
)

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "11111111-2222-3333-4444-555555555555"


def test_gtid_key_parses_both_flavours_and_rejects_garbage() -> None:
    assert gtid_key(f"{U1}:7") == (1, uuid.UUID(U1).bytes, 7)
    assert gtid_key("3-9-12") == (2, (3).to_bytes(4, "little") + bytes(12), 12)
    bad = ("", "junk", "1-2", f"{U1}:x", f"{U1}:-5", "-1-1-1", "1-1--3")
    assert [gtid_key(g) for g in bad] == [None] * len(bad)


def test_wanted_covers_ranges() -> None:
    w = GtidWanted(MysqlGtidSet.parse(f"{U1}:1-10:20-30"))
    u1 = uuid.UUID(U1).bytes
    assert [w.covers(1, u1, a, b) for a, b in ((1, 10), (2, 11), (20, 30), (10, 20))] == [
        True,
        False,
        True,
        False,
    ]
    assert w.covers(1, uuid.UUID(U2).bytes, 1, 1) is False
    m = GtidWanted(MariadbGtidPos.parse("0-1-50,2-1-7"))
    assert [m.contains(g) for g in ("0-5-50", "0-1-51", "2-1-7", "1-1-1", "")] == [
        True,
        False,
        True,
        False,
        False,
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(), st.tuples(st.sampled_from([U1, U2]), st.integers(1, 60), st.integers(0, 5))
        ),
        min_size=1,
        max_size=70,
    ),
    st.integers(0, 60),
    st.integers(0, 70),
)
def test_tree_finds_first_unskippable_block_like_a_linear_scan(blocks, upto, start) -> None:  # type: ignore[no-untyped-def]
    leaves = [
        None if b is None else {(1, uuid.UUID(b[0]).bytes): (b[1], b[1] + b[2])} for b in blocks
    ]
    wanted = GtidWanted(MysqlGtidSet.parse(f"{U1}:1-{upto}" if upto else ""))
    linear = next(
        (i for i in range(start, len(leaves)) if not wanted.covers_summary(leaves[i])), len(leaves)
    )
    assert GtidTree(leaves).first_unskippable(start, wanted) == max(linear, 0)


def build_index(n: int) -> bytes:
    b = IndexBuilder(100)
    for i in range(1, n + 1):
        b.add(i, 60 * (i - 1), (1, 1, i, 0), i * 10, f"{U1}:{i}", 60)
    return b.seal()


def test_entries_round_trip_through_parse() -> None:
    raw = build_index(50)
    view = IndexView.parse(raw, path="x.idx")
    assert len(raw) == len(view) * ENTRY.size
    assert view.seqs == list(range(1, 51, 2))
    assert view.leaves[0] == {(1, uuid.UUID(U1).bytes): (1, 2)}
    assert view.mtb[1] == 20


def test_every_flipped_index_byte_is_located() -> None:
    raw = build_index(20)
    for i in range(len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 0x10
        with pytest.raises(CorruptRecordError) as ei:
            IndexView.parse(bytes(bad), path="x.idx")
        assert ei.value.offset == i - i % ENTRY.size


def test_sealed_trailer_checks() -> None:
    raw = build_index(20)
    full = raw + encode_trailer(raw, len(raw) // ENTRY.size, 20, 1200)
    assert split_sealed(full, path="x.idx")[1:] == (len(raw) // ENTRY.size, 20, 1200)
    for cut in (1, 5, 32, ENTRY.size):
        with pytest.raises(CorruptRecordError):
            split_sealed(full[:-cut], path="x.idx")

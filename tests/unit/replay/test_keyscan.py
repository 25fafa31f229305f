"""The key-first pass of a replay (_native/lastwrite.c) against a plain sequential replay.

Row images are built byte by byte as MySQL's sql/rpl_record.cc pack_row lays them out (a
null bitmap of the present columns, then each non-NULL value: INT as 4 little-endian
bytes, VARCHAR(<256) as a 1-byte length and its bytes) for a table ``(id INT PRIMARY KEY,
v VARCHAR(40) NULL)``. Workloads are generated as in tests/unit/spark/test_lastwrite.py:
inserts of absent keys, value updates, key moves (chains arise), swaps through a
temporary key, deletes and reinserts, NULL flips, cut into rows events at random. The
scanner's surviving puts, decoded from their after image offsets, must equal the dict a
sequential replay leaves, for one part and for every split into parts.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from headwater._native._lastwrite import (
    DELETE,
    INSERT,
    KEY_SIGNED,
    KEY_TEXT,
    KEY_UNSIGNED,
    UPDATE,
    Scanner,
    Shape,
)

SHAPE = Shape((4, -1), ((0, KEY_SIGNED),))
KEYS = 6


def image(key: int, value: str | None) -> bytes:
    nulls = 0 if value is not None else 0b10
    out = bytes([nulls]) + struct.pack("<i", key)
    if value is not None:
        data = value.encode()
        out += bytes([len(data)]) + data
    return out


def read_image(buf: bytes, pos: int) -> tuple[int, str | None]:
    nulls = buf[pos]
    (key,) = struct.unpack_from("<i", buf, pos + 1)
    if nulls & 0b10:
        return key, None
    n = buf[pos + 5]
    return key, buf[pos + 6 : pos + 6 + n].decode()


op_strategy = st.tuples(
    st.sampled_from(["insert", "update", "move", "swap", "delete", "null_flip"]),
    st.integers(-KEYS, KEYS),
    st.integers(-KEYS, KEYS),
    st.integers(0, 3),
    st.booleans(),  # start a new rows event here
)


def generate(ops: list[tuple[str, int, int, int, bool]]) -> tuple[list[tuple[int, bytes]], dict]:
    """Rows events ``(op, bytes)`` in log order and the state a sequential replay leaves."""
    state: dict[int, str | None] = {}
    events: list[tuple[int, bytes]] = []

    def emit(op: int, row: bytes, cut: bool) -> None:
        if cut or not events or events[-1][0] != op:
            events.append((op, row))
        else:
            events[-1] = (op, events[-1][1] + row)

    for step, (kind, a, b, n, cut) in enumerate(ops):
        value = f"v{step}" if n else None
        if kind == "insert" and a not in state:
            state[a] = value
            emit(INSERT, image(a, value), cut)
        elif kind == "update" and a in state:
            emit(UPDATE, image(a, state[a]) + image(a, value), cut)
            state[a] = value
        elif kind == "null_flip" and a in state:
            flipped = None if state[a] is not None else "back"
            emit(UPDATE, image(a, state[a]) + image(a, flipped), cut)
            state[a] = flipped
        elif kind == "move" and a in state and b not in state:
            emit(UPDATE, image(a, state[a]) + image(b, state[a]), cut)
            state[b] = state.pop(a)
        elif kind == "swap" and a in state and b in state and a != b:
            t = 1000 + step  # through a temporary key, as SQL must
            va, vb = state[a], state[b]
            emit(UPDATE, image(a, va) + image(t, va), cut)
            emit(UPDATE, image(b, vb) + image(a, vb), True)
            emit(UPDATE, image(t, va) + image(b, va), True)
            state[a], state[b] = vb, va
        elif kind == "delete" and a in state:
            emit(DELETE, image(a, state.pop(a)), cut)
    return events, state


def scan(events: list[tuple[int, bytes]], parts: int, part: int) -> dict[int, str | None]:
    scanner = Scanner(parts, part)
    for ordinal, (op, buf) in enumerate(events):
        second = SHAPE if op == UPDATE else None
        scanner.scan(op, SHAPE, second, buf, 0, len(buf), ordinal)
    seqs, offsets = scanner.survivors()
    seq_list = list(struct.unpack(f"<{len(seqs) // 8}q", seqs))
    off_list = list(struct.unpack(f"<{len(offsets) // 8}q", offsets))
    assert seq_list == sorted(seq_list)
    state = {}
    for seq, offset in zip(seq_list, off_list, strict=True):
        key, value = read_image(events[seq >> 32][1], offset)
        assert key not in state
        state[key] = value
    return state


@settings(max_examples=300, deadline=None)
@given(st.lists(op_strategy, max_size=60), st.integers(1, 4))
def test_survivors_equal_a_sequential_replay_for_every_split(ops: list, parts: int) -> None:
    events, expected = generate(ops)
    assert scan(events, 1, 0) == expected
    merged: dict[int, str | None] = {}
    for part in range(parts):
        got = scan(events, parts, part)
        assert not set(got) & set(merged)  # a key lives in one part
        merged.update(got)
    assert merged == expected


def test_a_chain_a_swap_and_a_reinsert_in_one_event() -> None:
    buf = image(1, "a") + image(2, "b")
    moves = (
        image(1, "a") + image(3, "a")  # chain 1 -> 3 -> 4
        + image(3, "a") + image(4, "a")
        + image(2, "b") + image(9, "b")  # swap 2 <-> 4 through 9
        + image(4, "a") + image(2, "a")
        + image(9, "b") + image(4, "b")
    )  # fmt: skip
    events = [(INSERT, buf), (UPDATE, moves), (DELETE, image(2, "a")), (INSERT, image(2, "z"))]
    assert scan(events, 1, 0) == {4: "b", 2: "z"}


def test_integer_keys_compare_by_value_across_widths_and_signedness() -> None:
    scanner = Scanner(1, 0)
    small = Shape((1,), ((0, KEY_SIGNED),))  # TINYINT
    wide = Shape((8,), ((0, KEY_SIGNED),))  # BIGINT after an ALTER
    unsigned = Shape((8,), ((0, KEY_UNSIGNED),))
    scanner.scan(INSERT, small, None, b"\x00\xff", 0, 2, 0)  # -1
    scanner.scan(INSERT, wide, None, b"\x00" + struct.pack("<q", -1), 0, 9, 1)  # the same key
    scanner.scan(INSERT, unsigned, None, b"\x00" + struct.pack("<Q", 2**64 - 1), 0, 9, 2)
    scanner.scan(INSERT, small, None, b"\x00\x05", 0, 2, 3)
    scanner.scan(INSERT, unsigned, None, b"\x00" + struct.pack("<Q", 5), 0, 9, 4)  # same as 5
    assert scanner.keys == 3  # -1, 2**64-1 (not -1), 5
    seqs, _ = scanner.survivors()
    assert list(struct.unpack("<3q", seqs)) == [1 << 32, 2 << 32, 4 << 32]


def test_composite_text_keys_and_nulls() -> None:
    shape = Shape((-1, -2, 4), ((1, KEY_TEXT), (0, KEY_TEXT)))  # key (b, a)
    scanner = Scanner(1, 0)

    def row(a: bytes, b: bytes | None, x: int) -> bytes:
        nulls = 0 if b is not None else 0b10
        out = bytes([nulls, len(a)]) + a
        if b is not None:
            out += struct.pack("<H", len(b)) + b
        return out + struct.pack("<i", x)

    rows = row(b"ab", b"c", 1) + row(b"a", b"bc", 2) + row(b"ab", None, 3) + row(b"ab", b"c", 4)
    assert scanner.scan(INSERT, shape, None, rows, 0, len(rows), 0) == 4
    assert scanner.keys == 3  # ("c","ab") twice; a length prefix keeps "ab"+"c" apart
    seqs, offsets = scanner.survivors()
    assert list(struct.unpack("<3q", seqs)) == [1, 2, 3]
    assert list(struct.unpack("<3q", offsets)) == [11, 22, 30]  # where each row starts


def test_a_row_past_the_end_raises() -> None:
    scanner = Scanner(1, 0)
    buf = image(1, "abc")
    with pytest.raises(ValueError, match="past the end"):
        scanner.scan(INSERT, SHAPE, None, buf, 0, len(buf) - 1, 0)
    with pytest.raises(ValueError):
        Shape((4, -1), ((1, KEY_SIGNED),))  # a text column read as an integer
    with pytest.raises(ValueError):
        Scanner(2, 2)


def test_long_text_keys_moved_and_deleted() -> None:
    """Keys longer than an entry holds inline (lastwrite.c INLINE_KEY) live in its arena."""
    shape = Shape((-2, 4), ((0, KEY_TEXT),))
    scanner = Scanner(1, 0)

    def row(key: str, x: int) -> bytes:
        data = key.encode()
        return b"\x00" + struct.pack("<H", len(data)) + data + struct.pack("<i", x)

    long = [f"{'k' * 40}-{i}" for i in range(200)]
    inserts = b"".join(row(k, i) for i, k in enumerate(long))
    scanner.scan(INSERT, shape, None, inserts, 0, len(inserts), 0)
    moves = b"".join(row(long[i], i) + row(long[i] + "-moved", i) for i in range(0, 200, 2))
    scanner.scan(UPDATE, shape, shape, moves, 0, len(moves), 1)
    deletes = b"".join(row(long[i], i) for i in range(1, 200, 4))
    scanner.scan(DELETE, shape, None, deletes, 0, len(deletes), 2)
    seqs, _offsets = scanner.survivors()
    survivors = struct.unpack(f"<{len(seqs) // 8}q", seqs)
    assert scanner.keys == 300  # 200 keys, 100 new ones
    # 100 moved rows (event 1), and the odd rows not deleted (event 0)
    assert [s >> 32 for s in survivors].count(1) == 100
    assert sorted(s & 0xFFFFFFFF for s in survivors if s >> 32 == 0) == [
        i for i in range(1, 200, 2) if i % 4 != 1
    ]


@pytest.mark.parametrize("parts", [1, 3])
def test_a_size_hint_changes_nothing_but_the_table_size(parts: int) -> None:
    """Scanner(parts, part, hint): the table sized up front (no growth) or too small (it
    grows as without a hint), or absurdly large (capped): the same survivors and removes
    (these in the table's order, which the size changes)."""
    events = [(INSERT, image(k, f"v{k}")) for k in range(5000)]
    events += [(DELETE, image(k, f"v{k}")) for k in range(0, 5000, 7)]
    events += [(UPDATE, image(k, f"v{k}") + image(k + 10_000, "m")) for k in range(1, 5000, 11)]
    for part in range(parts):
        got = []
        for hint in (0, 10, 5000 // parts, 10**12):
            scanner = Scanner(parts, part, hint)
            for ordinal, (op, buf) in enumerate(events):
                second = SHAPE if op == UPDATE else None
                scanner.scan(op, SHAPE, second, buf, 0, len(buf), ordinal)
            count, (column,) = scanner.removes()  # (in table order: sorted here)
            assert isinstance(column, bytes)
            removed = sorted(struct.unpack(f"<{count}q", column))
            got.append((scanner.keys, scanner.survivors(), removed))
        assert got[0][0] > 5000 // parts // 2
        assert all(g == got[0] for g in got[1:])


def test_tables_in_huge_pages_give_the_same_survivors() -> None:
    """A table of 4 MiB or more (lastwrite.c TABLE_HUGE) is mapped on its own and advised
    as huge pages: sized from a hint (advised when its keys reach cap / 1024, the pages
    touched so far collapsed), or grown past the size: the same survivors and removes as
    tables that stay small (64 parts: a few thousand keys each), and the keys a
    sequential replay leaves."""
    n = 150_000
    keys = [k * 7919 % 1_000_003 for k in range(n)]
    moved = [k for k in range(0, 1_000_003, 97) if k % 2]
    inserts = b"".join(image(k, None) for k in keys)
    moves = b"".join(image(k, None) + image(k + 2_000_000, "m") for k in moved)
    deletes = b"".join(image(k + 2_000_000, "m") for k in moved[::3])
    events = [(INSERT, inserts), (UPDATE, moves), (DELETE, deletes)]
    state = set(keys)
    for k in moved:
        state.discard(k)
        state.add(k + 2_000_000)
    state -= {k + 2_000_000 for k in moved[::3]}

    def run(parts: int, part: int, hint: int) -> tuple[int, list[int], list[int]]:
        scanner = Scanner(parts, part, hint)
        for ordinal, (op, buf) in enumerate(events):
            scanner.scan(op, SHAPE, SHAPE if op == UPDATE else None, buf, 0, len(buf), ordinal)
        count, (column,) = scanner.removes()
        raw, _offsets = scanner.survivors()
        seqs = list(struct.unpack(f"<{len(raw) // 8}q", raw))
        return scanner.keys, seqs, sorted(struct.unpack(f"<{count}q", column))

    hinted, grown = run(1, 0, n), run(1, 0, 0)
    assert hinted == grown
    assert len(hinted[1]) == len(state)
    assert hinted[2] == sorted(set(moved) | {k + 2_000_000 for k in moved[::3]})
    small = [run(64, part, 0) for part in range(64)]
    assert sum(keys for keys, _s, _r in small) == hinted[0]
    assert sorted(s for _k, seqs, _r in small for s in seqs) == hinted[1]
    assert sorted(r for _k, _s, removed in small for r in removed) == hinted[2]

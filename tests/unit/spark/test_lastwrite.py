"""The replay apply (spark/lastwrite.py) against a plain sequential replay (hypothesis).

Workloads are generated as operations on a model table (a dict key -> row) so every
change is valid where it happens: inserts of absent keys, updates that keep or move the
key (chains arise when a moved row moves again, swaps go through a temporary key),
deletes, and keys deleted then reinserted, NULL flips of a value column. The parallel
apply sees the changes shuffled, cut in batches, hash-partitioned by slot; its result
must equal the dict the sequential replay leaves.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
from hypothesis import given, settings, strategies as st

from headwater.spark.lastwrite import (
    BASE_SEQUENCE,
    last_writes,
    last_writes_batches,
    slot_writes,
    slot_writes_batches,
)

IMAGE = pa.struct([("id", pa.int64()), ("v", pa.string())])
CHANGES = pa.schema(
    [
        ("op", pa.string()),
        ("sequence", pa.int64()),
        ("slot", pa.string()),
        ("slot_before", pa.string()),
        ("image", IMAGE),
    ]
)

KEYS = 6
op_strategy = st.tuples(
    st.sampled_from(["insert", "update", "move", "swap", "delete", "null_flip"]),
    st.integers(0, KEYS - 1),
    st.integers(0, KEYS - 1),
    st.integers(0, 3),
)


def slot(key: int) -> str:
    return f'{{"id":{key}}}'


def generate(
    ops: list[tuple[str, int, int, int]], base: dict[int, str | None]
) -> tuple[list[dict[str, Any]], dict[int, str | None]]:
    """Changes (in log order) and the final state of a sequential replay of ``ops``."""
    state = dict(base)
    changes: list[dict[str, Any]] = []

    def emit(op: str, before: int | None, after: int | None, value: str | None = None) -> None:
        changes.append(
            {
                "op": op,
                "sequence": len(changes) * 7 + 3,  # increasing, not dense
                "slot_before": None if before is None else slot(before),
                "slot": None if after is None else slot(after),
                "image": None if after is None else {"id": after, "v": value},
            }
        )

    for kind, a, b, n in ops:
        value = f"v{len(changes)}" if n else None
        if kind == "insert" and a not in state:
            state[a] = value
            emit("insert", None, a, value)
        elif kind == "update" and a in state:
            state[a] = value
            emit("update", a, a, value)
        elif kind == "null_flip" and a in state:
            state[a] = None if state[a] is not None else "back"
            emit("update", a, a, state[a])
        elif kind == "move" and a in state and b not in state:
            state[b] = state.pop(a)
            emit("update", a, b, state[b])
        elif kind == "swap" and a in state and b in state and a != b:
            temp = KEYS + 100  # 1->t, 2->1, t->2 as an application swaps keys
            va, vb = state[a], state[b]
            emit("update", a, temp, va)
            emit("update", b, a, vb)
            emit("update", temp, b, va)
            state[a], state[b] = vb, va
        elif kind == "delete" and a in state:
            del state[a]
            emit("delete", a, None)
    return changes, state


def parallel_apply(
    changes: list[dict[str, Any]], base: dict[int, str | None], partitions: int, seed: int
) -> dict[int, str | None]:
    rows = list(changes)
    random.Random(seed).shuffle(rows)
    batches = [
        pa.RecordBatch.from_pylist(rows[i : i + 5], schema=CHANGES) for i in range(0, len(rows), 5)
    ]
    writes = pa.concat_tables(
        [pa.Table.from_batches([b]) for b in slot_writes_batches(batches)]
        or [slot_writes(pa.table({n: [] for n in CHANGES.names}, schema=CHANGES))]
    )
    base_rows = pa.table(
        {
            "slot": pa.array([slot(k) for k in base], pa.string()),
            "sequence": pa.array([BASE_SEQUENCE] * len(base), pa.int64()),
            "present": pa.array([True] * len(base), pa.bool_()),
            "image": pa.array([{"id": k, "v": v} for k, v in base.items()], IMAGE),
        }
    )
    writes = pa.concat_tables([base_rows.select(writes.column_names), writes])
    parts: list[list[pa.RecordBatch]] = [[] for _ in range(partitions)]
    for batch in writes.to_batches(max_chunksize=4):
        for i, s in enumerate(batch.column("slot").to_pylist()):
            parts[hash(s) % partitions].append(batch.slice(i, 1))
    out: dict[int, str | None] = {}
    for part in parts:
        for batch in last_writes_batches(part):
            for row in batch.column("image").to_pylist():
                assert row["id"] not in out, "a key left twice"
                out[row["id"]] = row["v"]
    return out


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(op_strategy, max_size=80),
    base_keys=st.sets(st.integers(0, KEYS - 1), max_size=KEYS),
    partitions=st.integers(1, 4),
    seed=st.integers(0, 2**32),
)
def test_parallel_apply_equals_a_sequential_replay(
    ops: list[tuple[str, int, int, int]], base_keys: set[int], partitions: int, seed: int
) -> None:
    base: dict[int, str | None] = {k: f"base{k}" for k in base_keys}
    changes, expected = generate(ops, base)
    assert parallel_apply(changes, base, partitions, seed) == expected


def test_chain_swap_and_reinsert_by_hand() -> None:
    changes, expected = generate(
        [
            ("insert", 1, 0, 1),
            ("insert", 2, 0, 1),
            ("move", 1, 3, 0),  # 1 -> 3
            ("move", 3, 4, 0),  # 3 -> 4: chain 1 -> 3 -> 4
            ("swap", 2, 4, 0),  # 2 <-> 4 through a temporary key
            ("delete", 2, 0, 0),
            ("insert", 2, 0, 1),  # deleted and reinserted
        ],
        {},
    )
    assert expected == {4: "v1", 2: "v8"}  # 4 holds the row inserted as 2 (swapped)
    assert parallel_apply(changes, {}, 3, 1) == expected


def test_last_writes_of_nothing_is_empty() -> None:
    empty = slot_writes(pa.table({n: [] for n in CHANGES.names}, schema=CHANGES))
    assert last_writes(empty).num_rows == 0
    assert list(last_writes_batches([])) == []


def test_a_remove_and_a_put_of_one_slot_at_one_sequence_leave_the_put() -> None:
    """An update whose before and after keys differ as decoded but are one typed value
    (spark/asof.py sorts by typed keys): the row stays, with the update's image."""
    writes = pa.table(
        {
            "k": pa.array([5, 5, 5], pa.int64()),
            "sequence": pa.array([9, 9, 3], pa.int64()),
            "image": pa.array(["new", None, "old"]),
            "present": pa.array([True, False, True]),
        }
    )
    for order in ([0, 1, 2], [1, 0, 2], [2, 1, 0]):
        left = last_writes(writes.take(order), ("k",))
        assert left.to_pylist() == [{"k": 5, "image": "new"}]


def test_composite_keys_compare_column_by_column_with_nulls() -> None:
    changes = pa.table(
        {
            "op": ["insert", "update", "update", "delete"],
            "sequence": pa.array([1, 2, 3, 4], pa.int64()),
            "a": ["x", "x", "y", None],
            "b": pa.array([1, 2, 2, None], pa.int64()),
            "v": ["i", "u", "w", None],
            "a0": [None, "x", "x", "y"],
            "b0": pa.array([None, 1, 2, 2], pa.int64()),
        }
    )
    writes = slot_writes(changes, (("a", "a0"), ("b", "b0")))
    # (x,1) put; (x,1)->(x,2) moves; (x,2)->(y,2) moves; (y,2) deleted
    assert writes.column("present").to_pylist().count(False) == 3
    assert last_writes(writes, ("a", "b")).to_pylist() == []
    before_delete = slot_writes(changes.slice(0, 3), (("a", "a0"), ("b", "b0")))
    assert last_writes(before_delete, ("a", "b")).to_pylist() == [{"a": "y", "b": 2, "v": "w"}]

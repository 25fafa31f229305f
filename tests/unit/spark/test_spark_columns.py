"""The Spark source's column builder against the reference change rows.

``read_slice`` builds its Arrow columns a block of rows at a time from the decoder's value
tuples (partitions.py ``_Columns``); the reference is one :class:`ChangeRow` per row
(``block_changes``) turned into values by ``change_row_values``. Both must give the same
rows for any block: inserts, updates (with and without a changed key, MINIMAL images
missing key columns), deletes, DDL, no key, an empty key, any sub-range.
"""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings, strategies as st

from headwater.changes import ChangeBlock, block_changes
from headwater.changes.schema import change_arrow_schema, change_row_values
from headwater.position import Position
from headwater.spark import partitions
from headwater.spark.partitions import _Columns

NAMES = ("id", "k2", "a", "b", "c")

values = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**64 - 1),
    st.text(max_size=8),
    # Undecodable bytes kept as surrogate escapes: orjson refuses them (the slow path).
    st.sampled_from(("\udcff", "x\udc80y")),
    st.decimals(allow_nan=False, allow_infinity=False, places=2, max_value=10**6),
    st.binary(max_size=4),
    st.floats(allow_nan=False, allow_infinity=False),
    st.datetimes(min_value=dt.datetime(1000, 1, 1), max_value=dt.datetime(9999, 1, 1)),
)


@st.composite
def blocks(draw: Any) -> tuple[ChangeBlock, int, int]:
    op = draw(st.sampled_from(("insert", "update", "delete", "ddl")))
    position = Position(3, 2, 1000, draw(st.integers(0, 50)))
    first = draw(st.integers(0, 100))
    if op == "ddl":
        block = ChangeBlock("db", "", "ddl", position, first, [], [], [], None, "ALTER TABLE t")
        return block, 0, 1
    key_names = draw(
        st.one_of(
            st.none(),
            st.just(()),
            st.lists(st.sampled_from(NAMES), min_size=1, max_size=2, unique=True).map(tuple),
        )
    )

    def image_names() -> list[str]:
        # A FULL image has every column; a MINIMAL one may lack key columns.
        return draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=5, unique=True))

    def image(names: list[str]) -> tuple[Any, ...]:
        return tuple(draw(values) for _ in names)

    before_names = image_names() if op != "insert" else []
    after_names = image_names() if op != "delete" else []
    count = draw(st.integers(1, 6))
    rows: list[Any] = []
    for _ in range(count):
        if op == "update":
            before = image(before_names)
            # Often the same key before and after (an ordinary update).
            after = list(image(after_names))
            if draw(st.booleans()):
                for i, name in enumerate(after_names):
                    if name in before_names:
                        after[i] = before[before_names.index(name)]
            rows.append((before, tuple(after)))
        else:
            rows.append(image(before_names or after_names))
    block = ChangeBlock("db", "t", op, position, first, rows, before_names, after_names, key_names)
    lo = draw(st.integers(0, count - 1))
    hi = draw(st.integers(lo + 1, count))
    return block, lo, hi


@settings(max_examples=300, deadline=None)
@given(blocks(), st.sampled_from(("", "0-1-7")))
def test_columns_of_a_block_equal_the_change_rows(
    case: tuple[ChangeBlock, int, int], gtid: str
) -> None:
    block, lo, hi = case
    record = SimpleNamespace(
        seq=77,
        gtid=gtid,
        position=Position(3, 2, 1000, 0),
        ts_us=1_700_000_000_123_456,
        schema_version=4,
    )
    built = _Columns()
    built.add_block(block, record, "src", lo, hi)
    batch = built.batch(change_arrow_schema())
    want = [change_row_values(c) for c in block_changes(record, block, "src")[lo:hi]]
    have = [tuple(row.values()) for row in batch.to_pylist()]
    assert built.rows == hi - lo == len(have)
    assert have == [
        tuple(v.replace(tzinfo=dt.UTC) if isinstance(v, dt.datetime) else v for v in row)
        for row in want
    ]


def test_an_update_that_changed_the_key_carries_the_old_key() -> None:
    block = ChangeBlock(
        "db", "t", "update", Position(1, 1, 4, 2), 0,
        [((1, "x"), (2, "x")), ((3, "y"), (3, "z"))],
        ["id", "a"], ["id", "a"], ("id",),
    )  # fmt: skip
    record = SimpleNamespace(
        seq=1, gtid="", position=Position(1, 1, 4, 0), ts_us=5, schema_version=1
    )
    built = _Columns()
    built.add_block(block, record, "src", 0, 2)
    rows = built.batch(change_arrow_schema()).to_pylist()
    assert [(r["key"], r["before_key"], r["txn_id"], r["sequence"]) for r in rows] == [
        ('{"id":2}', '{"id":1}', "1:4", 1 << 24),
        ('{"id":3}', None, "1:4", (1 << 24) + 1),
    ]


@settings(max_examples=60, deadline=None)
@given(st.lists(blocks(), min_size=2, max_size=5), st.sampled_from(("", "0-1-7")))
def test_a_batch_of_several_blocks_equals_their_change_rows(
    cases: list[tuple[ChangeBlock, int, int]], gtid: str
) -> None:
    # Columns with one value per block are runs expanded at batch(): each row must get
    # its own block's values and sequence.
    built = _Columns()
    want = []
    for seq, (block, lo, hi) in enumerate(cases, start=5):
        record = SimpleNamespace(
            seq=seq, gtid=gtid, position=block.position, ts_us=seq * 1000, schema_version=seq
        )
        built.add_block(block, record, "src", lo, hi)
        want += [change_row_values(c) for c in block_changes(record, block, "src")[lo:hi]]
    have = [tuple(row.values()) for row in built.batch(change_arrow_schema()).to_pylist()]
    assert built.rows == len(want) == len(have)
    assert have == [
        tuple(v.replace(tzinfo=dt.UTC) if isinstance(v, dt.datetime) else v for v in row)
        for row in want
    ]


@settings(max_examples=50, deadline=None)
@given(st.lists(blocks(), min_size=1, max_size=3))
def test_without_the_c_extension_the_batch_is_the_same(
    cases: list[tuple[ChangeBlock, int, int]],
) -> None:
    # Where headwater._native._imagejson is not built, images are rendered in Python into
    # lists that pyarrow converts: the same record batch.
    def build() -> Any:
        built = _Columns()
        for seq, (block, lo, hi) in enumerate(cases, start=5):
            record = SimpleNamespace(
                seq=seq, gtid="", position=block.position, ts_us=seq, schema_version=1
            )
            built.add_block(block, record, "src", lo, hi)
        return built.batch(change_arrow_schema())

    native = (partitions._render_block, partitions._JsonBuilder)
    with_c = build()
    partitions._render_block, partitions._JsonBuilder = None, None  # type: ignore[assignment]
    try:
        without = build()
    finally:
        partitions._render_block, partitions._JsonBuilder = native  # type: ignore[assignment]
    assert native[0] is not None
    assert with_c.num_rows == sum(hi - lo for _b, lo, hi in cases)
    assert with_c.equals(without)

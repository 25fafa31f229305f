"""Chunk planning over in-memory key spaces: even ranges for dense integer keys, seek
boundaries for composite, string and skewed keys, and chunks of even size either way."""

from __future__ import annotations

import bisect
import itertools
from typing import Any

import pytest
from hypothesis import given, strategies as st

from headwater.errors import ConfigError
from headwater.schema.model import Column, TableDef
from headwater.snapshot.chunking import SortedKeys, plan_boundaries, range_predicate
from headwater.snapshot.keys import KeyColumn, KeyOrder, choose_key, decode_key, encode_key


def sizes(keys: list[tuple[Any, ...]], bounds: list[tuple[Any, ...]]) -> list[int]:
    edges = [0, *(bisect.bisect_left(keys, b) for b in bounds), len(keys)]
    return [b - a for a, b in itertools.pairwise(edges)]


def test_dense_integer_keys_get_even_ranges() -> None:
    keys = [(i,) for i in range(1, 10_001)]
    method, bounds = plan_boundaries(SortedKeys(keys), 1000)
    assert method == "even"
    assert bounds == [(1 + 1000 * i,) for i in range(1, 10)]
    assert sizes(keys, bounds) == [1000] * 10


def test_skewed_integer_keys_get_seek_boundaries_of_equal_size() -> None:
    keys = sorted({(i,) for i in range(5000)} | {(10**12 + i * 7919,) for i in range(5000)})
    method, bounds = plan_boundaries(SortedKeys(keys), 1000)
    assert method == "seek"
    assert sizes(keys, bounds) == [1000] * 10


def test_composite_keys_are_chunked_by_seeking() -> None:
    keys = sorted((a, f"b{b:03d}") for a in range(50) for b in range(30))
    method, bounds = plan_boundaries(SortedKeys(keys), 200)
    assert method == "seek"
    assert set(sizes(keys, bounds)[:-1]) == {200}
    assert sizes(keys, bounds)[-1] == 1500 - 7 * 200


def test_string_keys_are_chunked_by_seeking() -> None:
    keys = sorted((f"k{i:05d}",) for i in range(999))
    method, bounds = plan_boundaries(SortedKeys(keys), 100)
    assert method == "seek"
    assert sizes(keys, bounds) == [100] * 9 + [99]


def test_a_small_or_empty_table_is_one_chunk() -> None:
    assert plan_boundaries(SortedKeys([(1,), (2,)]), 10) == ("even", [])
    assert plan_boundaries(SortedKeys([]), 10) == ("seek", [])


@given(
    st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=400, unique=True),
    st.integers(1, 60),
)
def test_seek_chunks_hold_exactly_chunk_rows_except_the_last(values: list[int], n: int) -> None:
    keys = [(v,) for v in sorted(values)]
    method, bounds = plan_boundaries(SortedKeys(keys), n)
    got = sizes(keys, bounds)
    assert sum(got) == len(keys)
    if method == "seek":
        assert all(s == n for s in got[:-1]) and 0 < got[-1] <= n
    else:  # dense: ranges of equal width, so sizes differ by the holes only
        assert max(got) <= n + 1 or len(got) == 1


def test_range_predicate_expands_composite_bounds() -> None:
    sql, params = range_predicate(["a", "b"], (1, "x"), (2, "y"))
    assert (
        sql
        == "((`a` > %s) OR (`a` = %s AND `b` >= %s)) AND ((`a` < %s) OR (`a` = %s AND `b` < %s))"
    )
    assert params == [1, 1, "x", 2, 2, "y"]
    assert range_predicate(["id"], None, None) == ("TRUE", [])


def test_keys_round_trip_through_the_state_file_encoding() -> None:
    import datetime as dt
    from decimal import Decimal

    key = (1, "a", b"\x00\xff", Decimal("1.50"), dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3))
    assert decode_key(encode_key(key)) == key


def test_integer_keys_are_classified_in_python() -> None:
    order = KeyOrder((KeyColumn("a", "int"), KeyColumn("b", "bigint")))
    assert order.python_exact
    got = order.classify([(0, 0), (1, 5), (1, 6), (9, 9)], [(1, 5), (2, 0)])
    assert got == [0, 1, 1, 2]


def test_string_keys_need_the_server_to_compare() -> None:
    order = KeyOrder((KeyColumn("code", "varchar", "utf8mb4", "utf8mb4_general_ci"),))
    assert not order.python_exact
    with pytest.raises(ValueError, match="source connection"):
        order.classify([("a",)], [("b",)])


def _table(pk: tuple[str, ...], uniques: tuple[tuple[str, tuple[str, ...]], ...] = (),
           nullable: bool = False) -> TableDef:  # fmt: skip
    cols = (Column("id", "int", "int", nullable=nullable), Column("u", "int", "int"))
    return TableDef("d", "t", cols, pk, uniques)


def test_the_chunk_key_is_the_primary_key_or_a_not_null_unique_key() -> None:
    assert choose_key(_table(("id",))) == ("id",)
    assert choose_key(_table((), (("uk", ("id",)),))) == ("id",)
    with pytest.raises(ConfigError, match="no primary key"):
        choose_key(_table((), (("uk", ("id",)),), nullable=True))
    with pytest.raises(ConfigError, match="neither the primary key nor a unique key"):
        choose_key(_table(("id",)), ["u"])

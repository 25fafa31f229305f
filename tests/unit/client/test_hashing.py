"""The SDK's fast shard hash against the documented one (``stable_hash``)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from types import SimpleNamespace

from hypothesis import given, strategies as st

from headwater.changes import ChangeBlock, ChangeRow, block_changes
from headwater.client.hashing import ShardHasher
from headwater.position import Position
from headwater.server.sharding import key_values, stable_hash

VALUES = st.one_of(
    st.integers(min_value=-(1 << 64), max_value=1 << 64),
    st.text(),
    st.binary(max_size=8),
    st.none(),
    st.booleans(),
    st.decimals(allow_nan=False, allow_infinity=False, places=2),
    st.dates(),
    st.floats(allow_nan=False),
    st.just({"base64": "AP8="}),  # a JSON-format binary key
    st.just("\udcff"),  # undecodable text (surrogateescape)
)
NAMES = st.sampled_from(["shop", "ümlaut", "a.b", ""])


@given(db=NAMES, table=NAMES, key=st.lists(VALUES, max_size=3), custom=st.booleans())
def test_shard_hasher_equals_stable_hash(
    db: str, table: str, key: list[object], custom: bool
) -> None:
    columns = [f"c{i}" for i in range(len(key))]
    image = dict(zip(columns, key, strict=True))
    row = ChangeRow(
        "s", db, table, "insert", 0, Position(0, 1, 4), "", "", 1,
        image or None, None, image, 1,
    )  # fmt: skip
    keys = {f"{db}.{table}": columns} if custom else {}
    hasher = ShardHasher(keys)
    expected = stable_hash(db, table, _json_decoded(key_values(row, keys.get(f"{db}.{table}"))))
    assert hasher(row) == expected
    assert hasher(row) == expected  # from the per-table cache


def _json_decoded(values: list[object]) -> list[object]:
    import base64

    return [
        base64.b64decode(v["base64"]) if isinstance(v, dict) else v  # type: ignore[index]
        for v in values
    ]


def test_known_values() -> None:
    row = ChangeRow(
        "s", "shop", "orders", "update", 0, Position(0, 1, 4), "", "", 1,
        {"id": 7, "day": dt.date(2024, 2, 29), "p": Decimal("1.50")}, None, None, 1,
    )  # fmt: skip
    assert ShardHasher({})(row) == stable_hash(
        "shop", "orders", [7, dt.date(2024, 2, 29), Decimal("1.50")]
    )


_RECORD = SimpleNamespace(
    gtid="0-1-5", position=Position(0, 1, 4), ts_us=0, schema_version=1, seq=3
)


@given(
    op=st.sampled_from(["insert", "update", "delete"]),
    names=st.lists(st.sampled_from(["id", "k", "v", "w"]), min_size=1, max_size=4),
    key=st.one_of(st.none(), st.lists(st.sampled_from(["id", "k", "v", "x"]), max_size=3)),
    custom=st.one_of(st.none(), st.lists(st.sampled_from(["id", "w", "x"]), max_size=2)),
    data=st.data(),
)
def test_block_hashes_equal_the_per_row_hash(
    op: str,
    names: list[str],
    key: list[str] | None,
    custom: list[str] | None,
    data: st.DataObject,
) -> None:
    # names may repeat and key columns may be missing from the image (MINIMAL images):
    # the block path must read what the row's image dicts hold
    def image() -> tuple[object, ...]:
        return tuple(data.draw(st.lists(VALUES, min_size=len(names), max_size=len(names))))

    n = data.draw(st.integers(min_value=0, max_value=4))
    rows: list[object] = [(image(), image()) if op == "update" else image() for _ in range(n)]
    block = ChangeBlock(
        "shop", "orders", op, Position(0, 1, 4), 0, rows, list(names), list(names),
        None if key is None else tuple(key),
    )  # fmt: skip
    hasher = ShardHasher({} if custom is None else {"shop.orders": custom})
    changes = block_changes(_RECORD, block, "s")
    assert hasher.block(block) == [hasher(c) for c in changes]
    columns = None if custom is None else tuple(custom)
    assert hasher.block(block) == [
        stable_hash("shop", "orders", _json_decoded(key_values(c, columns))) for c in changes
    ]


def test_block_hash_of_an_int_key() -> None:
    block = ChangeBlock(
        "shop", "orders", "delete", Position(0, 1, 4), 0, [(7, "a"), (-12, "b")],
        ["id", "note"], [], ("id",),
    )  # fmt: skip
    assert ShardHasher({}).block(block) == [
        stable_hash("shop", "orders", [7]),
        stable_hash("shop", "orders", [-12]),
    ]


@given(
    key=st.one_of(
        st.lists(st.integers(min_value=-(1 << 70), max_value=1 << 70), min_size=1, max_size=40),
        st.lists(st.text(max_size=70) | st.just("\udcff"), min_size=1, max_size=40),
        st.lists(st.integers() | st.text(max_size=3) | st.none(), min_size=1, max_size=8),
    ),
    op=st.sampled_from(["insert", "update", "delete"]),
)
def test_block_hashes_of_a_one_column_key_of_one_type_equal_stable_hash(
    key: list[object], op: str
) -> None:
    """The column-at-a-time path (all ints, all strs, texts short or long) and its
    fallback (mixed types) give the documented hash of each row."""
    images = [(k, "v") for k in key]
    rows: list[object] = [(("x", "y"), image) for image in images] if op == "update" else images
    block = ChangeBlock(
        "shop", "orders", op, Position(0, 1, 4), 0, rows, ["id", "v"], ["id", "v"], ("id",)
    )
    expected = [stable_hash("shop", "orders", [k]) for k in key]
    hasher = ShardHasher({})
    assert hasher.block(block) == expected
    assert hasher.block(block) == expected  # the table's cached CRC states

"""The compiled one-column shard hash (``_ingest.shard_column``) against the Python path
of :class:`ShardHasher` and the documented ``stable_hash``."""

from __future__ import annotations

import struct
from decimal import Decimal

from crc32c import crc32c
from hypothesis import given, strategies as st

from headwater._native._ingest import shard_column
from headwater.changes import ChangeBlock
from headwater.client.decoded import hash_values
from headwater.client.hashing import ShardHasher
from headwater.position import Position
from headwater.server.sharding import stable_hash

_LEN = struct.Struct("<I")

# every kind a key value comes in; the C path takes int, str, bytes and None and leaves
# the others (and ints beyond 64 bits) to Python
KEYS = st.one_of(
    st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1),
    st.sampled_from([0, -1, 1 << 63, -(1 << 63), (1 << 63) - 1, -(1 << 63) - 1, 10**30]),
    st.text(max_size=80),  # non-ASCII too; texts shorter and longer than the stack buffer
    st.sampled_from(["\udcff", "ümlaut", "日本", "a\x00b", ""]),
    st.binary(max_size=80),
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.decimals(allow_nan=False, allow_infinity=False, places=2),
    st.just({"base64": "AP8="}),
)


def _prefix(database: str, table: str) -> int:
    db, tb = database.encode(), table.encode()
    return int(crc32c(_LEN.pack(len(db)) + db + _LEN.pack(len(tb)) + tb))


def test_the_extension_has_shard_column() -> None:
    assert ShardHasher({})._native is shard_column


@given(
    kind=st.sampled_from(["int", "str", "bytes", "mixed"]),
    data=st.data(),
    op=st.sampled_from(["insert", "update", "delete"]),
)
def test_native_block_equals_python_block(kind: str, data: st.DataObject, op: str) -> None:
    values = {
        "int": st.integers(min_value=-(1 << 64), max_value=1 << 64),
        "str": st.text(max_size=80) | st.just("\udcff"),
        "bytes": st.binary(max_size=80),
        "mixed": KEYS,
    }[kind]
    key = data.draw(st.lists(values, max_size=30))
    images: list[object] = [("v", k) for k in key]
    rows: list[object] = [(("x", "y"), image) for image in images] if op == "update" else images
    block = ChangeBlock(
        "shop", "ümlaut", op, Position(0, 1, 4), 0, rows, ["v", "id"], ["v", "id"], ("id",)
    )
    native = ShardHasher({}).block(block)
    assert native == ShardHasher({}, native=False).block(block)
    assert native == [stable_hash("shop", "ümlaut", hash_values([k])) for k in key]


@given(
    key=st.lists(
        st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
        | st.text(max_size=80)
        | st.binary(max_size=80)
        | st.none(),
        max_size=30,
    )
)
def test_shard_column_of_values_is_stable_hash(key: list[object]) -> None:
    prefix = _prefix("shop", "orders")
    expected = [stable_hash("shop", "orders", [k]) for k in key]
    assert shard_column(prefix, key) == expected
    assert shard_column(prefix, [(k,) for k in key], 0) == expected
    assert shard_column(prefix, [["a", k] for k in key], 1) == expected


def test_shard_column_known_values_and_what_it_leaves_to_python() -> None:
    prefix = _prefix("shop", "orders")
    column = shard_column
    assert column(prefix, []) == []
    assert column(prefix, [7, -12, "ü", b"\xff", None]) == [
        stable_hash("shop", "orders", [v]) for v in [7, -12, "ü", b"\xff", None]
    ]
    # the row-less hash: with no value part the prefix itself
    assert stable_hash("shop", "orders", []) == prefix
    for other in [True, 1.5, Decimal("1.50"), 1 << 64, -(1 << 63) - 1, bytearray(b"a"), {}]:
        assert column(prefix, [1, other]) is None
    assert column(prefix, [object()], 0) is None  # a row that is not a tuple or list

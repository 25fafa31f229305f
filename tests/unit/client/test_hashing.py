"""The SDK's fast shard hash against the documented one (``stable_hash``)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from hypothesis import given, strategies as st

from headwater.changes import ChangeRow
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

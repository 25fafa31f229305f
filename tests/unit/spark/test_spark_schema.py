"""The change-row schema: Arrow and Spark agree, and a ChangeRow fills it (no Spark run)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

from headwater.changes import ChangeRow
from headwater.changes.schema import (
    CHANGE_COLUMNS,
    change_arrow_schema,
    change_row_values,
    change_schema,
)
from headwater.position import Position


def test_arrow_and_spark_schemas_have_the_same_columns_in_order() -> None:
    names = [n for n, _ in CHANGE_COLUMNS]
    assert change_arrow_schema().names == names
    assert change_schema().fieldNames() == names


def test_change_row_values_fill_the_columns() -> None:
    change = ChangeRow(
        "src",
        "shop",
        "orders",
        "update",
        1_700_000_000_123_456,
        Position(1, 7, 4096, 3),
        "0-1-9",
        "0-1-9",
        42 << 24 | 5,
        {"id": 7},
        {"id": 7, "amt": Decimal("1.50")},
        {"id": 7, "amt": Decimal("2.00"), "blob": b"\x00\xff", "t": dt.timedelta(hours=-1)},
        3,
    )
    values = dict(zip([n for n, _ in CHANGE_COLUMNS], change_row_values(change), strict=True))
    assert values["commit_ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.UTC)
    assert (values["change_id"], values["file_num"], values["offset"], values["event_index"]) == (
        1,
        7,
        4096,
        3,
    )
    assert values["sequence"] == 42 << 24 | 5
    assert json.loads(values["key"]) == {"id": 7}
    assert json.loads(values["before"]) == {"id": 7, "amt": "1.50"}
    assert json.loads(values["after"]) == {
        "id": 7,
        "amt": "2.00",
        "blob": {"base64": "AP8="},
        "t": "-01:00:00",
    }
    assert values["sql"] is None


def test_undecodable_text_is_kept_as_base64() -> None:
    bad = b"\xff\xfe".decode("utf-8", "surrogateescape")
    change = ChangeRow(
        "s", "d", "t", "insert", 0, Position(0, 1, 4), "", "1:4", 1, None, None, {"name": bad}, 0
    )
    after = dict(zip([n for n, _ in CHANGE_COLUMNS], change_row_values(change), strict=True))[
        "after"
    ]
    assert json.loads(after) == {"name": {"undecodable_text_base64": "//4="}}

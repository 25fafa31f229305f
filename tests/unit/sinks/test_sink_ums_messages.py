"""UMS encoding: namespace, stable 64-bit id from the sequence, timestamp, op, payload."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from headwater.sinks.ums.messages import encode_ums, ums_message, ums_messages


def change(seq: int, op: str, table: str = "orders", **images: Any) -> dict[str, Any]:
    return {
        "source": "shop_src",
        "database": "shop",
        "table": table,
        "op": op,
        "ts_us": 1_714_564_800_000_001,
        "txn_id": "0-1-100",
        "sequence": seq,
        "before": images.get("before"),
        "after": images.get("after"),
    }


def test_message_fields_and_tuples() -> None:
    seq = (43 << 24) | 2
    message = ums_message(
        [
            change(seq, "insert", after={"id": 1, "price": "9.90", "ok": True}),
            change(seq + 1, "delete", before=json.dumps({"id": 1, "price": "9.90", "ok": True})),
        ]
    )
    assert message["protocol"] == {"type": "data_increment_data", "version": "1.3"}
    assert message["schema"]["namespace"] == "shop_src.shop.orders"
    assert [(f["name"], f["type"]) for f in message["schema"]["fields"]] == [
        ("ums_id_", "long"),
        ("ums_ts_", "datetime"),
        ("ums_op_", "string"),
        ("ums_uid_", "string"),
        ("id", "long"),
        ("price", "string"),
        ("ok", "boolean"),
    ]
    assert [p["tuple"] for p in message["payload"]] == [
        [seq, "2024-05-01 12:00:00.000001", "i", "0-1-100", 1, "9.90", True],
        [seq + 1, "2024-05-01 12:00:00.000001", "d", "0-1-100", 1, "9.90", True],
    ]
    assert orjson.loads(encode_ums(message)) == message


def test_minimal_images_leave_nulls_for_absent_columns() -> None:
    message = ums_message(
        [change(1, "insert", after={"id": 1}), change(2, "update", after={"id": 1, "n": 2.5})]
    )
    assert [p["tuple"][4:] for p in message["payload"]] == [[1, None], [1, 2.5]]
    assert message["schema"]["fields"][-1] == {"name": "n", "type": "double", "nullable": True}


def test_one_message_holds_one_namespace_and_no_ddl() -> None:
    with pytest.raises(ValueError, match="one namespace"):
        ums_message([change(1, "insert", after={}), change(2, "insert", "items", after={})])
    with pytest.raises(ValueError, match="no UMS form for a ddl"):
        ums_message([change(1, "ddl")])


def test_messages_split_by_namespace_runs_and_size_keeping_order() -> None:
    changes = [
        change(1, "insert", after={"id": 1}),
        change(2, "insert", after={"id": 2}),
        change(3, "ddl"),
        change(4, "insert", "items", after={"id": 9}),
        change(5, "insert", after={"id": 3}),
    ]
    out = [(ns, [p["tuple"][0] for p in orjson.loads(v)["payload"]]) for ns, v in
           ums_messages(changes, max_rows=2)]  # fmt: skip
    assert out == [
        ("shop_src.shop.orders", [1, 2]),
        ("shop_src.shop.items", [4]),
        ("shop_src.shop.orders", [5]),
    ]

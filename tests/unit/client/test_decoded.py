"""Server-decoded rows back into ChangeRows: each row is encoded by the server's own
encoders (``headwater.server.encoding``) and read back by ``headwater.client.decoded``;
protobuf must give the typed values, JSON the JSON rendering, and all three the same
shard hash (``headwater.server.sharding``)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import orjson
import pytest

from headwater.binlog.dump import json_default
from headwater.changes import ChangeRow
from headwater.client import ConsumerOptions
from headwater.client.decoded import answer_of, hash_values, row_of
from headwater.errors import ConfigError
from headwater.position import Position
from headwater.server import pb
from headwater.server.encoding import JsonEncoder, ProtobufEncoder
from headwater.server.sharding import key_values, stable_hash

TYPED: dict[str, Any] = {
    "id": 7,
    "big": (1 << 64) - 1,  # BIGINT UNSIGNED max: the protobuf uint kind
    "neg": -3,
    "price": Decimal("-12.50"),
    "raw": b"\x00\xff\x10",
    "name": "zoë",
    "f": 0.1,
    "day": dt.date(2024, 2, 29),
    "at": dt.datetime(2026, 1, 2, 3, 4, 5, 123000),
    "ts": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
    "dur": dt.timedelta(hours=-838),
    "tags": ("a", "b"),
    "none": None,
}


def _change(key: dict[str, Any] | None, after: dict[str, Any] | None, op: str = "insert"):
    return ChangeRow(
        "src", "shop", "orders", op, 1_700_000_000_000_000, Position(0, 3, 1234, 2),
        "0-1-9", "0-1-9", (42 << 24) | 3, key, None, after, 5, None,
    )  # fmt: skip


def _proto(change: ChangeRow) -> ChangeRow:
    item = ProtobufEncoder().row(change)
    envelope = ProtobufEncoder().envelope(
        "t", [item], False, {"checkpoint": "c", "latest_seq": 1, "more": False,
                             "next": {"seq": 43, "row": 0}},
    )  # fmt: skip
    answer = answer_of(pb.FetchResponse.FromString(b"".join(envelope)))
    assert (answer.checkpoint, answer.next_seq, answer.next_row) == ("c", 43, 0)
    (row,) = answer.rows
    return row


def test_protobuf_rows_come_back_with_typed_values() -> None:
    change = _change({"id": 7, "raw": b"\x00\xff\x10"}, TYPED)
    row = _proto(change)
    assert (row.source, row.database, row.table, row.op) == ("src", "shop", "orders", "insert")
    assert (row.sequence, row.position, row.gtid, row.ts_us) == (
        change.sequence, change.position, change.gtid, change.ts_us,
    )  # fmt: skip
    assert row.before is None and row.sql is None
    expected = {**TYPED, "dur": "-838:00:00", "tags": ["a", "b"]}  # TIME as text, SET as list
    assert row.after == expected
    assert type(row.after["price"]) is Decimal and type(row.after["raw"]) is bytes
    assert row.after["ts"].tzinfo is not None and row.after["at"].tzinfo is None


def test_json_rows_are_the_json_rendering() -> None:
    change = _change({"id": 7}, TYPED, op="update")
    doc = orjson.loads(JsonEncoder().row(change))
    row = row_of(doc)
    assert row.after == orjson.loads(orjson.dumps(TYPED, default=json_default))
    assert row.after["raw"] == {"base64": "AP8Q"}
    assert (row.op, row.sequence, row.position) == ("update", change.sequence, change.position)


@pytest.mark.parametrize(
    "key",
    [{"id": 7}, {"raw": b"\x00\xff"}, {"price": Decimal("10.50"), "day": dt.date(2020, 1, 1)},
     {"at": dt.datetime(2026, 1, 2, 3, 4, 5, 123000)}, None],
)  # fmt: skip
def test_every_decoding_hashes_a_row_to_the_same_shard(key: dict[str, Any] | None) -> None:
    change = _change(key, TYPED)
    proto = _proto(change)
    json_row = row_of(orjson.loads(JsonEncoder().row(change)))

    def h(row: ChangeRow) -> int:
        return stable_hash(row.database, row.table, hash_values(key_values(row, None)))

    assert h(change) == h(proto) == h(json_row)


def test_decode_option_is_checked() -> None:
    with pytest.raises(ConfigError, match="client, json, protobuf"):
        ConsumerOptions(task="t", group="g", readers=("http://x",), decode="server")

"""Pure parts of replay: the state rows a sink receives, and the past-the-end check."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest

from headwater.changes.schema import change_arrow_schema
from headwater.errors import ConfigError
from headwater.position import Position
from headwater.replay.sinks import state_change_rows
from headwater.spark.asof import _refuse_past_end
from headwater.store import AtSeq, AtTime
from headwater.store.record import Record


def test_state_rows_are_read_changes_with_images_rendered_as_the_log_renders_them() -> None:
    rows = [
        {"id": 2, "d": Decimal("1.50"), "b": b"\x00\xff", "day": dt.date(2024, 2, 29)},
        {"id": 1, "d": None, "b": None, "day": None},
    ]
    image_type = pa.struct(
        [("id", pa.int32()), ("d", pa.decimal128(5, 2)), ("b", pa.binary()), ("day", pa.date32())]
    )
    batch = pa.RecordBatch.from_pydict({"image": pa.array(rows, type=image_type)})
    at = Position(0, 3, 1234, 2**31 - 1)
    out = list(
        state_change_rows(
            [batch, batch], source="replay latest", database="db", table="t", key=("id",), at=at
        )
    )
    assert all(b.schema == change_arrow_schema() for b in out)
    got = pa.Table.from_batches(out).to_pylist()
    assert [r["op"] for r in got] == ["read"] * 4
    assert [r["sequence"] for r in got] == [1, 2, 3, 4]  # unique, increasing (no TaskContext)
    assert [orjson.loads(r["key"]) for r in got] == [{"id": 2}, {"id": 1}] * 2
    assert orjson.loads(got[0]["after"]) == {
        "id": 2,
        "d": "1.50",
        "b": {"base64": "AP8="},
        "day": "2024-02-29",
    }
    assert orjson.loads(got[1]["after"]) == {"id": 1, "d": None, "b": None, "day": None}
    assert {(r["file_num"], r["offset"], r["event_index"]) for r in got} == {(3, 1234, 2**31 - 1)}
    assert {r["source"] for r in got} == {"replay latest"}
    assert all(r["before"] is None for r in got)


def _last(gtid: str = "0-1-50", ts_us: int = 1_000, file_num: int = 2, offset: int = 400) -> Any:
    return Record(Position(0, file_num, offset, 0), b"", ts_us=ts_us, gtid=gtid)


@pytest.mark.parametrize(
    "ending",
    [
        AtSeq(11),
        AtTime(1_001),
        Position(0, 2, 500, 0),
        Position(0, 3, 4, 0),
    ],
)
def test_points_past_the_last_transaction_are_refused(ending: Any) -> None:
    with pytest.raises(ConfigError, match=r"past the log's end") as err:
        _refuse_past_end("x", ending, _last(), 10)
    assert err.value.field == "as_of"


def test_gtid_sets_past_the_last_gtid_of_its_domain_are_refused() -> None:
    from headwater.position import parse_gtid_set

    with pytest.raises(ConfigError, match=r"past the log's end"):
        _refuse_past_end("g", parse_gtid_set("0-1-51"), _last(), 10)
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    with pytest.raises(ConfigError, match=r"past the log's end"):
        _refuse_past_end("g", parse_gtid_set(f"{uuid}:1-8"), _last(gtid=f"{uuid}:7"), 10)


@pytest.mark.parametrize(
    "ending",
    [AtSeq(10), AtTime(1_000), Position(0, 2, 400, 0), Position(0, 1, 9999, 0)],
)
def test_points_at_or_inside_the_last_transaction_pass(ending: Any) -> None:
    _refuse_past_end("x", ending, _last(), 10)


def test_gtid_sets_inside_the_log_pass() -> None:
    from headwater.position import parse_gtid_set

    _refuse_past_end("g", parse_gtid_set("0-1-50"), _last(), 10)
    _refuse_past_end("g", parse_gtid_set("0-1-50,1-1-9"), _last(), 10)  # unknown domain
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    _refuse_past_end("g", parse_gtid_set(f"{uuid}:1-7"), _last(gtid=f"{uuid}:7"), 10)

"""The protobuf schema: headwater.proto and the runtime descriptor agree, every column value
type has its field, and the hand-assembled FetchResponse parses as the runtime's own."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from headwater.changes import ChangeRow
from headwater.position import Position
from headwater.server import pb
from headwater.server.encoding import ProtobufEncoder, proto_value
from headwater.store import Record

PROTO = Path(pb.__file__).with_name("headwater.proto")


def _normalized(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        line = re.sub(r"//.*", "", line).strip()
        if line:
            lines.append(re.sub(r"\s+", " ", line))
    return lines


def test_proto_file_matches_the_runtime_descriptor() -> None:
    assert _normalized(PROTO.read_text()) == _normalized(pb.render_proto())


def test_every_message_builds_from_the_descriptor() -> None:
    names = {m.name for m in pb.file_descriptor().message_type}
    assert names == {name for name, _fields in pb.MESSAGES}
    assert pb.FetchResponse.DESCRIPTOR.full_name == "headwater.v1.FetchResponse"


@pytest.mark.parametrize(
    ("value", "kind", "expected"),
    [
        (None, "null", True),
        (-5, "int", -5),
        ((1 << 64) - 1, "uint", (1 << 64) - 1),
        (1.5, "float", 1.5),
        ("héllo", "text", "héllo"),
        (b"\x00\xff", "binary", b"\x00\xff"),
        (Decimal("-12.3400"), "decimal", "-12.3400"),
        (dt.date(2024, 2, 29), "date", "2024-02-29"),
        (dt.datetime(2024, 2, 29, 13, 1, 2, 500000), "datetime", "2024-02-29T13:01:02.500000"),
        (
            dt.datetime(2022, 4, 20, 22, 18, 4, tzinfo=dt.UTC),
            "timestamp",
            "2022-04-20T22:18:04+00:00",
        ),
        (-dt.timedelta(hours=838, minutes=59, seconds=59), "time", "-838:59:59"),
        ("0000-00-00", "text", "0000-00-00"),
        (b"\xff".decode("utf-8", "surrogateescape"), "undecodable_text", b"\xff"),
    ],
)
def test_each_value_type_has_its_field(value: Any, kind: str, expected: Any) -> None:
    msg = pb.Value()
    proto_value(value, msg)
    parsed = pb.Value.FromString(msg.SerializeToString())
    assert parsed.WhichOneof("kind") == kind
    assert getattr(parsed, kind) == expected


def test_set_and_vector_values() -> None:
    s, v = pb.Value(), pb.Value()
    proto_value(("a", "c"), s)
    proto_value((1.0, 2.5), v)
    assert list(s.set.values) == ["a", "c"] and list(v.vector.values) == [1.0, 2.5]


def test_assembled_response_parses_like_the_runtime_message() -> None:
    enc = ProtobufEncoder()
    row = ChangeRow(
        "src", "db", "t", "update", 7, Position(1, 2, 3, 4), "0-1-9", "0-1-9", 5 << 24,
        {"id": 1}, {"id": 1, "v": None}, {"id": 1, "v": "x"}, 3,
    )  # fmt: skip
    rec = Record(Position(1, 2, 3), b"payload", 7, "0-1-9", (("db.t", 1),), seq=5)
    tail = {"checkpoint": "tok", "next": {"seq": 6, "row": 0}, "latest_seq": 9, "more": True}
    body = b"".join(enc.envelope("task", [enc.row(row), enc.row(row)], False, tail))
    msg = pb.FetchResponse.FromString(body)
    assert len(msg.rows) == 2 and msg.checkpoint == "tok" and msg.next.seq == 6 and msg.more
    r = msg.rows[0]
    assert (r.op, r.sequence, r.position.event, r.schema_version) == ("update", 5 << 24, 4, 3)
    assert [c.name for c in r.key.columns] == ["id"] and not r.HasField("sql")
    assert r.before.columns[1].value.null and r.after.columns[1].value.text == "x"
    raw = pb.FetchResponse.FromString(b"".join(enc.envelope("task", [enc.record(rec)], True, tail)))
    assert raw.records[0].payload == b"payload" and raw.records[0].tables[0].name == "db.t"
    # The same message built by the runtime serializes to bytes that parse identically.
    built = pb.FetchResponse(task="task", checkpoint="tok", latest_seq=9, more=True)
    built.next.seq = 6
    built.rows.add().CopyFrom(r)
    built.rows.add().CopyFrom(r)
    assert pb.FetchResponse.FromString(built.SerializeToString()) == msg

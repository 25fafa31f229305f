"""Request validation: start points of every kind, stateless checkpoint tokens, limits."""

from __future__ import annotations

import base64

import orjson
import pytest

from headwater.position import MariadbGtidPos, MysqlGtidSet, Position
from headwater.server import ServerOptions
from headwater.server.requests import (
    Checkpoint,
    RequestError,
    decode_checkpoint,
    encode_checkpoint,
    parse_fetch,
    parse_start,
    parse_subscribe,
)
from headwater.store import AtSeq, AtTime


def test_start_kinds() -> None:
    assert parse_start("earliest") == "earliest" and parse_start("latest") == "latest"
    assert parse_start({"seq": 7}) == AtSeq(7)
    assert parse_start({"timestamp_us": 5}) == AtTime(5)
    pos = {"change_id": 1, "file": 3, "offset": 1234, "event": 2}
    assert parse_start({"position": pos}) == Position(1, 3, 1234, 2)
    assert parse_start({"position": "1:3:1234"}) == Position(1, 3, 1234, 0)
    assert isinstance(parse_start({"gtid_set": "0-1-100,1-2-5"}), MariadbGtidPos)
    uuid = "3E11FA47-71CA-11E1-9E33-C80AA9429562"
    assert isinstance(parse_start({"gtid_set": f"{uuid}:1-77"}), MysqlGtidSet)


def test_checkpoint_round_trips_and_is_readable_json() -> None:
    body = {
        "task": "orders",
        "tables": ["shop.orders", "shop.*"],
        "ddl": False,
        "format": "protobuf",
        "shards": {"count": 4, "owned": [2, 0], "keys": {"shop.orders": ["customer_id"]}},
    }
    sub, _start = parse_subscribe(body)
    cp = Checkpoint(sub, seq=42, row=3)
    token = encode_checkpoint(cp)
    assert decode_checkpoint(token) == cp
    doc = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert doc["seq"] == 42 and doc["row"] == 3 and doc["shards"]["owned"] == [0, 2]
    assert sub.wants_table("shop", "anything") and not sub.wants_table("other", "orders")


def test_tampered_checkpoint_is_a_400_naming_the_checkpoint() -> None:
    sub, _start = parse_subscribe({"task": "orders"})
    token = encode_checkpoint(Checkpoint(sub, seq=1))
    doc = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    doc["shards"]["count"] = 0
    bad = base64.urlsafe_b64encode(orjson.dumps(doc)).decode()
    with pytest.raises(RequestError) as e:
        decode_checkpoint(bad)
    assert e.value.status == 400 and e.value.field == "checkpoint"
    assert "shards.count" in e.value.message


def test_fetch_limits_default_and_cap() -> None:
    opts = ServerOptions(default_rows=10, max_rows=100, default_bytes=1000, max_wait_s=2)
    token = encode_checkpoint(Checkpoint(parse_subscribe({"task": "t"})[0], seq=1))
    req = parse_fetch({"checkpoint": token}, opts)
    assert (req.max_rows, req.max_bytes, req.timeout_s) == (10, 1000, 0)
    req = parse_fetch({"checkpoint": token, "max_rows": 100, "timeout_ms": 2000}, opts)
    assert (req.max_rows, req.timeout_s) == (100, 2.0)
    with pytest.raises(RequestError, match="between 1 and 100"):
        parse_fetch({"checkpoint": token, "max_rows": 101}, opts)

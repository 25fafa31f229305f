"""The column-wise messages of an Arrow batch equal the row-dict path's, byte for byte.

Differential: :func:`headwater.sinks.bus.arrow.batch_messages` (Arrow compute builds the
values) against :func:`headwater.sinks.bus.messages.bus_messages` over
``batch.to_pylist()`` (orjson per row), on generated change rows with the awkward cases:
nulls in every nullable column, strings that need JSON escaping (quotes, backslashes,
control characters, non-ASCII), DDL rows in the middle, deletes with tombstones,
primary-key changes, tables without a key, every format.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import orjson
import pyarrow as pa
import pytest

from headwater.changes.schema import change_arrow_schema
from headwater.sinks.bus.arrow import batch_messages
from headwater.sinks.bus.messages import BusOptions, bus_messages

NAMES = ["orders", "t\u00e9", 'we"ird', "back\\slash", "tab\there", "line\nfeed"]


def rows(n: int, seed: int, null_numbers: bool = True) -> list[dict[str, Any]]:
    """Generated change rows; ``null_numbers``: some numeric columns null (UMS needs them)."""
    rng = random.Random(seed)
    no = None if null_numbers else 0
    out = []
    for i in range(n):
        op = rng.choice(["insert", "update", "delete", "read", "ddl", "update"])
        ident = rng.randrange(50)
        image = {"id": ident, "note": rng.choice(["x", 'q"uote', "\u4e2d", None]), "n": i}
        key = None if rng.random() < 0.1 else orjson.dumps({"id": ident}).decode()
        out.append({
            "source": rng.choice(["src", "s\u00fcd", None]),
            "database": rng.choice(["shop", 'd"b', None if op == "ddl" else "shop"]),
            "table": rng.choice(NAMES) if op != "ddl" else rng.choice(["", "orders"]),
            "op": op, "ts_us": rng.choice([no, 1_700_000_000_000_000 + i]),
            "commit_ts": dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
            "change_id": rng.choice([no, 1]), "file_num": 3, "offset": rng.choice([no, 4 * i]),
            "event_index": i % 7, "gtid": rng.choice(["", "0-1-7", None, 'g"\\']),
            "txn_id": "0-1-7", "sequence": (i + 1) << 24 | rng.randrange(5),
            "key": None if op == "ddl" else key,
            "before": None if op in ("insert", "read", "ddl") else orjson.dumps(image).decode(),
            "after": None if op in ("delete", "ddl") else orjson.dumps(image).decode(),
            "schema_version": rng.choice([no, 2]),
            "sql": "ALTER TABLE t ADD c INT -- \"q\"" if op == "ddl" else None,
            "before_key": '{"id": -1}' if op == "update" and rng.random() < 0.2 else None,
        })  # fmt: skip
    return out


@pytest.mark.parametrize("fmt", ["change_row", "debezium", "ums"])
@pytest.mark.parametrize("tombstones", [False, True])
def test_batch_messages_equal_the_row_path(fmt: str, tombstones: bool) -> None:
    generated = rows(400, 7, null_numbers=fmt != "ums")
    batch = pa.RecordBatch.from_pylist(generated, schema=change_arrow_schema())
    options = BusOptions(format=fmt, topic="{source}.{database}.{table}", tombstones=tombstones)
    fast = list(batch_messages(batch, options))
    slow = list(bus_messages(batch.to_pylist(), options))
    assert fast == slow
    assert len(fast) >= 300
    if fmt == "change_row":  # the values are JSON objects whose fields are the columns
        value = next(m.value for m in fast if m.value is not None)
        assert set(orjson.loads(value)) == {n for n in batch.schema.names if n != "commit_ts"}


def test_plain_strings_take_the_arrow_path_and_other_columns_fall_back() -> None:
    """Every column plain (the Arrow path for all) and a batch whose column set differs
    from the change schema (a transform dropped one: the row path), both equal."""
    plain = [r for r in rows(300, 3) if r["op"] != "ddl"]
    for r in plain:
        r.update(source="src", database="shop", table="orders", gtid="0-1-7")
    batch = pa.RecordBatch.from_pylist(plain, schema=change_arrow_schema())
    options = BusOptions()
    assert list(batch_messages(batch, options)) == list(bus_messages(batch.to_pylist(), options))
    fewer = batch.drop_columns(["schema_version"])
    assert list(batch_messages(fewer, options)) == list(bus_messages(fewer.to_pylist(), options))

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
from headwater.sinks.bus.arrow import Buffers, batch_buffers, batch_messages, batch_records
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


def change_batch(generated: list[dict[str, Any]], large: bool = False) -> pa.RecordBatch:
    """``generated`` as an Arrow batch of change rows; ``large``: 64-bit string offsets."""
    schema = change_arrow_schema()
    batch = pa.RecordBatch.from_pylist(generated, schema=schema)
    if not large:
        return batch
    return batch.cast(
        pa.schema(
            pa.field(f.name, pa.large_string()) if f.type == pa.string() else f for f in schema
        )
    )


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


@pytest.mark.parametrize("seed", [3, 11])
def test_batch_records_are_the_messages_as_lists(seed: int) -> None:
    """A batch of row changes (no DDL) as Kafka's parallel lists: the same topics, keys
    and values, in the same order, as the messages; several tables, odd names, null
    keys and the awkward strings included."""
    generated = [r for r in rows(400, seed) if r["op"] != "ddl"]
    batch = pa.RecordBatch.from_pylist(generated, schema=change_arrow_schema())
    options = BusOptions(topic="{source}.{database}.{table}")
    records = batch_records(batch, options)
    messages = list(bus_messages(batch.to_pylist(), options))
    assert records is not None
    assert records.topics == [m.topic for m in messages]
    assert records.keys == [m.key for m in messages]
    assert records.values == [m.value for m in messages]
    assert records.names == {m.topic for m in messages}
    assert len(records.names) > 10
    assert None in records.keys


def test_batch_records_of_one_table_and_of_no_rows() -> None:
    """One group (the head is a constant of the join) and an empty batch."""
    one = [r for r in rows(200, 5) if r["op"] != "ddl"]
    for r in one:
        r.update(source="src", database="shop", table="orders", op="update")
    batch = pa.RecordBatch.from_pylist(one, schema=change_arrow_schema())
    options = BusOptions()
    records = batch_records(batch, options)
    assert records is not None
    assert records.values == [m.value for m in bus_messages(batch.to_pylist(), options)]
    assert records.names == {"src.shop.orders"}
    assert records.topics == ["src.shop.orders"] * len(one)
    empty = batch_records(batch.slice(0, 0), options)
    assert empty == batch_records(batch.slice(0, 0), options)
    assert empty is not None and empty.values == [] and empty.topics == []


@pytest.mark.parametrize(
    ("change", "options"),
    [
        ({"op": "ddl"}, BusOptions()),
        ({"op": "delete"}, BusOptions(tombstones=True)),
        ({"sequence": None}, BusOptions()),
    ],
)
def test_batch_records_leave_other_batches_to_the_messages(
    change: dict[str, Any], options: BusOptions
) -> None:
    """A DDL row, a tombstone to add or a null sequence in row 20: None for the batch (the
    caller goes message by message); the rows before it are covered."""
    base = [r for r in rows(50, 9) if r["op"] not in ("ddl", "delete")]
    base[20].update(change)
    batch = pa.RecordBatch.from_pylist(base, schema=change_arrow_schema())
    assert batch_records(batch, options) is None
    head = batch_records(batch.slice(0, 20), options)
    assert head is not None and len(head.values) == 20


def test_batch_records_of_other_formats_and_columns_are_none() -> None:
    base = [r for r in rows(50, 9) if r["op"] != "ddl"]
    batch = pa.RecordBatch.from_pylist(base, schema=change_arrow_schema())
    assert batch_records(batch, BusOptions(format="debezium")) is None
    assert batch_records(batch, BusOptions(format="ums")) is None
    assert batch_records(batch.drop_columns(["sql"]), BusOptions()) is None


@pytest.mark.parametrize("large", [False, True])
def test_values_joined_in_c_from_sliced_batches_every_escape_and_extreme_integers(
    large: bool,
) -> None:
    """The C join (:mod:`headwater._native._busjoin`) reads the columns' Arrow buffers:
    slices (offsets not on a byte of the validity bitmaps), 64-bit string offsets, every
    byte below 0x80 and non-ASCII text in the JSON-escaped columns, the extreme int64
    values and int32 columns with nulls give what orjson writes row by row."""
    rng = random.Random(17)
    alphabet = [chr(c) for c in range(0x80)] + ["\u00e9", "\u4e2d", "\U0001f600", "\u2028"]
    generated = [r for r in rows(300, 23) if r["op"] != "ddl"]
    for i, r in enumerate(generated):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        r.update(gtid=text, txn_id=rng.choice([None, text[::-1], ""]))
        r["ts_us"] = rng.choice([-(2**63), 2**63 - 1, -1, 0, None, i])
        r["sql"] = rng.choice([None, text + "\\"])
    batch = change_batch(generated, large)
    options = BusOptions(topic="{source}.{database}.{table}")
    n = batch.num_rows
    assert n > 200
    for start, length in [(0, n), (3, n // 2), (13, 1), (n - 1, 1), (7, 0)]:
        part = batch.slice(start, length)
        records = batch_records(part, options)
        assert records is not None
        assert records.values == [m.value for m in bus_messages(part.to_pylist(), options)]
        assert len(records.values) == length
    whole = batch_records(batch, options)
    assert whole is not None
    every = b"".join(whole.values)
    assert b"\\u001f" in every and b"\\u0000" in every and b"\\t" in every
    assert b"-9223372036854775808" in every and b"9223372036854775807" in every


def test_change_rows_without_commit_ts_take_the_column_path_with_the_same_messages() -> None:
    """The Spark writer drops ``commit_ts`` (no bus message holds it): the batch without
    it is still covered by the column path and gives the same messages, every format."""
    plain = pa.RecordBatch.from_pylist(
        [r for r in rows(300, 31) if r["op"] != "ddl"], schema=change_arrow_schema()
    ).drop_columns(["commit_ts"])
    assert batch_records(plain, BusOptions()) is not None
    for fmt in ("change_row", "debezium", "ums"):
        generated = rows(300, 31, null_numbers=fmt != "ums")
        batch = pa.RecordBatch.from_pylist(generated, schema=change_arrow_schema())
        pruned = batch.drop_columns(["commit_ts"])
        options = BusOptions(format=fmt, tombstones=True)
        assert list(batch_messages(pruned, options)) == list(batch_messages(batch, options))
    records = batch_records(plain, BusOptions())
    assert records is not None
    assert records.values == [m.value for m in bus_messages(plain.to_pylist(), BusOptions())]


def test_the_c_join_lets_another_thread_run_while_it_joins() -> None:
    """:func:`headwater._native._busjoin.join` releases the GIL while it writes the rows
    (the driver path decodes the next batch meanwhile). With forced thread switches off
    (a switch interval of 1000 s) the other thread, woken before the call, can take the
    GIL only if the join gives it up: holding it, the join would return before that
    thread ran a line. The values are still every row's, the group texts of each row."""
    import sys
    import threading

    from headwater._native._busjoin import join

    n = 1_000_000
    numbers = pa.array(range(n), pa.int64())
    groups = pa.array([i % 3 for i in range(n)], pa.int32())
    texts = [b'{"g":0,"n":', b'{"g":1,"n":', b'{"g":2,"n":']
    pieces = [(0, texts, groups.buffers()[1], 0), (1, None, numbers.buffers()[1], 0), b"}"]
    go, ran = threading.Event(), []
    other = threading.Thread(target=lambda: (go.wait(), ran.append(True)))
    other.start()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000)
    try:
        go.set()  # the other thread now waits for the GIL, which this one holds
        values = join(n, pieces)
        ran_during_join = bool(ran)
    finally:
        sys.setswitchinterval(interval)
        other.join()
    assert ran_during_join
    assert len(values) == n
    assert values[0] == b'{"g":0,"n":0}' and values[-1] == b'{"g":0,"n":999999}'
    assert values[500_002] == b'{"g":1,"n":500002}'


def test_the_c_join_writes_integers_of_every_length_and_at_every_power_of_ten() -> None:
    """The join counts an integer's digits from its bit length (no division) and writes
    them two at a time: every power of ten and its neighbours, both signs, the int64
    extremes and zero, as Python's ``str`` writes them (orjson's integers are the same)."""
    from headwater._native._busjoin import join

    values = {0, 2**63 - 1, -(2**63), -(2**63) + 1}
    for k in range(19):
        for v in (10**k - 1, 10**k, 10**k + 1, 2 * 10**k, 5 * 10**k - 1):
            if v < 2**63:
                values |= {v, -v}
    for b in range(63):
        values |= {2**b - 1, 2**b, -(2**b)}
    numbers = sorted(values)
    column = pa.array(numbers, pa.int64())
    out = join(len(numbers), [b"[", (1, None, column.buffers()[1], 0), b"]"])
    assert out == [f"[{v}]".encode() for v in numbers]
    assert [orjson.loads(v)[0] for v in out] == numbers


def _unpack(buffers: Buffers) -> tuple[list[str], list[bytes | None], list[bytes]]:
    """A :class:`Buffers` read back into per-message lists, with Arrow's own readers of
    the buffers (not the C loop that produces from them)."""
    n = buffers.n
    if buffers.groups is None:
        groups = [0] * n
    else:
        index = pa.Array.from_buffers(pa.int32(), n, [None, buffers.groups], offset=buffers.goffset)
        groups = index.to_pylist()
    validity, offsets, data, offset, wide = buffers.key
    keys = pa.Array.from_buffers(
        pa.large_binary() if wide else pa.binary(), n, [validity, offsets, data], offset=offset
    ).to_pylist()
    value_offsets, value_data = buffers.values
    values = pa.Array.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(value_offsets), pa.py_buffer(value_data)]
    ).to_pylist()
    return [buffers.topics[g] for g in groups], keys, values


@pytest.mark.parametrize("large", [False, True])
def test_batch_buffers_hold_the_batch_records_messages(large: bool) -> None:
    """:func:`batch_buffers` (what the Kafka sink's C produce loop reads) holds the
    messages of :func:`batch_records`, in order: topics by group, keys from the ``key``
    column's buffers (nulls, slices off a byte of the bitmap, 64-bit offsets), values
    from one buffer joined in C (``join_buffer``, the same text as ``join``)."""
    generated = [r for r in rows(500, 31) if r["op"] != "ddl"]
    batch = change_batch(generated, large)
    options = BusOptions(topic="{source}.{database}.{table}")
    n = batch.num_rows
    for start, length in [(0, n), (5, n // 3), (n - 1, 1), (9, 0)]:
        part = batch.slice(start, length)
        records = batch_records(part, options)
        buffers = batch_buffers(part, options)
        assert records is not None and buffers is not None
        assert buffers.n == length
        topics, keys, values = _unpack(buffers)
        assert topics == records.topics
        assert keys == records.keys
        assert values == records.values
        assert buffers.names == records.names
    whole = batch_buffers(batch, options)
    assert whole is not None and whole.groups is not None and len(whole.topics) > 10
    assert None in _unpack(whole)[1]


def test_batch_buffers_of_one_group_and_the_batches_left_to_messages() -> None:
    """One group: no group indices, one topic. DDL rows, tombstones and other formats:
    None, as :func:`batch_records` gives."""
    one = [r for r in rows(100, 3) if r["op"] != "ddl"]
    for r in one:
        r.update(source="src", database="shop", table="orders", op="insert")
    batch = pa.RecordBatch.from_pylist(one, schema=change_arrow_schema())
    buffers = batch_buffers(batch, BusOptions())
    assert buffers is not None and buffers.groups is None
    assert buffers.topics == ("src.shop.orders",)
    records = batch_records(batch, BusOptions())
    assert records is not None and _unpack(buffers)[2] == records.values
    mixed = pa.RecordBatch.from_pylist(rows(50, 4), schema=change_arrow_schema())
    assert batch_buffers(mixed, BusOptions()) is None  # (DDL rows among them)
    assert batch_buffers(batch, BusOptions(format="debezium")) is None
    deletes = [dict(r, op="delete") for r in one]
    gone = pa.RecordBatch.from_pylist(deletes, schema=change_arrow_schema())
    assert batch_buffers(gone, BusOptions(tombstones=True)) is None

"""Signal rows in a batch of change rows become snapshot requests, in sequence order;
other tables, other operations, other signal types and malformed data are ignored."""

from __future__ import annotations

import orjson

from headwater.snapshot.signals import signal_requests


def row(
    seq: int, after: dict[str, object], *, table: str = "signal", op: str = "insert"
) -> dict[str, object]:
    return {"database": "headwater", "table": table, "op": op, "sequence": seq,
            "after": orjson.dumps(after).decode()}  # fmt: skip


def test_snapshot_signals_are_found_in_log_order() -> None:
    rows = [
        row(9, {"id": "b", "type": "snapshot", "data": '{"tables": ["d.t2"]}'}),
        row(3, {"id": "a", "type": "snapshot", "data": '{"tables": ["d.t1", "d.t3"]}'}),
        row(4, {"id": "x", "type": "log", "data": "{}"}),
        row(5, {"id": "y", "type": "snapshot", "data": "not json"}),
        row(6, {"id": "z", "type": "snapshot", "data": '{"tables": ["d.t"]}'}, op="update"),
        row(7, {"id": "w", "type": "snapshot", "data": '{"tables": ["d.t"]}'}, table="other"),
    ]
    got = signal_requests(rows)
    assert [(r.id, r.tables, r.sequence) for r in got] == [
        ("a", ("d.t1", "d.t3"), 3),
        ("b", ("d.t2",), 9),
    ]

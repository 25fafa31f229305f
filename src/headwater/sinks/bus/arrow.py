"""Bus messages straight from Arrow record batches: the executors' fast path.

:func:`batch_messages` gives the same messages as
``bus_messages(batch.to_pylist(), options)`` (:mod:`headwater.sinks.bus.messages`), byte
for byte, in the same order (a differential unit test holds the two equal). The
``change_row`` format of a batch with exactly the change-row columns
(:data:`headwater.changes.schema.CHANGE_COLUMNS`) is built column-wise: each column is
turned into a Python list once (``commit_ts`` never is: converting timestamps to
``datetime`` objects was the largest single cost of the row-dict path), repeated strings
(source, database, table, op) are JSON-encoded once per distinct value, and each value is
one ``bytes`` %-format of the pre-encoded pieces with the images' JSON text spliced in.
Rows the fast path does not cover (DDL rows, whose messages go to the schema topic) and
other formats or column sets go through :func:`bus_messages` row by row, in place, so the
order of the batch is kept.

Invariant: the head of a change-row value lists the scalar columns in schema order
(``commit_ts`` left out), then ``key``, ``before``, ``after``, ``before_key``, as
:func:`headwater.sinks.bus.messages.change_row_bytes` writes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson

from headwater.changes.schema import CHANGE_COLUMNS
from headwater.sinks.bus.messages import BusMessage, BusOptions, bus_messages, route

if TYPE_CHECKING:
    import pyarrow

__all__ = ["batch_messages"]

_EMPTY, _QUOTE, _NULL, _CLOSE = b"", b'"', b"null", b"}"

_NAMES = tuple(name for name, _ in CHANGE_COLUMNS)
# The head's columns in schema order (commit_ts and the images left out), with the JSON
# of each key and the separator before it.
_HEAD = (
    "source", "database", "table", "op", "ts_us", "change_id", "file_num", "offset",
    "event_index", "gtid", "txn_id", "sequence", "schema_version", "sql",
)  # fmt: skip
_IMAGES = ("key", "before", "after", "before_key")
_INDEX = {name: i for i, name in enumerate(_NAMES)}
# What precedes each column's value: ``{"source":``, then ``,"database":`` and so on.
_LABELS = tuple(
    (b"{" if i == 0 else b",") + orjson.dumps(name) + b":" for i, name in enumerate(_HEAD + _IMAGES)
)
_PLAIN = r"^[ !#-\[\]-~]*$"  # printable ASCII but the quote and the backslash


def _json(column: Any, name: str) -> Any:
    """A column as a binary array of JSON values (``null`` for nulls), built by Arrow: a
    string column whose values all need no escaping (printable ASCII without ``"`` and
    ``\\``, the common case for names, GTIDs and ops) is quoted as is; others are encoded
    by orjson one distinct value at a time; the images' JSON text is taken as it is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if name in _IMAGES:
        out = column.cast(pa.binary())
    elif pa.types.is_integer(column.type):
        out = column.cast(pa.string()).cast(pa.binary())
    elif (
        column.null_count == len(column) or pc.all(pc.match_substring_regex(column, _PLAIN)).as_py()
    ):
        out = pc.binary_join_element_wise(_EMPTY, column.cast(pa.binary()), _EMPTY, _QUOTE)
    else:
        seen: dict[Any, bytes] = {}
        values = []
        for v in column.to_pylist():
            enc = seen.get(v)
            if enc is None:
                enc = seen[v] = orjson.dumps(v)
            values.append(enc)
        return pa.array(values, pa.binary())
    return out.fill_null(_NULL)


def batch_messages(batch: pyarrow.RecordBatch, options: BusOptions) -> Iterator[BusMessage]:
    """The messages of ``batch`` (module docstring); its rows in the order given."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if options.format != "change_row" or tuple(batch.schema.names) != _NAMES:
        yield from bus_messages(batch.to_pylist(), options)
        return
    col = batch.column
    pieces: list[Any] = []
    for label, name in zip(_LABELS, _HEAD + _IMAGES, strict=True):
        pieces += [pa.scalar(label, pa.binary()), _json(col(_INDEX[name]), name)]
    pieces += [_CLOSE, _EMPTY]  # the separator of the join: none
    values = pc.binary_join_element_wise(*pieces).to_pylist()
    sources = col(_INDEX["source"]).to_pylist()
    databases = col(_INDEX["database"]).to_pylist()
    tables = col(_INDEX["table"]).to_pylist()
    ops = col(_INDEX["op"]).to_pylist()
    sequences = col(_INDEX["sequence"]).to_pylist()
    keys = col(_INDEX["key"]).cast(pa.binary()).to_pylist()
    topic_template, tombstones = options.topic, options.tombstones
    routes: dict[tuple[Any, Any, Any], str] = {}
    for i, value in enumerate(values):
        op = ops[i]
        if op == "ddl" or sequences[i] is None:
            yield from bus_messages(batch.slice(i, 1).to_pylist(), options)
            continue
        where = (sources[i], databases[i], tables[i])
        topic = routes.get(where)
        if topic is None:
            topic = routes[where] = route(
                topic_template, {"source": where[0], "database": where[1], "table": where[2]}
            )
        key, source = keys[i], sources[i] or ""
        yield BusMessage(topic, key, value, source, sequences[i])
        if tombstones and op == "delete":
            yield BusMessage(topic, key, None, source, sequences[i], 1)

"""Bus messages straight from Arrow record batches: the executors' fast path.

:func:`batch_messages` gives the same messages as
``bus_messages(batch.to_pylist(), options)`` (:mod:`headwater.sinks.bus.messages`), byte
for byte, in the same order (a differential unit test holds the two equal). The
``change_row`` format of a batch with exactly the change-row columns
(:data:`headwater.changes.schema.CHANGE_COLUMNS`) is built from the columns' Arrow
buffers (``commit_ts`` never read: converting timestamps to ``datetime`` objects was the
largest single cost of the row-dict path): repeated strings (source, database, table, op)
are JSON-encoded once per distinct value (Arrow's dictionary encoding), and each row's
value is joined in C (:mod:`headwater._native._busjoin`) from those heads, the integers'
decimal text, the strings JSON-escaped as orjson escapes them and the images' JSON text as
it is. (:func:`batch_records` of bench/kafka.py's 300k rows in 10k-row batches took
0.35-0.40 s of CPU with the element-wise Arrow-compute join this replaced, a regex check
and a cast per column, and 0.20-0.24 s with it, at load 8-10.) Rows the fast path does
not cover (DDL rows, whose messages go to the schema topic) and other formats or column
sets go through :func:`bus_messages` row by row, in place, so the order of the batch is
kept.

:func:`batch_records` gives a batch's messages as three parallel lists (topics, keys,
values) with no Python object per message but the values themselves: what a Kafka
producer needs (no message ids), produced in a tight loop
(:mod:`headwater.sinks.kafka.producer`). It covers the batches every row of which the fast
path covers and returns None for the others.

Invariant: the head of a change-row value lists the scalar columns in schema order
(``commit_ts`` left out), then ``key``, ``before``, ``after``, ``before_key``, as
:func:`headwater.sinks.bus.messages.change_row_bytes` writes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from headwater.changes.schema import CHANGE_COLUMNS
from headwater.sinks.bus.messages import BusMessage, BusOptions, bus_messages, route

if TYPE_CHECKING:
    import pyarrow

__all__ = ["Buffers", "Records", "batch_buffers", "batch_messages", "batch_records", "constant"]

_EMPTY, _QUOTE, _NULL, _CLOSE = b"", b'"', b"null", b"}"

_NAMES = tuple(name for name, _ in CHANGE_COLUMNS)
# The head's columns in schema order (commit_ts and the images left out), with the JSON
# of each key and the separator before it.
_HEAD = (
    "source", "database", "table", "op", "ts_us", "change_id", "file_num", "offset",
    "event_index", "gtid", "txn_id", "sequence", "schema_version", "sql",
)  # fmt: skip
_IMAGES = ("key", "before", "after", "before_key")
# The change columns without ``commit_ts``, which no bus message holds: what
# :func:`headwater.sinks.bus.spark.write_partitions` hands the executors.
_PRUNED = tuple(name for name in _NAMES if name != "commit_ts")
# What precedes each column's value: ``{"source":``, then ``,"database":`` and so on.
_LABELS = tuple(
    (b"{" if i == 0 else b",") + orjson.dumps(name) + b":" for i, name in enumerate(_HEAD + _IMAGES)
)
_PLAIN = r"^[ !#-\[\]-~]*$"  # printable ASCII but the quote and the backslash
# Columns of few distinct values: JSON-encoded per distinct value, then taken per row.
_REPEATED = ("source", "database", "table", "op")


@dataclass(frozen=True, slots=True)
class Records:
    """A batch's messages as parallel lists, in the batch's order: ``topics[i]``,
    ``keys[i]`` (None: no key), ``values[i]``; ``names``: the distinct topics."""

    topics: list[str]
    keys: list[bytes | None]
    values: list[bytes]
    names: frozenset[str]


def _plain(column: Any) -> bool:
    """Whether every value of a string column needs no JSON escaping (printable ASCII
    without ``"`` and ``\\``, the common case for names, GTIDs and ops; nulls count as
    plain)."""
    import pyarrow.compute as pc

    return column.null_count == len(column) or bool(
        pc.all(pc.match_substring_regex(column, _PLAIN)).as_py()
    )


def _quoted(column: Any) -> Any:
    """A string column as a binary array of JSON strings (nulls stay null): plain values
    (:func:`_plain`) are quoted by Arrow; others are encoded by orjson one distinct value
    at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if _plain(column):
        return pc.binary_join_element_wise(_EMPTY, column.cast(pa.binary()), _EMPTY, _QUOTE)
    seen: dict[Any, bytes | None] = {None: None}
    values = []
    for v in column.to_pylist():
        enc = seen.get(v)
        if enc is None and v is not None:
            enc = seen[v] = orjson.dumps(v)
        values.append(enc)
    return pa.array(values, pa.binary())


def _json(column: Any, name: str) -> Any:
    """A column as a binary array of JSON values (``null`` for nulls), built by Arrow:
    integers as their decimal text, strings quoted (:func:`_quoted`), the images' JSON
    text as it is."""
    import pyarrow as pa

    if name in _IMAGES:
        out = column.cast(pa.binary())
    elif pa.types.is_integer(column.type):
        out = column.cast(pa.string()).cast(pa.binary())
    else:
        out = _quoted(column)
    return out.fill_null(_NULL)


@dataclass(frozen=True, slots=True)
class _Groups:
    """The ``n`` rows of a batch grouped by their (source, database, table, op):
    ``distinct`` holds each group's four values, ``positions[i]`` the group of row ``i``
    (an Arrow array; None: at most one group)."""

    distinct: list[tuple[Any, ...]]
    positions: Any
    n: int

    def rows(self, per_group: list[Any]) -> list[Any]:
        """``per_group``'s item of each row."""
        if self.positions is None:
            return per_group[:1] * self.n
        return [per_group[p] for p in self.positions.to_pylist()]

    def column(self, per_group: list[bytes]) -> Any:
        """``per_group``'s item of each row: a binary scalar if there is one group (Arrow
        broadcasts it), else a binary array."""
        import pyarrow as pa

        if self.positions is None:
            return pa.scalar(per_group[0] if per_group else _EMPTY, pa.binary())
        return pa.array(per_group, pa.binary()).take(self.positions)


def constant(column: Any) -> tuple[bool, Any]:
    """Whether every value of a non-empty column is the same (all null included), and
    that value: Arrow's ``min_max``, a fraction of a dictionary encoding's cost."""
    import pyarrow.compute as pc

    nulls = column.null_count
    if nulls == len(column):
        return True, None
    if nulls:
        return False, None
    low, high = pc.min_max(column).values()
    return low == high, low.as_py()


def _groups(batch: pyarrow.RecordBatch) -> _Groups:
    """The groups of ``batch``'s rows (:class:`_Groups`): each of the four columns is
    dictionary-encoded and the indices are combined into one code per row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if batch.num_rows:
        same = [constant(batch.column(name)) for name in _REPEATED]
        if all(one for one, _ in same):  # one group (a batch of one table and op: most)
            return _Groups([tuple(value for _, value in same)], None, batch.num_rows)
    code: Any = pa.scalar(0, pa.int64())
    dictionaries, sizes = [], []
    for name in _REPEATED:
        encoded = batch.column(name).dictionary_encode()
        size = len(encoded.dictionary) + 1  # the last index stands for null
        dictionaries.append([*encoded.dictionary.to_pylist(), None])
        sizes.append(size)
        code = pc.add(pc.multiply(code, size), encoded.indices.cast(pa.int64()).fill_null(size - 1))
    codes = code.unique() if batch.num_rows else pa.array([], pa.int64())
    distinct = []
    for c in codes.to_pylist():
        parts = []
        for dictionary, size in zip(reversed(dictionaries), reversed(sizes), strict=True):
            c, i = divmod(c, size)
            parts.append(dictionary[i])
        distinct.append(tuple(reversed(parts)))
    positions = None if len(distinct) <= 1 else pc.index_in(code, value_set=codes)
    return _Groups(distinct, positions, batch.num_rows)


def _values(batch: pyarrow.RecordBatch, groups: _Groups) -> list[bytes]:
    """The change-row values of every row of ``batch``: the groups' JSON heads (source,
    database, table, op: encoded once per group), each other column's JSON text and the
    constant labels between them, joined row by row in C from the columns' Arrow buffers
    (:mod:`headwater._native._busjoin`: integers as decimal text, strings JSON-escaped as
    orjson does, the images' JSON text as it is, ``null`` for nulls). A column of another
    type goes through :func:`_json` first."""
    from headwater._native._busjoin import join

    return join(batch.num_rows, _pieces(batch, groups))


def _pieces(batch: pyarrow.RecordBatch, groups: _Groups) -> list[Any]:
    """The pieces of :func:`headwater._native._busjoin.join` for :func:`_values`."""
    import pyarrow as pa

    heads = [
        b"".join(label + orjson.dumps(v) for label, v in zip(_LABELS, values, strict=False))
        for values in groups.distinct
    ]
    pieces: list[Any] = []
    if groups.positions is None:
        pieces.append(heads[0] if heads else _EMPTY)
    else:
        positions = groups.positions.cast(pa.int32())
        pieces.append((0, heads, positions.buffers()[1], positions.offset))
    for label, name in zip(_LABELS[4:], _HEAD[4:] + _IMAGES, strict=True):
        pieces.append(label)
        pieces.append(_piece(batch.column(name), name))
    pieces.append(_CLOSE)
    merged: list[Any] = []
    for piece in pieces:  # adjacent constant texts as one
        if isinstance(piece, bytes) and merged and isinstance(merged[-1], bytes):
            merged[-1] += piece
        else:
            merged.append(piece)
    return merged


_INT_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")
_STRING_TYPES = {"string": False, "binary": False, "large_string": True, "large_binary": True}


def _piece(column: Any, name: str) -> Any:
    """``column`` as a piece of :func:`headwater._native._busjoin.join` (its docstring):
    an int64 or string column's buffers (mode 1, JSON-escaped, but for the images), or
    the JSON texts :func:`_json` builds for a column of another type."""
    import pyarrow as pa

    kind = str(column.type)
    if kind in _INT_TYPES:
        if kind != "int64":
            column = column.cast(pa.int64())
        validity, values = column.buffers()
        return (1, validity, values, column.offset)
    if kind in _STRING_TYPES:
        validity, offsets, data = column.buffers()
        return (2, validity, offsets, data, column.offset, _STRING_TYPES[kind],
                0 if name in _IMAGES else 1)  # fmt: skip
    texts = _json(column, name)
    validity, offsets, data = texts.buffers()
    return (2, validity, offsets, data, texts.offset, False, 0)


def _topics(groups: _Groups, template: str) -> tuple[list[str], frozenset[str]]:
    """The topic of each row (``template`` filled in once per group), and the distinct
    topics."""
    names = [
        route(template, {"source": s, "database": d, "table": t}) for s, d, t, _ in groups.distinct
    ]
    return groups.rows(names), frozenset(names)


def _covered(batch: pyarrow.RecordBatch, options: BusOptions) -> bool:
    return options.format == "change_row" and tuple(batch.schema.names) in (_NAMES, _PRUNED)


def _message_groups(batch: pyarrow.RecordBatch, options: BusOptions) -> _Groups | None:
    """The groups of ``batch`` (:func:`_groups`) when the column-wise path covers every
    row: change rows in the ``change_row`` format, no null sequence, no DDL row and no
    tombstone to add; else None."""
    if not _covered(batch, options) or batch.column("sequence").null_count:
        return None
    groups = _groups(batch)
    ops = {values[3] for values in groups.distinct}
    if "ddl" in ops or (options.tombstones and "delete" in ops):
        return None
    return groups


def batch_records(batch: pyarrow.RecordBatch, options: BusOptions) -> Records | None:
    """The messages of ``batch`` as parallel lists (module docstring), or None when a row
    needs the row path (a DDL row, a null sequence, a tombstone to add) or the batch is
    not change rows in the ``change_row`` format."""
    import pyarrow as pa

    groups = _message_groups(batch, options)
    if groups is None:
        return None
    topics, names = _topics(groups, options.topic)
    keys = batch.column("key").cast(pa.binary()).to_pylist()
    values = _values(batch, groups)
    return Records(topics, keys, values, names)


@dataclass(frozen=True, slots=True)
class Buffers:
    """A batch's messages as buffers, for a produce loop in C
    (:meth:`headwater.sinks.kafka.native.NativeProducer.produce_rows`): row ``i``'s topic
    is ``topics[groups[goffset + i]]`` (``groups`` None: ``topics[0]``), its key the
    ``key`` column's value (``key``: validity, offsets, data, offset and whether the
    offsets are int64, as :func:`_piece` gives a string column), its value
    ``values[1][o[i]:o[i + 1]]`` with ``o`` the int64 offsets ``values[0]``; ``names``:
    the distinct topics. The same messages as :func:`batch_records`, in the same order."""

    n: int
    topics: tuple[str, ...]
    groups: Any
    goffset: int
    key: tuple[Any, Any, Any, int, bool]
    values: tuple[bytes, bytes]
    names: frozenset[str]


def batch_buffers(batch: pyarrow.RecordBatch, options: BusOptions) -> Buffers | None:
    """The messages of ``batch`` as buffers (:class:`Buffers`), or None where
    :func:`batch_records` gives None: no Python object per message at all."""
    import pyarrow as pa

    from headwater._native._busjoin import join_buffer

    groups = _message_groups(batch, options)
    if groups is None:
        return None
    topics = tuple(
        route(options.topic, {"source": s, "database": d, "table": t})
        for s, d, t, _ in groups.distinct
    ) or ("",)
    if groups.positions is None:
        indices, goffset = None, 0
    else:
        positions = groups.positions.cast(pa.int32())
        indices, goffset = positions.buffers()[1], positions.offset
    key = batch.column("key")
    if str(key.type) not in _STRING_TYPES:
        key = key.cast(pa.binary())
    validity, offsets, data = key.buffers()
    wide = _STRING_TYPES.get(str(key.type), False)
    values = join_buffer(batch.num_rows, _pieces(batch, groups))
    return Buffers(batch.num_rows, topics, indices, goffset,
                   (validity, offsets, data, key.offset, wide), values,
                   frozenset(topics) if batch.num_rows else frozenset())  # fmt: skip


def batch_messages(batch: pyarrow.RecordBatch, options: BusOptions) -> Iterator[BusMessage]:
    """The messages of ``batch`` (module docstring); its rows in the order given."""
    import pyarrow as pa

    if not _covered(batch, options):
        yield from bus_messages(batch.to_pylist(), options)
        return
    col = batch.column
    groups = _groups(batch)
    values = _values(batch, groups)
    topics, _ = _topics(groups, options.topic)
    sources = col("source").to_pylist()
    ops = col("op").to_pylist()
    sequences = col("sequence").to_pylist()
    keys = col("key").cast(pa.binary()).to_pylist()
    tombstones = options.tombstones
    for i, value in enumerate(values):
        op = ops[i]
        if op == "ddl" or sequences[i] is None:
            yield from bus_messages(batch.slice(i, 1).to_pylist(), options)
            continue
        topic, key, source = topics[i], keys[i], sources[i] or ""
        yield BusMessage(topic, key, value, source, sequences[i])
        if tombstones and op == "delete":
            yield BusMessage(topic, key, None, source, sequences[i], 1)

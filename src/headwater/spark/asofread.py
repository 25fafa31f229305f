"""The read of a replay: one table's changes decoded straight to typed Arrow slot writes.

:func:`headwater.spark.table_as_of` does not go through the generic ``headwater`` source:
that source renders every image as JSON text (one DataFrame holds many tables), which
the replay would parse again in the JVM, and it carries 19 columns per change. Here each
input partition (a :class:`~headwater.spark.partitions.LogSlice` of the table's records,
planned on the driver as the source plans them) decodes its records into change blocks
(:func:`headwater.changes.decode_blocks`, the rows as value tuples) and builds, per
batch, the columns of the table's definition at the replay's point (matched by name:
a column dropped on the way is left out, one added on the way is NULL in older images)
plus ``sequence``, ``op`` and the before image's key, then turns them into slot writes
(:func:`headwater.spark.lastwrite.slot_writes`, vectorized).

Each column ``i`` of the definition travels as up to two physical columns:

* ``_v{i}``: the value typed as :func:`headwater.spark.views.spark_type` types it, for
  the types whose Python values convert to Arrow exactly (integers but BIGINT UNSIGNED
  and BIT, FLOAT/DOUBLE, DECIMAL up to 38 digits, CHAR/VARCHAR/TEXT): a batch of the
  column is converted when every value has the Python type the decoder gives that
  column type (``int``, ``float``, ``Decimal``, ``str`` encodable as UTF-8) and fits;
* ``_t{i}``: otherwise the value's *text*, :func:`field_text`: what ``from_json`` of the
  log's JSON image (docs/formats.md "Values") gives for that field as a string, so that
  the JVM types it after the apply with the very expression
  :func:`headwater.spark.views.table_changes` uses (``views._typed``). Dates, times,
  binary, SET, JSON, ENUM, BIT and BIGINT UNSIGNED always travel this way, and so does
  a batch of a fast column holding an odd value (bytes in a text column, text with
  bytes invalid in its charset, an integer column typed otherwise before an ALTER).

The final value of column ``i`` is ``coalesce(_v{i}, typed(_t{i}))``: the same value the
JSON route gives, without rendering or parsing JSON for the usual types.

The before image is never typed: only its key columns are kept (``_b{i}``/``_u{i}`` for
key column ``i``, raw as ``_v``/``_t``), to find updates that move a row and the slot a
delete removes. An update or delete whose before image, or an insert whose after image,
lacks columns of the table at its schema version (``binlog_row_image=MINIMAL``/
``NOBLOB``) fails the read with :data:`PARTIAL_IMAGE` (one check per rows event).

Invariant: a batch's writes depend on its rows alone; ``sequence`` is the change row's
(``record << 24 | row``), as the source gives it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from itertools import repeat
from typing import TYPE_CHECKING, Any

import orjson

from headwater.changes import ChangeBlock
from headwater.changes.schema import image_json
from headwater.changes.sequence import sequence_of
from headwater.errors import ConfigError
from headwater.gcpause import gc_paused
from headwater.schema.model import TableDef
from headwater.spark.lastwrite import slot_writes
from headwater.spark.logaccess import open_log
from headwater.spark.partitions import LogSlice, slice_blocks

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "PARTIAL_IMAGE",
    "ReadSpec",
    "field_text",
    "read_spec",
]

#: The start of the error a replay raises on a partial row image.
PARTIAL_IMAGE = "headwater replay: partial row image"

#: Rows per Arrow batch of changes (before they become slot writes).
BATCH_ROWS = 32768

_FAST_INTS = frozenset({"tinyint", "smallint", "mediumint", "int", "year"})
_FAST_TEXT = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"})


def field_text(value: Any) -> str | None:
    """``value`` (a decoded column value) as the text ``from_json`` of the log's JSON
    image gives for its field read as a string: a JSON string's content, any other JSON
    value's compact text (numbers, ``{"base64": ...}``, arrays, objects); None for NULL."""
    if value is None:
        return None
    if type(value) is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            pass  # rendered as {"undecodable_text_base64": ...} by image_json
        else:
            return value
    text = image_json({"v": value})
    assert text is not None
    rendered = orjson.loads(text)["v"]
    return rendered if isinstance(rendered, str) else orjson.dumps(rendered).decode()


def _arrow_type(kind: DataType) -> pa.DataType:
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(kind, timezone="UTC")


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    """How column ``index`` of the definition travels (module docstring)."""

    index: int
    name: str
    #: the Arrow type of ``_v{index}``, or None: text only
    fast: pa.DataType | None
    #: the Python type every value of a fast batch must have
    python_type: type | None


@dataclass(frozen=True, slots=True)
class ReadSpec:
    """What every input partition of one replay needs (picklable; no open handle)."""

    table: str
    slices: tuple[LogSlice, ...]
    columns: tuple[ColumnSpec, ...]
    #: indexes (into ``columns``) of the primary key's columns
    key: tuple[int, ...]
    #: (schema version, column count) of each version of the table (AsOfPlan.widths)
    widths: tuple[tuple[int, int], ...]

    def value_columns(self, i: int) -> tuple[str, ...]:
        """The physical columns of column ``i``: ``_v{i}`` (fast types), ``_t{i}``."""
        spec = self.columns[i]
        return (f"_v{i}", f"_t{i}") if spec.fast is not None else (f"_t{i}",)

    def before_columns(self, i: int) -> tuple[str, ...]:
        """The physical columns of key column ``i`` in the before image."""
        return (f"_b{i}", f"_u{i}") if self.columns[i].fast is not None else (f"_u{i}",)

    def write_schema(self) -> StructType:
        """The Spark schema of the writes :meth:`read` yields."""
        from pyspark.sql import types as T

        fields = [
            T.StructField("sequence", T.LongType()),
            T.StructField("present", T.BooleanType()),
        ]
        for spec in self.columns:
            if spec.fast is not None:
                fields.append(T.StructField(f"_v{spec.index}", _spark_of(spec.fast)))
            fields.append(T.StructField(f"_t{spec.index}", T.StringType()))
        return T.StructType(fields)

    def arrow_schema(self) -> pa.Schema:
        import pyarrow as pa

        fields = [pa.field("sequence", pa.int64()), pa.field("present", pa.bool_())]
        for spec in self.columns:
            if spec.fast is not None:
                fields.append(pa.field(f"_v{spec.index}", spec.fast))
            fields.append(pa.field(f"_t{spec.index}", pa.string()))
        return pa.schema(fields)

    def read(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``mapInArrow`` body over ``spark.range(len(slices))``: each id's slice, read
        and turned into slot writes (runs on an executor; opens its own log)."""
        schema = self.arrow_schema()
        with gc_paused():
            for batch in batches:
                for index in batch.column(0).to_pylist():
                    for writes in self._read_slice(self.slices[index]):
                        yield from writes.select(schema.names).to_batches()

    def _read_slice(self, part: LogSlice) -> Iterator[pa.Table]:
        log = open_log(part.options)
        try:
            build = _Batch(self)
            for rec, block, lo, hi in slice_blocks(part, log, ddl=False):
                self._check_full(block, rec.schema_version, sequence_of(rec.seq, 0))
                build.add(block, sequence_of(rec.seq, block.first), lo, hi)
                if build.rows >= BATCH_ROWS:
                    yield build.writes()
                    build = _Batch(self)
            if build.rows:
                yield build.writes()
        finally:
            log.close()

    def _check_full(self, block: ChangeBlock, version: int, seq: int) -> None:
        """Raise ConfigError (:data:`PARTIAL_IMAGE`) when an update's or delete's before
        image, or an insert's after image, lacks columns of the table at ``version`` (its
        schema version).

        With ``binlog_row_image=MINIMAL`` the before image holds the key columns only,
        with ``NOBLOB`` it leaves out BLOB/TEXT columns (MySQL reference manual,
        "binlog_row_image"; sql/log_event.cc ``Rows_log_event`` writes only the columns
        of the image's bitmap), while FULL logs every column; an update's after image
        then lacks the columns it did not change and the last-write apply would lose
        them. A MINIMAL insert logs only the columns the statement gave (MySQL reference
        manual, "binlog_row_image"): the others would read as NULL, not their DEFAULT."""
        if not self.widths:
            return
        expected = self.widths[0][1]
        for v, width in self.widths[1:]:
            if version >= v:
                expected = width
        names = block.after_names if block.op == "insert" else block.before_names
        if len(names) != expected:
            raise ConfigError(
                f"{PARTIAL_IMAGE}: {self.table} change at sequence {seq + block.first} "
                "lacks columns (binlog_row_image=MINIMAL or NOBLOB); "
                "a replay needs binlog_row_image=FULL",
                field="as_of",
            )


def _spark_of(arrow: pa.DataType) -> DataType:
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(arrow)


class _Batch:
    """The changes of one batch being built, column by column, a block at a time."""

    def __init__(self, spec: ReadSpec) -> None:
        self.spec = spec
        n = len(spec.columns)
        self.ops: list[str] = []
        self.sequence: list[int] = []
        self.values: list[list[Any]] = [[] for _ in range(n)]
        self.before: dict[int, list[Any]] = {i: [] for i in spec.key}
        self.rows = 0

    def add(self, block: ChangeBlock, first: int, lo: int, hi: int) -> None:
        """Rows ``[lo, hi)`` of ``block``, whose first row has sequence ``first``."""
        rows = block.rows[lo:hi] if (lo, hi) != (0, len(block.rows)) else block.rows
        m = len(rows)
        kind = block.op
        self.ops += [kind] * m
        self.sequence += range(first + lo, first + hi)
        columns = self.spec.columns
        if kind == "update":
            after = list(zip(*[a for _b, a in rows], strict=True)) if m else []
            before_rows = [b for b, _a in rows]
            after_names, before_names = block.after_names, block.before_names
        elif kind == "insert":
            after = list(zip(*rows, strict=True)) if m else []
            before_rows = []
            after_names, before_names = block.after_names, []
        else:  # delete: the before image's key only
            after = []
            before_rows = rows
            after_names, before_names = [], block.before_names
        where_after = {name: i for i, name in enumerate(after_names)}
        where_before = {name: i for i, name in enumerate(before_names)}
        for spec, out in zip(columns, self.values, strict=True):
            i = where_after.get(spec.name)
            if i is None:
                out.extend(repeat(None, m))
            else:
                out.extend(after[i])
        for k, out in self.before.items():
            i = where_before.get(columns[k].name)
            if i is None:
                out.extend(repeat(None, m))
            else:
                out.extend([b[i] for b in before_rows])
        self.rows += m

    def writes(self) -> pa.Table:
        """The batch's changes as slot writes (:func:`slot_writes`)."""
        import pyarrow as pa

        spec = self.spec
        arrays: dict[str, pa.Array] = {
            "op": pa.array(self.ops, pa.string()),
            "sequence": pa.array(self.sequence, pa.int64()),
        }
        for column, values in zip(spec.columns, self.values, strict=True):
            arrays.update(_physical(column, values, "_v", "_t"))
        keys: list[tuple[str, str]] = []
        for k in spec.key:
            arrays.update(_physical(spec.columns[k], self.before[k], "_b", "_u"))
            keys += zip(spec.value_columns(k), spec.before_columns(k), strict=True)
        return slot_writes(pa.table(arrays), keys)


def _physical(column: ColumnSpec, values: list[Any], typed: str, text: str) -> dict[str, pa.Array]:
    """The physical columns of ``values`` (module docstring): the typed column (all null
    when a value does not convert exactly) and the text column (null where typed)."""
    import pyarrow as pa

    i = column.index
    if column.fast is None:
        return {f"{text}{i}": pa.array([field_text(v) for v in values], pa.string())}
    kinds = set(map(type, values))
    kinds.discard(type(None))
    if kinds <= {column.python_type}:
        try:
            if column.python_type is int:
                # Python ints convert to int64 about 20x faster than to int32; the
                # cast checks the range (an overflow raises ArrowInvalid).
                array = pa.array(values, pa.int64()).cast(column.fast)
            else:
                array = pa.array(values, column.fast)
            return {
                f"{typed}{i}": array,
                f"{text}{i}": pa.nulls(len(values), pa.string()),
            }
        except (pa.ArrowException, ValueError, TypeError, OverflowError, UnicodeError):
            pass  # out of range, or text with bytes invalid in its charset
    return {
        f"{typed}{i}": pa.nulls(len(values), column.fast),
        f"{text}{i}": pa.array([field_text(v) for v in values], pa.string()),
    }


def read_spec(
    table: str,
    definition: TableDef,
    slices: Sequence[LogSlice],
    widths: tuple[tuple[int, int], ...],
) -> ReadSpec:
    """The :class:`ReadSpec` of ``table`` at a point whose definition is ``definition``."""
    from pyspark.sql import types as T

    from headwater.spark.views import spark_type

    columns = []
    for i, column in enumerate(definition.columns):
        kind = spark_type(column)
        dt = column.data_type
        fast: pa.DataType | None = None
        python_type: type | None = None
        if (dt in _FAST_INTS or dt == "bigint") and isinstance(kind, T.IntegerType | T.LongType):
            python_type = int
        elif dt in ("float", "double"):
            python_type = float
        elif dt == "decimal" and isinstance(kind, T.DecimalType):
            python_type = Decimal
        elif dt in _FAST_TEXT:
            python_type = str
        if python_type is not None:
            fast = _arrow_type(kind)
        columns.append(ColumnSpec(i, column.name, fast, python_type))
    by_name = {c.name: c.index for c in columns}
    key = tuple(by_name[k] for k in definition.primary_key)
    return ReadSpec(table, tuple(slices), tuple(columns), key, widths)

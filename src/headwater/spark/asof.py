"""A table's state as of a point of the change log: :func:`table_as_of`.

::

    df = headwater.spark.table_as_of(spark, "/data/shop", "shop.orders",
                                     as_of="gtid:0-1-4711")
    df2 = table_as_of(spark, "/data/shop", "shop.orders", as_of="timestamp:2024-05-01T12:00")
    df.exceptAll(df2)                                  # what changed between the two points

How (the algorithm and why it is correct: :mod:`headwater.spark.lastwrite`): the
state is, per primary key, the key's last write when it is a put. The driver plans the
table's records up to ``as_of`` in slices as the ``headwater`` source plans a batch
(:func:`plan_as_of`). Then one of two reads:

* **key-first** (:func:`key_first_read`, :mod:`headwater.spark.asofscan`), for a table
  without a base image whose key columns are integers or utf8/ascii text in every schema
  version of the range: ``parts`` tasks (``spark.range(parts).mapInArrow``), each reading
  the whole range for the keys hashed to it. A C pass reads only the key columns of
  every row image and keeps each key's last write; then only the surviving puts' after
  images are decoded. No shuffle, one Spark job; the JVM types what the read left as
  text, as below. :func:`headwater.replay.replay_to_parquet` goes further for tables
  whose values all come typed: the tasks write the Parquet themselves.
* **shuffle** (the others): each slice is one task that decodes its records straight
  into the table's columns, typed with the definition in force at ``as_of`` (matched by
  name), and turns every change into one or two key-slot writes
  (:mod:`headwater.spark.asofread`: no JSON image, no 19-column change row; only the
  before image's key is kept). The JVM gives each write its slot, the key's final typed
  values (``_k*``), the writes are hash-partitioned by slot (``repartition(n, keys)``:
  every write to one key lands in one partition), each partition keeps its last write
  per slot (``mapInArrow``, one vectorized sort by slot and sequence).

Either way the JVM types the values the read left as text (odd values, and the types
read as text: dates, times, binary, SET, JSON, ...) exactly as
:func:`headwater.spark.views.table_changes` types them, on the surviving rows only. The
result has the table's columns as of ``as_of``, one row per key.

``as_of`` is exclusive as the source's ``endingPosition`` is: ``gtid:SET`` is the state
after exactly the transactions of SET (the read stops at the first record whose GTID is
not in it), ``FILE:OFFSET`` the state before the transaction at or after that coordinate
(a ``mariadb-binlog --stop-position`` cut), ``timestamp:T`` before the first transaction
committed at or after T, ``seq:N`` before store record N; ``latest`` is the log's end.

A *base image* is the table's rows at a known point (a snapshot, or a Parquet mirror,
taken consistent with the position it names): give ``base`` (a DataFrame or a Parquet
path) and ``base_position`` (that position, as a start: the first change *not* in the
base); only the log from there on is read. Without a base the log must hold the table's
whole history (it was captured from the table's creation, or from when it was empty).

Schema changes on the way: images are read by column name with the definition at
``as_of``, so a dropped column disappears and a column added on the way is NULL in rows
last written before it was added (the server fills such rows with the column's DEFAULT,
which the schema history does not record: a column added with a non-NULL DEFAULT shows
NULL for untouched rows). The replay needs full row images (``binlog_row_image=FULL``)
and a primary key; a table without one is refused (ConfigError, field ``table``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from headwater.errors import ConfigError
from headwater.position import Position
from headwater.schema.history import SchemaHistory
from headwater.schema.model import TableDef
from headwater.spark.asofread import PARTIAL_IMAGE, read_spec
from headwater.spark.asofscan import ScanSpec, key_scan_kinds
from headwater.spark.lastwrite import BASE_SEQUENCE, last_writes_batches
from headwater.spark.logaccess import open_log
from headwater.spark.offsets import LogOffset, parse_options
from headwater.spark.partitions import LogSlice, plan_slices, scan_batch
from headwater.store import EARLIEST, LATEST

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["PARTIAL_IMAGE", "AsOfPlan", "key_first_read", "plan_as_of", "table_as_of"]

#: The largest event index: a position at the very end of its transaction.
_END_OF_TRANSACTION = 2**31 - 1


class AsOfPlan:
    """What :func:`table_as_of` reads: source options and the definition at ``as_of``."""

    def __init__(
        self,
        options: dict[str, str],
        definition: TableDef,
        first_seq: int,
        end_seq: int,
        at: Position,
        widths: tuple[tuple[int, int], ...] = (),
        slices: tuple[LogSlice, ...] = (),
        definitions: tuple[TableDef, ...] = (),
    ) -> None:
        self.options = options
        self.definition = definition
        self.first_seq = first_seq
        self.end_seq = end_seq  # exclusive
        #: the position of the state: the end of the last transaction applied
        self.at = at
        #: (schema version, column count) of each definition of the table up to ``at``,
        #: in version order: how many columns a full row image has at each version
        self.widths = widths
        #: the input partitions of the read (the table's records in ``[first_seq,
        #: end_seq)``, cut as the ``headwater`` source cuts a batch)
        self.slices = slices
        #: the table's definitions up to ``at``, in version order (``widths``' versions)
        self.definitions = definitions

    @property
    def records(self) -> int:
        return max(0, self.end_seq - self.first_seq)


def _split(table: str) -> tuple[str, str]:
    database, dot, name = table.partition(".")
    if not dot or not database or not name or "." in name:
        raise ConfigError(f"expected 'db.table', got {table!r}", field="table")
    return database, name


def plan_as_of(
    log: str | os.PathLike[str] | Mapping[str, str],
    table: str,
    *,
    as_of: str = LATEST,
    start: str = EARLIEST,
    partitions: int | None = None,
) -> AsOfPlan:
    """Resolve ``as_of`` and ``start`` on the log and find the table's definition at
    ``as_of`` (driver side; no Spark). ``log`` is a reader task directory or the
    ``headwater`` source's options (``server``, ``task``, ``token``)."""
    database, name = _split(table)
    options = {"path": os.fspath(log)} if not isinstance(log, Mapping) else dict(log)
    options.update(tables=table, ddl="false", startingPosition=start, endingPosition=as_of)
    if partitions is not None:
        options.update(partitions=str(partitions), minBytesPerPartition="0")
    parsed = parse_options(options)
    access = open_log(parsed)
    try:
        first = access.resolve(parsed.starting)
        end = access.end()[0] if parsed.ending is None else access.resolve(parsed.ending)
        history = access.schema
        if not isinstance(history, SchemaHistory):
            raise ConfigError("the log has no schema history to type the table", field="path")
        log_end, log_last = access.end()
        if parsed.ending is not None and end >= log_end and log_last is not None:
            last_record = next(iter(access.records(log_end - 1, log_end)))
            _refuse_past_end(as_of, parsed.ending, last_record, log_end)
        definition = None
        at = Position(0, 0, 0, 0)
        widths: tuple[tuple[int, int], ...] = ()
        definitions: tuple[TableDef, ...] = ()
        slices: tuple[LogSlice, ...] = ()
        if end > first:
            scan = scan_batch(access, parsed, LogOffset(first), end)
            slices = tuple(
                plan_slices(parsed, LogOffset(first), scan.end, scan.sizes, parsed.partitions)
            )
        if end > 1:
            last = next(iter(access.records(end - 1, end))).position
            at = Position(last.change_id, last.file_num, last.offset, _END_OF_TRANSACTION)
            definition = history.table_at(database, name, at)
            # the table's versions (the history has no public list of them; it is read
            # here, read-only, to know how wide a full image is at each schema version)
            # (and the key columns' types in each, for the key-first read)
            versions = [
                (v.version, v.definition)
                for v in history._tables.get((database, name), [])
                if v.definition is not None and v.position <= at
            ]
            widths = tuple((version, len(d.columns)) for version, d in versions)
            definitions = tuple(d for _version, d in versions)
    finally:
        access.close()
    if definition is None:
        raise ConfigError(f"{table} does not exist at {as_of!r} in the log", field="table")
    if not definition.primary_key:
        raise ConfigError(
            f"{table} has no primary key at {as_of!r}: rows cannot be told apart", field="table"
        )
    return AsOfPlan(options, definition, first, end, at, widths, slices, definitions)


def _refuse_past_end(as_of: str, ending: Any, last: Any, log_end: int) -> None:
    """Raise ConfigError when ``ending`` (resolved to the log's end) lies beyond the log's
    last transaction ``last``: the log cannot know what was committed between its end and
    that point, and replaying to its end instead would silently be a different state."""
    from headwater.position import MariadbGtid, MariadbGtidPos, MysqlGtid, MysqlGtidSet
    from headwater.store import AtSeq, AtTime

    beyond = False
    if isinstance(ending, AtSeq):
        beyond = ending.seq > log_end
    elif isinstance(ending, AtTime):
        beyond = ending.ts_us > last.ts_us
    elif isinstance(ending, Position):
        here = last.position
        beyond = (ending.change_id, ending.file_num, ending.offset) > (
            here.change_id,
            here.file_num,
            here.offset,
        )
    elif isinstance(ending, MariadbGtidPos) and last.gtid:
        tail = MariadbGtid.parse(last.gtid)
        beyond = any(
            g.domain_id == tail.domain_id and g.seq_no > tail.seq_no for g in ending.gtids()
        )
    elif isinstance(ending, MysqlGtidSet) and last.gtid:
        tail_gtid = MysqlGtid.parse(last.gtid)
        beyond = any(
            sid == tail_gtid.sid and hi - 1 > tail_gtid.gno for sid, _lo, hi in ending.intervals()
        )
    if beyond:
        raise ConfigError(
            f"{as_of!r} is past the log's end (its last transaction: {last.gtid or '-'} at "
            f"{last.position}, store record {log_end - 1}): the log cannot say what was "
            "committed after it; replay 'latest' or a point inside the log",
            field="as_of",
        )


def key_first_read(
    spark: SparkSession, plan: AsOfPlan, table: str, partitions: int | None = None
) -> ScanSpec | None:
    """The key-first read of ``plan`` (:mod:`headwater.spark.asofscan`: no shuffle), or
    None when the table's key is not one it reads (or the range is empty). One part per
    input slice the size deserves (:func:`plan_as_of`), at most one per core, unless
    ``partitions`` says."""
    if not plan.slices or not key_scan_kinds(plan.definitions):
        return None
    parts = partitions or max(1, min(len(plan.slices), spark.sparkContext.defaultParallelism))
    spec = read_spec(table, plan.definition, plan.slices, plan.widths)
    return ScanSpec(
        table,
        plan.slices[0].options,
        plan.first_seq,
        plan.end_seq,
        spec.columns,
        plan.definition.primary_key,
        plan.widths,
        parts,
    )


def table_as_of(
    spark: SparkSession,
    log: str | os.PathLike[str] | Mapping[str, str],
    table: str,
    *,
    as_of: str = LATEST,
    base: DataFrame | str | os.PathLike[str] | None = None,
    base_position: str | None = None,
    partitions: int | None = None,
    plan: AsOfPlan | None = None,
) -> DataFrame:
    """The rows of ``table`` (``db.table``) as of ``as_of`` (module docstring), as a
    DataFrame with the table's columns (typed as :mod:`headwater.spark.views` types them).

    ``base``/``base_position``: a base image and the position it was taken at (both or
    neither). ``partitions``: input partitions of the log read and of the apply.
    ``plan``: :func:`plan_as_of`'s result for these arguments, when the caller has it.
    """
    from pyspark.sql import functions as F, types as T

    from headwater.spark.views import _typed, spark_type

    if (base is None) != (base_position is None):
        raise ConfigError("give both a base image and its position, or neither", field="base")
    if plan is None:
        plan = plan_as_of(
            log, table, as_of=as_of, start=base_position or EARLIEST, partitions=partitions
        )
    definition = plan.definition
    spec = read_spec(table, definition, plan.slices, plan.widths)
    columns = definition.columns
    typed_of = [spark_type(c) for c in columns]

    def final(i: int) -> Any:
        """Column ``i``'s value: typed in the read, else typed from its text (asofread)."""
        text = _typed(F.col(f"_t{i}"), columns[i])
        if spec.columns[i].fast is None:
            return text
        return F.coalesce(F.col(f"_v{i}"), text)

    scan = None if base is not None else key_first_read(spark, plan, table, partitions)
    if scan is not None:
        # The key-first read (asofscan.py): no shuffle; each part reads the whole range.
        parts = scan.parts
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            rows = spark.range(parts, numPartitions=parts)
            rows = rows.mapInArrow(scan.read, scan.write_schema())
        return rows.select(
            *[final(i).cast(typed_of[i]).alias(c.name) for i, c in enumerate(columns)]
        )
    with warnings.catch_warnings():
        # PySpark 4.3 warns that pandas 3 is "not fully supported" even for mapInArrow,
        # which does not use pandas (as in transforms.py).
        warnings.simplefilter("ignore", FutureWarning)
        writes = spark.range(len(spec.slices), numPartitions=max(1, len(spec.slices)))
        writes = writes.mapInArrow(spec.read, spec.write_schema())
    # The slot: the key columns' final values (typed, as views.table_changes types
    # them), so writes whose keys are one value as typed meet in one partition.
    keys = [f"_k{i}" for i in spec.key]
    writes = writes.select("*", *[final(i).cast(typed_of[i]).alias(f"_k{i}") for i in spec.key])
    if base is not None:
        frame = base if not isinstance(base, str | os.PathLike) else spark.read.parquet(str(base))
        present = set(frame.columns)
        physical = []
        for i, c in enumerate(columns):
            value = (F.col(f"`{c.name}`") if c.name in present else F.lit(None)).cast(typed_of[i])
            if spec.columns[i].fast is not None:
                physical.append(value.alias(f"_v{i}"))
                physical.append(F.lit(None).cast("string").alias(f"_t{i}"))
            else:
                # Base rows are typed already: they carry the typed value in _v.
                physical.append(F.lit(None).cast("string").alias(f"_t{i}"))
                physical.append(value.alias(f"_v{i}"))
        base_writes = frame.select(
            F.lit(BASE_SEQUENCE).cast("long").alias("sequence"),
            F.lit(True).alias("present"),
            *physical,
        )
        base_writes = base_writes.select("*", *[F.col(f"_v{i}").alias(f"_k{i}") for i in spec.key])
        for i, travel in enumerate(spec.columns):
            if travel.fast is None:
                writes = writes.withColumn(f"_v{i}", F.lit(None).cast(typed_of[i]))
        writes = writes.unionByName(base_writes)
    if any(isinstance(typed_of[i], T.ArrayType | T.MapType | T.StructType) for i in spec.key):
        # Arrow sorts atomic values only: a SET key is compared by its JSON text.
        writes = writes.withColumn("_slot", F.to_json(F.struct(*keys)))
        sort_keys: tuple[str, ...] = ("_slot",)
    else:
        sort_keys = tuple(keys)
    n = partitions or max(2, spark.sparkContext.defaultParallelism)
    apply = _LastWrites(sort_keys)
    schema = writes.drop("sequence", "present").schema
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        state = writes.repartition(n, *sort_keys).mapInArrow(apply, schema)

    def result(i: int) -> Any:
        if i in spec.key:
            return F.col(f"_k{i}")
        if base is not None and spec.columns[i].fast is None:
            return F.coalesce(F.col(f"_v{i}"), _typed(F.col(f"_t{i}"), columns[i]))
        return final(i)

    return state.select(*[result(i).cast(typed_of[i]).alias(c.name) for i, c in enumerate(columns)])


class _LastWrites:
    """:func:`last_writes_batches` by ``keys`` (picklable for the executors)."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys

    def __call__(self, batches: Any) -> Any:
        return last_writes_batches(batches, self.keys)

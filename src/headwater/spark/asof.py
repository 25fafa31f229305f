"""A table's state as of a point of the change log: :func:`table_as_of`.

::

    df = headwater.spark.table_as_of(spark, "/data/shop", "shop.orders",
                                     as_of="gtid:0-1-4711")
    df2 = table_as_of(spark, "/data/shop", "shop.orders", as_of="timestamp:2024-05-01T12:00")
    df.exceptAll(df2)                                  # what changed between the two points

How (the algorithm and why it is correct: :mod:`headwater.spark.lastwrite`): the table's
changes up to ``as_of`` are read with the ``headwater`` source (batch, ``endingPosition``
= ``as_of``; the records decode on executors), each change becomes one or two key-slot
writes (``mapInArrow``, any partitioning; the slot is the key typed with the table's
definition in force at ``as_of``, the image stays the log's JSON text), the writes are
hash-partitioned by slot (``repartition(n, "slot")``: every write to one key lands in
one partition), each partition keeps its last write per slot (``mapInArrow``, one
vectorized sort), and only the surviving images are typed with that definition, as
:func:`headwater.spark.views.table_changes` types them (typing after the apply gives the
same rows as before it, on fewer rows: most changes are overwritten). The result has the
table's columns as of ``as_of``, one row per key.

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
from headwater.spark.lastwrite import BASE_SEQUENCE, last_writes_batches, slot_writes_batches
from headwater.spark.logaccess import open_log
from headwater.spark.offsets import parse_options
from headwater.store import EARLIEST, LATEST

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["AsOfPlan", "plan_as_of", "table_as_of"]

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
        if end > 1:
            last = next(iter(access.records(end - 1, end))).position
            at = Position(last.change_id, last.file_num, last.offset, _END_OF_TRANSACTION)
            definition = history.table_at(database, name, at)
            # the table's versions (the history has no public list of them; it is read
            # here, read-only, to know how wide a full image is at each schema version)
            widths = tuple(
                (v.version, len(v.definition.columns))
                for v in history._tables.get((database, name), [])
                if v.definition is not None and v.position <= at
            )
    finally:
        access.close()
    if definition is None:
        raise ConfigError(f"{table} does not exist at {as_of!r} in the log", field="table")
    if not definition.primary_key:
        raise ConfigError(
            f"{table} has no primary key at {as_of!r}: rows cannot be told apart", field="table"
        )
    return AsOfPlan(options, definition, first, end, at, widths)


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


#: The start of the error a replay raises (inside Spark) on a partial row image.
PARTIAL_IMAGE = "headwater replay: partial row image"


def _refuse_partial_images(raw: DataFrame, table: str, plan: AsOfPlan) -> DataFrame:
    """``raw`` where an update's or delete's ``before`` image lacks columns of the table's
    definition at that change's schema version fails the query (``raise_error``, in the
    JVM) with :data:`PARTIAL_IMAGE`.

    Why ``before``: with ``binlog_row_image=MINIMAL`` the before image holds the key
    columns only, with ``NOBLOB`` it leaves out BLOB/TEXT columns (MySQL reference manual,
    "binlog_row_image"; sql/log_event.cc ``Rows_log_event`` writes only the columns of the
    image's bitmap), while FULL logs every column; an update's after image then lacks the
    columns it did not change and the last-write apply would lose them. Checking ``before``
    only parses the JSON of updates and deletes, not of inserts, so the check costs little.
    """
    from pyspark.sql import functions as F

    if not plan.widths:
        return raw
    database, name = _split(table)
    expected: Any = F.lit(plan.widths[0][1])
    for version, width in plan.widths[1:]:
        expected = F.when(F.col("schema_version") >= version, F.lit(width)).otherwise(expected)
    mine = (F.col("database") == database) & (F.col("table") == name)
    partial = (
        mine
        & F.col("op").isin("update", "delete")
        & F.col("before").isNotNull()
        & (F.size(F.json_object_keys(F.col("before"))) != expected)
    )
    message = F.concat(
        F.lit(f"{PARTIAL_IMAGE}: {table} change at sequence "),
        F.col("sequence").cast("string"),
        F.lit(
            " lacks columns (binlog_row_image=MINIMAL or NOBLOB); "
            "a replay needs binlog_row_image=FULL"
        ),
    )
    return raw.withColumn(
        "before", F.when(partial, F.raise_error(message)).otherwise(F.col("before"))
    )


def _slot(image: Any, key: tuple[str, ...]) -> Any:
    from pyspark.sql import functions as F

    return F.when(image.isNotNull(), F.to_json(F.struct(*[image[c].alias(c) for c in key])))


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

    from headwater.spark import register
    from headwater.spark.views import _typed, spark_type

    if (base is None) != (base_position is None):
        raise ConfigError("give both a base image and its position, or neither", field="base")
    if plan is None:
        plan = plan_as_of(
            log, table, as_of=as_of, start=base_position or EARLIEST, partitions=partitions
        )
    register(spark)
    definition = plan.definition
    database, name = _split(table)
    key = tuple(definition.primary_key)
    by_name = {c.name: c for c in definition.columns}
    key_columns = [by_name[k] for k in key]
    raw = spark.read.format("headwater").options(**plan.options).load()
    raw = _refuse_partial_images(raw, table, plan).filter(
        (F.col("database") == database) & (F.col("table") == name) & (F.col("op") != "ddl")
    )

    # The apply carries each after image as the log's JSON text and types only the rows
    # that survive it (typing is a function of the text, so typing after the apply is
    # the same as before it, on fewer rows); the slots come from the key columns alone,
    # typed as views.table_changes types them, so a base image's slots (typed columns)
    # are the same strings.
    def key_of(which: str) -> Any:
        text = T.StructType([T.StructField(c.name, T.StringType()) for c in key_columns])
        parsed = F.from_json(F.col(which), text)
        typed = F.struct(*[_typed(parsed.getField(c.name), c).alias(c.name) for c in key_columns])
        return F.when(F.col(which).isNotNull(), typed)

    rows = raw.select(
        "op",
        "sequence",
        _slot(key_of("after"), key).alias("slot_after"),
        _slot(key_of("before"), key).alias("slot_before"),
        F.col("after").alias("image"),
    )
    write_schema = T.StructType(
        [
            T.StructField("slot", T.StringType()),
            T.StructField("sequence", T.LongType()),
            T.StructField("present", T.BooleanType()),
            T.StructField("image", T.StringType()),
        ]
    )
    with warnings.catch_warnings():
        # PySpark 4.3 warns that pandas 3 is "not fully supported" even for mapInArrow,
        # which does not use pandas (as in transforms.py).
        warnings.simplefilter("ignore", FutureWarning)
        writes = rows.mapInArrow(slot_writes_batches, write_schema)
    image_type = T.StructType([T.StructField(c.name, spark_type(c)) for c in definition.columns])
    result_fields = [T.StructField("slot", T.StringType()), T.StructField("image", T.StringType())]
    if base is not None:
        frame = base if not isinstance(base, str | os.PathLike) else spark.read.parquet(str(base))
        present = set(frame.columns)
        image = F.struct(
            *[
                (F.col(f"`{c.name}`") if c.name in present else F.lit(None))
                .cast(spark_type(c))
                .alias(c.name)
                for c in definition.columns
            ]
        )
        # Base rows are typed already: they travel in their own column (base_image),
        # log rows in image (text); a slot's last write keeps the one it holds.
        base_writes = frame.select(image.alias("base_image")).select(
            _slot(F.col("base_image"), key).alias("slot"),
            F.lit(BASE_SEQUENCE).cast("long").alias("sequence"),
            F.lit(True).alias("present"),
            F.lit(None).cast("string").alias("image"),
            "base_image",
        )
        writes = base_writes.unionByName(
            writes.withColumn("base_image", F.lit(None).cast(image_type))
        )
        result_fields.append(T.StructField("base_image", image_type))
    n = partitions or max(2, spark.sparkContext.defaultParallelism)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        state = writes.repartition(n, "slot").mapInArrow(
            last_writes_batches, T.StructType(result_fields)
        )
    text = T.StructType([T.StructField(c.name, T.StringType()) for c in definition.columns])
    parsed = F.from_json(F.col("image"), text)
    typed = F.struct(
        *[_typed(parsed.getField(c.name), c).alias(c.name) for c in definition.columns]
    )
    if base is not None:
        typed = F.when(F.col("image").isNotNull(), typed).otherwise(F.col("base_image"))
    return state.select(typed.alias("row")).select("row.*")

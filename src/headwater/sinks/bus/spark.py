"""Running a bus writer over a micro-batch on the executors, in the order a bus needs.

:func:`write_partitions` orders the batch and calls ``write(index, batches)`` once per
Spark partition, on an executor:

* ``ordering="table"``: the batch is hash-partitioned by (source, database, table) into
  ``tasks`` partitions and each is sorted by ``sequence``, so each table's changes are
  written by one task in log order (a primary key change, whose old and new key are both
  of its table, stays in order with both keys' other changes);
* ``ordering="global"``, or ``tasks=1``: one partition sorted by ``sequence``: the whole
  batch in log order, by one task (which keeps every table's and every key's order too).

One task needs no shuffle: the batch's partitions are coalesced into one (``coalesce(1)``
concatenates them; no rows move between processes) and sorted there. The sort is still
needed: the source's slices are contiguous ranges of the log in log order, but
``coalesce`` does not promise to concatenate them in partition order (its grouping may
follow block locations), and a transform may have reordered rows. The price is that the
whole stage, the source's decoding included, runs as that one task: with ``tasks > 1`` the
batch is instead shuffled once (``repartition``) and decoding keeps its parallelism.

``commit_ts`` is dropped first: no bus format writes it (``ts_us`` says the same,
:mod:`headwater.sinks.bus.messages`), and the JVM need not turn it into Arrow for every
row (:mod:`headwater.sinks.bus.arrow` takes the change columns with or without it).

Arrow batches. Spark hands the rows to Python in Arrow batches of at most
``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (R, 10 000) and, after every row, checks
the batch's bytes against ``maxBytesPerBatch`` (B, 64 MiB): that check is what bounds a
batch's memory when images are large, and it cost 25-30% of the executor task's CPU
(``ArrowWriter.sizeInBytes`` sets the value count of every vector after every row; JFR of
bench/kafka.py). The same bound holds without it when no row holds more than B / R bytes:
then R rows hold at most B. So the batch is written in two steps: below the sort, a filter
measures each row (``octet_length`` of its string and binary columns, a fixed allowance per
column for the offsets and fixed-width values) and raises an error naming :data:`_OVER` for
a row above B / R; and the job runs with the per-row check off (the driver thread's local
property ``maxBytesPerBatch`` = 2147483647, which Spark skips the check for). The sort
consumes its whole input before it yields the first row, so a row over the budget fails
the job before any Arrow batch reaches the writer: nothing is sent, and the batch runs
again with Spark's check on (:func:`write_partitions`), as every batch did before; the
next :data:`EXACT_AFTER_OVER` batches of the process take that path directly, so a table
of large rows pays the failed attempt once per that many batches (Spark logs the failed
task as an error; this module logs the switch at INFO). Column types other than
strings, binary and fixed-width values, a row limit of 0 (no limit) or a byte limit already
off take the checked path as well.

The partition index is stable for a given batch (the same rows hash the same way when a
batch is replayed), which is what per-task Kafka transactional ids rely on. ``write``
returns how many messages it sent; the driver gets the total. An error of ``write`` that
a retry cannot fix comes back as data and the driver raises it: the task is not retried
(:mod:`headwater.sinks.failfast`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame

__all__ = ["EXACT_AFTER_OVER", "ORDERINGS", "write_partitions"]

ORDERINGS = ("table", "global")

log = logging.getLogger(__name__)

Writer = Callable[[int, Iterator["pyarrow.RecordBatch"]], int]

#: The error text of a row over the per-row budget (module docstring, "Arrow batches").
_OVER = "headwater bus sink: a row over the per-row Arrow budget"
_MAX_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
_MAX_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"
_UNCHECKED = 2**31 - 1  # Spark skips its per-row size check for this byte limit
#: Bytes allowed per column and row besides the strings' bytes: an Arrow offset (4 or 8)
#: or a fixed-width value (at most 16, a decimal), and the validity bit.
_PER_COLUMN = 17
#: Batches of this process that take Spark's checked path after a row was over the budget.
EXACT_AFTER_OVER = 100
_exact_left = 0


def _row_budget(df: DataFrame) -> tuple[int, list[str]] | None:
    """The bytes the string and binary columns of a row may hold for R rows to stay within
    B (module docstring), and those columns; None when the budget cannot be used (Spark's
    check already off, no row limit, a column of another type, no room)."""
    from pyspark.sql import types as T

    spark = df.sparkSession
    conf = spark._jsparkSession.sessionState().conf()
    local = spark.sparkContext.getLocalProperty
    rows = int(local(_MAX_ROWS) or conf.arrowMaxRecordsPerBatch())
    size = local(_MAX_BYTES)
    limit = int(size) if size else int(conf.arrowMaxBytesPerBatch())
    if rows <= 0 or limit >= _UNCHECKED:
        return None
    fixed = (T.NumericType, T.BooleanType, T.DateType, T.TimestampType, T.TimestampNTZType)
    strings = []
    for field in df.schema.fields:
        if isinstance(field.dataType, T.StringType | T.BinaryType):
            strings.append(field.name)
        elif not isinstance(field.dataType, fixed):
            return None
    budget = limit // rows - _PER_COLUMN * len(df.schema.fields)
    return (budget, strings) if budget > 0 else None


def _order(df: DataFrame, ordering: str, tasks: int) -> DataFrame:
    from pyspark.sql import functions as F

    if ordering == "global" or tasks == 1:
        return df.coalesce(1).sortWithinPartitions("sequence")
    return df.repartition(
        tasks, F.col("source"), F.col("database"), F.col("table")
    ).sortWithinPartitions("sequence")


def _measured(df: DataFrame, budget: int, strings: list[str]) -> DataFrame:
    """``df`` with a filter that keeps every row and fails the job at a row whose string
    and binary columns hold more than ``budget`` bytes (:data:`_OVER`)."""
    from functools import reduce

    from pyspark.sql import functions as F

    quoted = ["`" + name.replace("`", "``") + "`" for name in strings]
    lengths = [F.coalesce(F.octet_length(F.col(name)), F.lit(0)) for name in quoted]
    size = reduce(lambda a, b: a + b, lengths, F.lit(0))
    return df.where(F.when(size > budget, F.raise_error(F.lit(_OVER))).otherwise(F.lit(True)))


def write_partitions(df: DataFrame, ordering: str, tasks: int, write: Writer) -> int:
    """Run ``write`` on every partition of ``df`` ordered by ``ordering`` (module
    docstring); the number of messages sent."""
    import warnings

    import pyarrow as pa

    from headwater.gcpause import freeze_worker_heap
    from headwater.sinks.failfast import decode, encode, is_terminal

    global _exact_left
    result = pa.schema([("sent", pa.int64()), ("error", pa.binary())])

    if "commit_ts" in df.columns:  # in no bus message (module docstring)
        df = df.drop("commit_ts")

    def run(batches: Iterator[pyarrow.RecordBatch]) -> Iterator[pyarrow.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        index = context.partitionId() if context is not None else 0
        sent, error = 0, None
        try:
            sent = write(index, batches)
        except Exception as exc:  # a terminal error is returned, not retried (failfast)
            if not is_terminal(exc):
                raise
            error = encode(exc)
        freeze_worker_heap()  # the daemon's collection after the task (headwater.gcpause)
        yield pa.RecordBatch.from_pydict({"sent": [sent], "error": [error]}, schema=result)

    def collect(frame: DataFrame) -> list[Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # pandas 3 notice; see transforms
            return frame.mapInArrow(run, "sent bigint, error binary").collect()

    budget = None if _exact_left > 0 else _row_budget(df)
    rows = None
    if budget is not None:
        context = df.sparkSession.sparkContext
        before = context.getLocalProperty(_MAX_BYTES)
        context.setLocalProperty(_MAX_BYTES, str(_UNCHECKED))
        try:
            rows = collect(_order(_measured(df, *budget), ordering, tasks))
        except Exception as e:
            if _OVER not in str(e):
                raise
            _exact_left = EXACT_AFTER_OVER  # nothing was sent: the checked path (docstring)
            log.info("bus sink: a row over %d bytes; Spark's Arrow size check is on for "
                     "the next %d batches", budget[0], EXACT_AFTER_OVER)  # fmt: skip
        finally:
            context.setLocalProperty(_MAX_BYTES, before)  # type: ignore[arg-type]  # None: unset
    else:
        _exact_left = max(0, _exact_left - 1)
    if rows is None:
        rows = collect(_order(df, ordering, tasks))
    for r in rows:
        if r["error"] is not None:
            raise decode(r["error"])
    return sum(int(r["sent"]) for r in rows)

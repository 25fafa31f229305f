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

The partition index is stable for a given batch (the same rows hash the same way when a
batch is replayed), which is what per-task Kafka transactional ids rely on. ``write``
returns how many messages it sent; the driver gets the total. An error of ``write`` that
a retry cannot fix comes back as data and the driver raises it: the task is not retried
(:mod:`headwater.sinks.failfast`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame

__all__ = ["ORDERINGS", "write_partitions"]

ORDERINGS = ("table", "global")

Writer = Callable[[int, Iterator["pyarrow.RecordBatch"]], int]


def write_partitions(df: DataFrame, ordering: str, tasks: int, write: Writer) -> int:
    """Run ``write`` on every partition of ``df`` ordered by ``ordering`` (module
    docstring); the number of messages sent."""
    import warnings

    import pyarrow as pa
    from pyspark.sql import functions as F

    from headwater.sinks.failfast import decode, encode, is_terminal

    result = pa.schema([("sent", pa.int64()), ("error", pa.binary())])

    if "commit_ts" in df.columns:  # in no bus message (module docstring)
        df = df.drop("commit_ts")
    if ordering == "global" or tasks == 1:
        ordered = df.coalesce(1).sortWithinPartitions("sequence")
    else:
        ordered = df.repartition(
            tasks, F.col("source"), F.col("database"), F.col("table")
        ).sortWithinPartitions("sequence")

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
        yield pa.RecordBatch.from_pydict({"sent": [sent], "error": [error]}, schema=result)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # pandas 3 notice; see transforms
        rows = ordered.mapInArrow(run, "sent bigint, error binary").collect()
    for r in rows:
        if r["error"] is not None:
            raise decode(r["error"])
    return sum(int(r["sent"]) for r in rows)

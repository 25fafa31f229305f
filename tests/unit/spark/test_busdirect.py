"""The pieces of the bus sinks' driver path (headwater.pipeline.busdirect) that need no
bus: the task index against Spark's own ``hash`` and ``repartition`` (a local Spark
session), and the writer feeds' batches (exact row counts, order, a writer that stops
early, one that fails)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession, functions as F

from headwater.pipeline.busdirect import _Feed, murmur3_hash, spark_task
from headwater.spark.offsets import parse_options


def _names() -> list[tuple[str | None, str | None, str | None]]:
    """Source, database and table names of every length round the hash's 4-byte step,
    multi-byte UTF-8 (bytes over 127: the signed tail), and nulls."""
    rng = random.Random(20)
    alphabet = "abcXYZ019_.-é€😀"
    out: list[tuple[str | None, str | None, str | None]] = [
        ("", "", ""), (None, "db", "t"), ("src", None, "t"), ("src", "db", None),
    ]  # fmt: skip
    for n in range(60):

        def word(k: int) -> str:
            return "".join(rng.choice(alphabet) for _ in range(k))

        out.append((word(n % 9), word(n), word(rng.randrange(0, 40))))
    return out


def test_murmur3_hash_is_sparks_hash(spark: SparkSession) -> None:
    names = _names()
    df = spark.createDataFrame(names, "s string, d string, t string")
    rows = df.select("s", "d", "t", F.hash("s", "d", "t").alias("h"),
                     F.hash("t").alias("h1")).collect()  # fmt: skip
    assert len(rows) == len(names)
    for r in rows:
        assert murmur3_hash(r["s"], r["d"], r["t"]) == r["h"], (r["s"], r["d"], r["t"])
        assert murmur3_hash(r["t"]) == r["h1"], r["t"]


def test_spark_task_is_the_partition_repartition_picks(spark: SparkSession) -> None:
    """What :func:`headwater.sinks.bus.spark._order` does with ``tasks > 1``:
    ``repartition(tasks, source, database, table)``; each row's partition id."""
    names = [n for n in _names() if None not in n]
    df = spark.createDataFrame(names, "source string, database string, table string")
    for tasks in (2, 3, 7):
        rows = (
            df.repartition(tasks, "source", "database", "table")
            .select("source", "database", "table", F.spark_partition_id().alias("p"))
            .collect()
        )
        assert len(rows) == len(names)
        got = {(r["source"], r["database"], r["table"]): r["p"] for r in rows}
        want = {n: spark_task(*n, tasks) for n in names}
        assert got == want
        assert len(set(got.values())) > 1


def test_murmur3_hash_skips_nulls() -> None:
    assert murmur3_hash(None) == 42
    assert murmur3_hash("a", None) == murmur3_hash("a")


def _table(first: int, n: int) -> pa.Table:
    return pa.table({"sequence": pa.array(range(first, first + n), pa.int64())})


def test_feed_cuts_exact_batches_in_order() -> None:
    """Pieces of any size arrive as batches of exactly ``rows`` rows (the last fewer),
    in order: the Arrow batches Spark hands the executor's writer."""
    got: list[list[int]] = []

    def write(index: int, batches: Iterator[pa.RecordBatch]) -> int:
        assert index == 3
        for b in batches:
            got.append(b.column(0).to_pylist())
        return sum(len(g) for g in got)

    feed = _Feed(write, 3, 7, "t")
    at = 0
    for n in (1, 5, 20, 0, 3, 9, 2):
        feed.put(_table(at, n))
        at += n
    feed.finish()
    assert feed.error is None and feed.sent == at == 40
    assert [len(g) for g in got] == [7, 7, 7, 7, 7, 5]
    assert [s for g in got for s in g] == list(range(40))


def test_feed_of_a_writer_that_returns_early_does_not_block() -> None:
    """A writer that reads one batch and returns (Kafka ``exactly_once`` on a batch
    already committed): the rest is dropped, nothing waits on a full queue."""

    def write(index: int, batches: Iterator[pa.RecordBatch]) -> int:
        next(batches)
        return 0

    feed = _Feed(write, 0, 2, "t")
    for i in range(50):  # far more than the queue holds
        feed.put(_table(2 * i, 2))
    feed.finish()
    assert feed.error is None and feed.sent == 0


def test_feed_keeps_a_writers_error_and_abort_ends_it() -> None:
    def fail(index: int, batches: Iterator[pa.RecordBatch]) -> int:
        next(batches)
        raise ValueError("broker said no")

    feed = _Feed(fail, 0, 1, "t")
    feed.put(_table(0, 3))
    feed.finish()
    assert isinstance(feed.error, ValueError) and feed.failed

    started = threading.Event()

    def wait(index: int, batches: Iterator[pa.RecordBatch]) -> int:
        started.set()
        return sum(b.num_rows for b in batches)

    feed = _Feed(wait, 0, 5, "t")
    feed.put(_table(0, 2))  # held: under one batch
    assert started.wait(10)
    feed.abort(RuntimeError("decode failed"))
    assert feed.error is not None and "decode failed" in str(feed.error)


def _pipeline(tmp_path: Path, sinks: str, extra: str = "") -> tuple[Any, list[Any]]:
    from headwater.pipeline.config import load_pipeline_config
    from headwater.pipeline.sinks import build_sink

    path = tmp_path / "p.yaml"
    path.write_text(
        f"name: p\nsource:\n  path: {tmp_path / 'task'}\ncheckpoint: {tmp_path / 'ck'}\n"
        f"{extra}sinks:\n{sinks}"
    )
    config = load_pipeline_config(path)
    return config, [build_sink(s, config) for s in config.sinks]


KAFKA = "  - type: kafka\n    bootstrap_servers: '127.0.0.1:1'\n"
REDIS = "  - type: redis\n    host: 127.0.0.1\n    port: 1\n"
MYSQL = "  - type: mysql\n    host: 127.0.0.1\n    port: 1\n    user: root\n"


def test_which_pipelines_take_the_bus_driver_path(tmp_path: Path) -> None:
    """Every sink a bus: yes; a SQL sink among them (a batch is never half-applied by
    one path), a filter (Spark SQL) or ``driverApplyMaxRows: 0``: the Spark path."""
    from headwater.pipeline.busdirect import BusDirect, bus_unsupported

    config, sinks = _pipeline(tmp_path, KAFKA + REDIS)
    assert isinstance(BusDirect.of(config, sinks), BusDirect)
    config, sinks = _pipeline(tmp_path, KAFKA + MYSQL)
    assert BusDirect.of(config, sinks) is None
    options = parse_options({"path": "/x"})
    assert bus_unsupported(config, sinks, options) == "a sink that is not a message bus"
    config, sinks = _pipeline(tmp_path, KAFKA, "transforms:\n  - filter: \"op != 'ddl'\"\n")
    assert bus_unsupported(config, sinks, options) == "FilterSpec runs as Spark SQL"
    off = parse_options({"path": "/x", "driverApplyMaxRows": "0"})
    assert bus_unsupported(config, sinks, off) == "driverApplyMaxRows is 0"


def test_route_splits_rows_by_sparks_task_in_order() -> None:
    """With ``tasks > 1`` each row goes to ``spark_task`` of its (source, database,
    table), nulls and non-ASCII names included, each task's rows in their order."""
    from headwater.pipeline.busdirect import _Route

    class Sink:
        def writer(self, batch_id: int) -> tuple[str, int, Any]:
            return "table", 3, None

    class Collect:
        def __init__(self, index: int) -> None:
            self.index = index

        def put(self, table: pa.Table) -> None:
            got.setdefault(self.index, []).extend(table.column("sequence").to_pylist())

    got: dict[int, list[int]] = {}
    route = _Route(Sink(), 0, 10, "t")
    route._feed = Collect  # type: ignore[method-assign,assignment]
    rng = random.Random(4)
    names = [("src", "db", f"t{i}") for i in range(7)]
    names += [(None, "db", "x"), ("s2", None, "y"), ("s2", "é😀", "")]
    rows = [rng.choice(names) for _ in range(3000)]
    for start, piece in ((0, rows[:2000]), (2000, rows[2000:])):  # (codes are per piece)
        route.put(pa.table({
            "source": [s for s, _d, _t in piece], "database": [d for _s, d, _t in piece],
            "table": [t for _s, _d, t in piece],
            "sequence": list(range(start, start + len(piece))),
        }))  # fmt: skip
    want: dict[int, list[int]] = {}
    for seq, triple in enumerate(rows):
        want.setdefault(spark_task(*triple, 3), []).append(seq)
    assert got == want
    assert len(got) == 3


def test_a_batch_reads_the_records_read_ahead_then_the_log(tmp_path: Path) -> None:
    """The driver's batch log (:class:`headwater.pipeline.busdirect._Ahead`): the run of
    records the prefetch held from the batch's first seq, then the log for the rest; the
    same records as a read of the log, whatever the prefetch held."""
    from headwater.pipeline.busdirect import _Ahead
    from headwater.position import Position
    from headwater.spark.logaccess import LocalLog
    from headwater.store import ChangeLog, Record

    writer = ChangeLog.open(str(tmp_path / "changes"))
    for i in range(1, 41):
        writer.append_nowait(
            Record(Position(1, 1, 100 + i), bytes([i]) * i, ts_us=i, gtid=f"0-1-{i}",
                   tables=(("a.t", 1),))
        )  # fmt: skip
    writer.flush()
    log = LocalLog(parse_options({"path": str(tmp_path)}), decoding=False)
    try:
        want = list(log.records(5, 30))
        for held in (0, 1, 10, 25, 30):  # none, some, all of [5, 30), and past its end
            ahead = _Ahead(log, list(log.records(5, 5 + held)))
            got = list(ahead.records(5, 30))
            assert [r.seq for r in got] == list(range(5, 30))
            assert got == want
    finally:
        log.close()
        writer.close()

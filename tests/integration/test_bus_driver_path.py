"""The bus sinks' driver path (headwater.pipeline.busdirect) against the Spark path, on
live servers: MariaDB -> reader -> pipeline -> Kafka (Tansu), NATS JetStream, Redis.

A differential test: the same log range (a random workload with DDL in it, cut into the
same micro-batches by ``maxRowsPerTrigger``) through two pipelines that differ only in
the path (``driverApplyMaxRows: 0`` keeps every batch on Spark; by default batches 1+
take the driver), each into its own topics, subjects and streams; read back, the two must
hold the same messages: keys, values, partitions and order per partition (Kafka, in the
change-row, Debezium and UMS formats), the same message ids and order per subject (NATS),
the same entry ids and fields per stream (Redis). Spark's Arrow batches are cut to 7 rows
here (``maxRecordsPerBatch``), so UMS runs cross batch boundaries as they would at 10,000.

Exactly once (Kafka ``exactly_once``, ``tasks: 2``): a batch committed on one path and
replayed on the other after a crash (Spark's commit file of the last batch removed, as a
crash between the sink's commit and Spark's leaves it) sends nothing twice, both ways.
The task count splits the tables over two indexes, one not 0: a driver path that put
rows under another index than Spark's (tried: every row at 0) commits its position in
another task's group, and Spark's replay of that batch then sends them again (331
messages for 305 rows).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession

from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.runner import PipelineRunner
from headwater.sandbox import MariadbSandbox
from tests.integration.bus_support import kafka_broker, nats_server, redis_server  # noqa: F401
from tests.integration.test_pipeline_e2e import Workload, reader  # noqa: F401
from tests.integration.test_reader_capture import Running, wait_caught_up
from tests.integration.test_sink_bus import kafka_read

pytestmark = pytest.mark.integration

#: Rows per micro-batch (the source's cut) and per Arrow batch (Spark's, and the driver's).
BATCH_ROWS = 90
ARROW_ROWS = 7


def _workload(mariadb: MariadbSandbox, db: str, running: Running, seed: int) -> None:
    """Random transactions with a DDL statement in the middle (the reader fixture's
    CREATE TABLEs are in the log before them)."""
    workload = Workload(mariadb, db, seed=seed)
    workload.run(60)
    mariadb.execute("ALTER TABLE orders MODIFY note VARCHAR(120) NULL", database=db)
    workload.run(60)
    wait_caught_up(running.task, mariadb)


def _sinks(tag: str, broker: str, nats_url: str, redis: tuple[str, int]) -> str:
    """Kafka in three formats (per key over 2 tasks, global, UMS in runs of 5), NATS per
    table over 2 tasks, Redis per table over 2 tasks; names carry ``tag``."""
    kafka = f"  - type: kafka\n    bootstrap_servers: '{broker}'\n"
    return (
        f"{kafka}    topic: '{tag}.row.{{database}}.{{table}}'\n"
        f"    schema_topic: '{tag}.row.schema'\n    tasks: 2\n    partitions: 3\n"
        f"{kafka}    format: debezium\n    topic: '{tag}.dbz'\n"
        f"    schema_topic: '{tag}.dbz.schema'\n    partitioning: single\n"
        f"{kafka}    format: ums\n    ums_max_rows: 5\n    topic: '{tag}.ums'\n"
        f"    schema_topic: '{tag}.ums.schema'\n    partitions: 2\n"
        f"  - type: nats\n    url: '{nats_url}'\n    stream: {tag}\n    tasks: 2\n"
        f"    topic: '{tag}.{{database}}.{{table}}'\n    schema_topic: '{tag}.schema'\n"
        f"  - type: redis\n    host: {redis[0]}\n    port: {redis[1]}\n    tasks: 2\n"
        f"    topic: '{tag}.r.{{database}}.{{table}}'\n"
        f"    schema_topic: '{tag}.r.schema.{{database}}.{{table}}'\n"
    )


def _config(
    path: Path, task_dir: Path, name: str, sinks: str, *, driver: bool, transforms: str = ""
) -> Path:
    off = "" if driver else ", driverApplyMaxRows: '0'"
    path.write_text(
        f"name: {name}\nsource:\n  path: {task_dir}\n"
        f"  options: {{maxRowsPerTrigger: '{BATCH_ROWS}'{off}}}\n"
        f"checkpoint: {path.parent / ('ck_' + name)}\n{transforms}sinks:\n{sinks}"
    )
    return path


@contextlib.contextmanager
def _arrow_rows(spark: SparkSession, rows: int) -> Any:
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(rows))
    try:
        yield
    finally:
        spark.conf.set(key, before)


def _run(spark: SparkSession, config: Path) -> PipelineRunner:
    """The pipeline until the log's end (``availableNow``); the runner, for its paths."""
    runner = PipelineRunner(load_pipeline_config(config), spark=spark)
    query = runner.start(available_now=True)
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return runner


def _kafka(broker: str, tag: str, topics: list[str], want: int) -> dict[Any, list[Any]]:
    """(topic without ``tag``, partition) -> [(key, value)] in offset order."""
    got = kafka_read(broker, [f"{tag}.{t}" for t in topics], want)
    return {
        (topic[len(tag) + 1 :], part): [(m.key(), m.value()) for m in ms]
        for (topic, part), ms in got.items()
    }


def _nats(url: str, stream: str) -> dict[str, list[tuple[str, bytes]]]:
    """Subject without the stream's token -> [(message id, data)] in stream order."""

    async def read() -> dict[str, list[tuple[str, bytes]]]:
        import nats

        nc = await nats.connect(url)
        sub = await nc.jetstream().pull_subscribe(f"{stream}.>", durable=None, stream=stream)
        out: dict[str, list[tuple[str, bytes]]] = {}
        with contextlib.suppress(asyncio.TimeoutError):  # fetch times out: nothing left
            while True:
                for m in await sub.fetch(500, timeout=2):
                    mid = (m.headers or {}).get("Nats-Msg-Id", "")
                    out.setdefault(m.subject[len(stream) + 1 :], []).append((mid, m.data))
                    await m.ack()
        await nc.close()
        return out

    return asyncio.run(read())


def _redis(server: tuple[str, int], tag: str) -> dict[str, list[Any]]:
    """Stream without ``tag`` -> [(entry id, fields)]."""
    import redis

    client = redis.Redis(host=server[0], port=server[1])
    try:
        names = sorted(k.decode() for k in client.scan_iter(match=f"{tag}.*"))
        return {n[len(tag) + 1 :]: client.xrange(n) for n in names}
    finally:
        client.close()


@pytest.mark.timeout(600)
def test_driver_path_sends_what_the_spark_path_sends(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    kafka_broker: str,  # noqa: F811
    nats_server: str,  # noqa: F811
    redis_server: tuple[str, int],  # noqa: F811
    tmp_path: Path,
) -> None:
    running, task_dir = reader
    _workload(mariadb, db, running, seed=31)
    runners = {}
    with _arrow_rows(spark, ARROW_ROWS):
        for driver in (False, True):
            tag = f"{'drv' if driver else 'spk'}{abs(hash(db)) % 10**6}"
            sinks = _sinks(tag, kafka_broker, nats_server, redis_server)
            config = _config(tmp_path / f"{tag}.yaml", task_dir, tag, sinks, driver=driver)
            runners[tag] = _run(spark, config)
    spark_tag, driver_tag = list(runners)
    assert runners[spark_tag].writer.bus is None  # every batch a Spark job
    bus = runners[driver_tag].writer.bus
    assert bus is not None
    driven = sorted(bus.batches)
    assert len(driven) >= 3 and driven[0] == 1  # batch 0 is Spark's; every later one here
    rows = sum(b.rows_out for b in bus.batches.values())
    assert rows >= 2 * BATCH_ROWS

    topics = [f"row.{db}.orders", f"row.{db}.items", "row.schema", "dbz", "dbz.schema", "ums",
              "ums.schema"]  # fmt: skip
    want = _kafka(kafka_broker, spark_tag, topics, rows)
    got = _kafka(kafka_broker, driver_tag, topics, rows)
    assert set(got) == set(want)
    assert {t for t, _p in want} == set(topics)  # DDL on every schema topic
    assert len({p for t, p in want if t.startswith("row.")}) > 1
    for tp in want:
        assert got[tp] == want[tp], tp
    # the driver's figures (progress reports, status): rows per table as sent
    for table in ("orders", "items"):
        sent = sum(len(ms) for (t, _p), ms in got.items() if t == f"row.{db}.{table}")
        first = runners[spark_tag].writer.query  # (batch 0's rows: Spark's, in both runs)
        assert first is not None
        batch0 = next(p for p in first.recentProgress if p["batchId"] == 0)
        rows0 = {i["item"]: i["count"] for i in _tables_out(batch0)}.get(f"{db}.{table}", 0)
        driven_rows = sum(b.tables_out.get(f"{db}.{table}", 0) for b in bus.batches.values())
        assert rows0 + driven_rows == sent > 0
    patched = bus.patch([{"batchId": driven[0], "numInputRows": 0}])[0]
    assert patched["numInputRows"] == bus.batches[driven[0]].rows_in > 0
    ums = [v for tp, ms in want.items() if tp[0] == "ums" for _k, v in ms]
    assert 0 < len(ums) < rows  # runs of up to 5 rows of a table

    want_nats = _nats(nats_server, spark_tag)
    got_nats = _nats(nats_server, driver_tag)
    assert set(want_nats) == {f"{db}.orders", f"{db}.items", "schema"}
    assert got_nats == want_nats

    want_redis = _redis(redis_server, spark_tag)
    got_redis = _redis(redis_server, driver_tag)
    assert set(want_redis) == {f"r.{db}.orders", f"r.{db}.items", f"r.schema.{db}."}
    assert got_redis == want_redis


@pytest.mark.timeout(600)
def test_driver_path_transforms_send_what_the_spark_path_sends(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    kafka_broker: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A table renamed, a column excluded and one masked (the Python row operations on
    images): the same Kafka messages from both paths."""
    running, task_dir = reader
    _workload(mariadb, db, running, seed=12)
    transforms = (
        f"transforms:\n  - rename_table: {{{db}.items: items_v2}}\n"
        "  - exclude: [version]\n  - mask:\n      note: {keep_last: 2}\n"
    )
    tags = []
    for driver in (False, True):
        tag = f"{'tdrv' if driver else 'tspk'}{abs(hash(db)) % 10**6}"
        sinks = (
            f"  - type: kafka\n    bootstrap_servers: '{kafka_broker}'\n"
            f"    topic: '{tag}.{{database}}.{{table}}'\n    schema_topic: '{tag}.schema'\n"
            "    tasks: 2\n"
        )
        config = _config(tmp_path / f"{tag}.yaml", task_dir, tag, sinks, driver=driver,
                         transforms=transforms)  # fmt: skip
        runner = _run(spark, config)
        assert (runner.writer.bus is not None) == driver
        tags.append(tag)
    topics = [f"{db}.orders", f"{db}.items_v2", "schema"]
    rows = _rows_in_log(spark, task_dir, db)
    want = _kafka(kafka_broker, tags[0], topics, rows)
    got = _kafka(kafka_broker, tags[1], topics, rows)
    assert set(want) == set(got) and {t for t, _p in want} == set(topics)
    assert sum(len(ms) for ms in want.values()) == rows
    for tp in want:
        assert got[tp] == want[tp], tp
    values = [orjson.loads(v) for ms in got.values() for _k, v in ms]
    after = [v["after"] for v in values if v.get("after")]
    assert after and all("version" not in a for a in after)
    notes = [a["note"] for a in after if a.get("note")]
    assert notes and all(n[:-2] == "*" * (len(n) - 2) for n in notes)


def _tables_out(report: Any) -> list[Any]:
    """The rows per table a Spark batch's report observed (``observedMetrics``)."""
    from headwater.pipeline.runner import OBSERVED

    return list(report["observedMetrics"][OBSERVED]["tables"])


def _last_commit_removed(checkpoint: Path) -> int:
    """Remove Spark's commit file of the last batch (a crash after the sinks' commit,
    before Spark's): the next start runs that batch again; its id."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)  # (Hadoop's checksum)
    return last


@pytest.mark.timeout(600)
@pytest.mark.parametrize("first_driver", [False, True], ids=["spark_then_driver",
                                                            "driver_then_spark"])  # fmt: skip
def test_kafka_exactly_once_batch_replayed_across_paths(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    kafka_broker: str,  # noqa: F811
    tmp_path: Path,
    first_driver: bool,
) -> None:
    running, task_dir = reader
    _workload(mariadb, db, running, seed=7)
    tag = f"eos{int(first_driver)}{abs(hash(db)) % 10**6}"
    tasks = _tasks_over_two_indexes(spark, task_dir, db)
    sinks = (
        f"  - type: kafka\n    bootstrap_servers: '{kafka_broker}'\n"
        f"    topic: '{tag}.{{database}}.{{table}}'\n    schema_topic: '{tag}.schema'\n"
        f"    delivery: exactly_once\n    tasks: {tasks}\n"
    )
    paths = []
    for driver in (first_driver, not first_driver):
        config = _config(tmp_path / f"{tag}.yaml", task_dir, tag, sinks, driver=driver)
        runner = _run(spark, config)
        paths.append(sorted(runner.writer.bus.batches) if runner.writer.bus else [])
        if len(paths) == 1:
            replayed = _last_commit_removed(tmp_path / f"ck_{tag}")
            assert replayed >= 2
    first, second = paths
    # the replay took the other path: Spark's (no driver batch) or the driver's (only it)
    assert second == ([replayed] if not first_driver else [])
    assert first == (list(range(1, replayed + 1)) if first_driver else [])

    topics = [f"{tag}.{db}.orders", f"{tag}.{db}.items", f"{tag}.schema"]
    rows = _rows_in_log(spark, task_dir, db)
    got = kafka_read(kafka_broker, topics, rows)
    sequences = [_sequence(m.value()) for ms in got.values() for m in ms]
    assert len(sequences) == rows  # once each: the replayed batch sent nothing
    assert len(set(sequences)) == rows


def _tasks_over_two_indexes(spark: SparkSession, task_dir: Path, db: str) -> int:
    """A task count that splits ``db``'s tables (and its DDL) over two task indexes or
    more, one of them not 0: a wrong index on either path is then a transactional id
    whose recorded position does not hold the batch, and the replay sends it twice. (The
    source's name, part of the hash, differs from run to run.)"""
    from headwater.pipeline.busdirect import spark_task
    from headwater.spark import register

    register(spark)
    df = spark.read.format("headwater").option("path", str(task_dir)).load()
    names = [tuple(r) for r in df.where(df.database == db)
             .select("source", "database", "table").distinct().collect()]  # fmt: skip
    for tasks in range(2, 12):
        if len({spark_task(*n, tasks) for n in names}) > 1:
            return tasks
    raise AssertionError(f"no task count up to 11 splits {names}")


def _sequence(value: bytes) -> int:
    import orjson

    return int(orjson.loads(value)["sequence"])


def _rows_in_log(spark: SparkSession, task_dir: Path, db: str) -> int:
    """Change rows of ``db`` in the log, DDL included (a message each in change_row)."""
    from headwater.spark import register

    register(spark)
    df = spark.read.format("headwater").option("path", str(task_dir)).load()
    return int(df.where(df.database == db).count())


def test_kafka_writers_at_once_keep_their_producers(kafka_broker: str) -> None:  # noqa: F811
    """Two writer threads at once (the driver's task indexes) each get a producer and
    both are kept for the next batch (one kept meant a new producer id every batch)."""
    import threading

    import pyarrow as pa

    from headwater.changes.schema import change_arrow_schema
    from headwater.sinks.bus.messages import BusOptions
    from headwater.sinks.kafka import KafkaConfig, producer as kp

    name = f"pool{abs(hash(kafka_broker)) % 10**6}{threading.get_ident() % 1000}"
    config = KafkaConfig(kafka_broker, bus=BusOptions(topic=name), partitions=1,
                         producer=(("client.id", name),))  # fmt: skip
    row = {"source": "s", "database": "d", "table": "t", "op": "insert", "sequence": 1 << 24,
           "key": '{"id":1}', "after": '{"id":1}'}  # fmt: skip
    batch = pa.Table.from_pylist([row], schema=change_arrow_schema()).to_batches()[0]
    key = kp._settings_key(config)
    used: list[list[int]] = []
    for _round in range(2):
        start = threading.Barrier(2)

        def write(index: int, start: threading.Barrier) -> None:
            start.wait()
            assert kp.write_partition(config, 0, index, iter([batch])) == 1

        threads = [threading.Thread(target=write, args=(i, start)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        used.append(sorted(id(p) for p, _e in kp._PRODUCERS[key]))
    assert len(used[0]) == 2
    assert used[1] == used[0]  # the same two producers, kept and reused
    got = kafka_read(kafka_broker, [name], 4)
    assert sum(len(ms) for ms in got.values()) == 4


@pytest.mark.timeout(600)
def test_a_large_batch_is_streamed_in_bounded_memory(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    kafka_broker: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """One batch of 200,000 rows of about 600 bytes goes through the driver while the
    Arrow memory it holds stays under 16 MiB (1.8 MiB measured): the slice is decoded and
    handed on a few thousand rows at a time (1,000-row Arrow batches here), never held
    whole. (With 1,000,000-row Arrow batches the writer gets the batch as one: 170 MiB,
    and this fails.)"""
    import threading

    import pyarrow as pa

    running, task_dir = reader
    mariadb.execute("CREATE TABLE wide (id INT PRIMARY KEY, pad VARCHAR(600) NOT NULL)",
                    "INSERT INTO wide VALUES (0, 'first')", database=db)  # fmt: skip
    wait_caught_up(running.task, mariadb)
    tag = f"mem{abs(hash(db)) % 10**6}"
    sinks = (
        f"  - type: kafka\n    bootstrap_servers: '{kafka_broker}'\n"
        f"    topic: '{tag}.{{database}}.{{table}}'\n    schema_topic: '{tag}.schema'\n"
    )
    config = tmp_path / "p.yaml"
    config.write_text(
        f"name: {tag}\nsource:\n  path: {task_dir}\ncheckpoint: {tmp_path / 'ck'}\nsinks:\n{sinks}"
    )
    _run(spark, config)  # batch 0 (Spark's): the tables and the first row
    mariadb.execute("INSERT INTO wide SELECT seq, REPEAT('p', 560) FROM seq_1_to_200000",
                    database=db)  # fmt: skip
    wait_caught_up(running.task, mariadb, timeout=120)
    peak, done = [0], threading.Event()
    base = pa.total_allocated_bytes()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], pa.total_allocated_bytes() - base)
            done.wait(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with _arrow_rows(spark, 1000):
            runner = _run(spark, config)
    finally:
        done.set()
        sampler.join()
    bus = runner.writer.bus
    assert bus is not None
    (batch,) = [b for b in bus.batches.values() if b.rows_out]
    assert batch.rows_out == 200_000 and bus.sent[max(bus.batches)] == 200_000
    assert 0 < peak[0] < 16 << 20, f"{peak[0] / 2**20:.1f} MiB"


@pytest.mark.timeout(600)
def test_a_writer_error_fails_the_driver_batch(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    db: str,
    reader: tuple[Running, Path],  # noqa: F811
    kafka_broker: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A bus that cannot be reached fails the batch sent from the driver as a failed
    Spark job would: the query ends with the sink's error, Spark commits nothing for the
    batch, and a run against the bus again sends it."""
    from pyspark.errors import StreamingQueryException

    from tests.integration.bus_support import free_port

    running, task_dir = reader
    _workload(mariadb, db, running, seed=3)
    tag = f"fail{abs(hash(db)) % 10**6}"

    def config(broker: str) -> Path:
        sinks = (
            f"  - type: kafka\n    bootstrap_servers: '{broker}'\n    timeout_s: 3\n"
            f"    topic: '{tag}.{{database}}.{{table}}'\n    schema_topic: '{tag}.schema'\n"
        )
        return _config(tmp_path / f"{tag}.yaml", task_dir, tag, sinks, driver=True)

    runner = _run(spark, config(kafka_broker))  # what the log holds, sent
    committed = max(runner.writer.committed)
    Workload(mariadb, db, seed=4, next_id=10**6).run(20)  # more, for a broker nobody is on
    wait_caught_up(running.task, mariadb)
    dead = f"127.0.0.1:{free_port()}"
    runner = PipelineRunner(load_pipeline_config(config(dead)), spark=spark)
    assert runner.writer.bus is not None
    query = runner.start(available_now=True)
    with pytest.raises(StreamingQueryException) as failed:  # foreachBatch raised
        query.awaitTermination()
    assert "Kafka" in str(failed.value) and not runner.writer.bus.batches
    commits = tmp_path / f"ck_{tag}" / "commits"
    assert max(int(p.name) for p in commits.iterdir() if p.name.isdigit()) == committed
    # the bus back: the failed batch and the rest are sent, every change once
    runner = _run(spark, config(kafka_broker))
    assert runner.writer.bus is not None and min(runner.writer.bus.batches) == committed + 1
    rows = _rows_in_log(spark, task_dir, db)
    got = kafka_read(kafka_broker, [f"{tag}.{db}.orders", f"{tag}.{db}.items", f"{tag}.schema"],
                     rows)  # fmt: skip
    sequences = [_sequence(m.value()) for ms in got.values() for m in ms]
    assert sorted(sequences) == sorted(set(sequences)) and len(sequences) == rows

"""The net path's refusals on a live MariaDB source: each batch is tried, refused, and
applied by the existing path, exactly once per shard (headwater.pipeline.netapply).

A reader task captures one database; a pipeline (``driverApplyMaxRows: 0``, two shards,
a MariaDB target) runs its batch 0 (the Spark job: no offset before it), then a batch 1
that holds one thing only the bytes tell. For each, the test asserts what the code
exposes: the driver's log line ``batch 1 takes the Spark path: <reason>`` (logger
``headwater.pipeline.netapply``) and batch 1 absent from ``NetApply.batches``; the
target equal to the source, every row and column compared (text as hex); and each
shard's checkpoint row exactly as one apply of the batch leaves it (``max_sequence``,
``applies``: :func:`expected_checkpoints`, from the log's change rows).

The refusals produced from a real server:

* A DDL statement in the range: ``TRUNCATE TABLE`` between writes (no schema change: the net path's
  DDL check refuses, not the schema-version one); the net effect cannot express it.
* ``ALTER TABLE ... ADD COLUMN`` between writes: two schema versions in the range, which
  the driver's look at the headers lets through and the job refuses.
* ``SET SESSION binlog_row_image = NOBLOB`` (MariaDB manual, "binlog_row_image": BLOB
  and TEXT columns a statement does not change are left out) and ``MINIMAL`` (an
  update's after image holds only the columns it set, not the key: the change row's key
  then comes from the before image; before that was fixed the existing path failed on
  these updates with a key of nulls).
* A key kept as surrogate escapes: MariaDB stores bytes 0x80-0xFF in an ``ascii``
  column as sent, in strict mode too (seen on the sandbox's MariaDB: ``X'61FF'`` reads
  back as ``61FF``), and Python's ascii codec cannot decode them. utf8mb4 is not
  producible: the server refuses ``X'61FF'`` in strict mode (error 1366) and stores
  ``'a?'`` otherwise.
* A shard's checkpoint inside the range (the same pipeline name with a new checkpoint
  location): the shard transactions refuse (``PartlyApplied``), the existing path applies
  the rows above each checkpoint.
* A value that does not convert exactly into its Arrow type: the same ascii bytes in a
  non-key column. The check is per shard (the survivors' values), so the other shard's
  transaction applies its part; the existing path then skips that shard by its checkpoint
  (``applies`` one more, ``max_sequence`` the range's last, not one row's).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import SparkSession

from headwater.binlog.dump import _escape_surrogates, json_default
from headwater.changes import decode_record
from headwater.config import FilterConfig
from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.direct import offset_at, spark_shard
from headwater.pipeline.netapply import NetPlan
from headwater.pipeline.runner import PipelineRunner
from headwater.sandbox import MariadbSandbox
from headwater.spark.logaccess import open_log
from tests.integration.test_reader_capture import Running, source_config, start_at, wait_caught_up

CHECKPOINT = (
    "SELECT shard, max_sequence, applies, batch_id FROM headwater.headwater_checkpoint"
    " WHERE pipeline = %s AND shard >= 0 ORDER BY shard"
)
REFUSED = re.compile(r"batch (\d+) takes the Spark path: (.*)")


@dataclass
class Case:
    """One database captured by a reader task and a pipeline into the target."""

    spark: SparkSession
    source: MariadbSandbox
    target: MariadbSandbox
    db: str
    dst: str
    path: Path
    running: Running
    #: table -> the SELECT list that reads it exactly (text columns as HEX), key first
    tables: dict[str, str]

    def run(self, caplog: pytest.LogCaptureFixture) -> tuple[PipelineRunner, list[tuple[int, str]]]:
        """One ``availableNow`` run; the refusals logged during it (level, message): INFO
        when the Spark job's task refused, DEBUG when the driver declined the batch up front."""
        wait_caught_up(self.running.task, self.source)
        caplog.set_level(logging.DEBUG, logger="headwater.pipeline.netapply")
        caplog.clear()
        runner = PipelineRunner(load_pipeline_config(self.path), spark=self.spark)
        query = runner.start(available_now=True)
        query.awaitTermination()
        assert query.exception() is None, query.exception()
        refusals = [
            (r.levelno, r.getMessage())
            for r in caplog.records
            if r.name == "headwater.pipeline.netapply" and REFUSED.match(r.getMessage())
        ]
        return runner, refusals

    def rows(self, server: MariadbSandbox, db: str) -> dict[str, list[Any]]:
        return {
            t: server.query(f"SELECT {cols} FROM `{db}`.`{t}` ORDER BY 1", database=None)
            for t, cols in self.tables.items()
        }

    def checkpoints(self) -> list[Any]:
        return self.target.query(CHECKPOINT, (self.path.stem,))

    def assert_synced(self) -> None:
        source = self.rows(self.source, self.db)
        assert all(source.values()), source
        assert self.rows(self.target, self.dst) == source


@pytest.fixture
def case(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Any]:
    """``case(tables, selects)``: the tables created in the source, the reader task
    started before them, the pipeline file written (nothing run yet)."""
    made: list[Case] = []

    def make(creates: tuple[str, ...], tables: dict[str, str]) -> Case:
        name = f"netref_{request.node.name[5:35]}"
        task_dir = tmp_path / "task"
        config = source_config(
            mariadb, name, start=start_at(mariadb), filters=FilterConfig(include=(f"{db}\\..*",))
        )
        mariadb.execute(*creates, database=db)
        running = Running(config, task_dir)
        dst = f"{db}_dst"[:60]
        mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            f"name: {name}\n"
            f"source:\n  path: {task_dir}\n  options: {{driverApplyMaxRows: '0'}}\n"
            f"checkpoint: {tmp_path / 'ck'}\n"
            f"transforms:\n  - rename_database: {{{db}: {dst}}}\n"
            f"sinks:\n  - type: mysql\n    host: {mariadb_target.host}\n"
            f"    port: {mariadb_target.port}\n    user: root\n    create_tables: true\n"
            "    shards: 2\n    ddl: evolve\n"
        )
        made.append(Case(spark, mariadb, mariadb_target, db, dst, path, running, tables))
        return made[-1]

    try:
        yield make
    finally:
        for c in made:
            c.running.stop()
            mariadb_target.execute(
                f"DROP DATABASE IF EXISTS `{c.dst}`",
                f"DELETE FROM headwater.headwater_checkpoint WHERE pipeline = '{c.path.stem}'",
            )


def refused_then_applied(
    case: Case, caplog: pytest.LogCaptureFixture, reason: str
) -> tuple[PipelineRunner, NetPlan]:
    """Batch 1 run: tried by the net path's Spark job and refused for ``reason`` (a regular
    expression, matched in full), applied by the existing path, the target equal to the
    source. Returns the runner and batch 1's plan (for :func:`expected_checkpoints`)."""
    runner, refusals = case.run(caplog)
    assert len(refusals) == 1, refusals
    level, message = refusals[0]
    assert level == logging.INFO, "the driver declined it: no job tried it"
    assert REFUSED.fullmatch(message) and re.fullmatch(
        f"batch 1 takes the Spark path: {reason}", message
    ), message
    net = runner.writer.net
    assert net is not None and 1 not in net.batches
    case.assert_synced()
    plan = net.plan_of(1)
    assert plan is not None  # the driver's look at the headers let it through
    net.close()
    return runner, plan


def expected_checkpoints(
    case: Case, plan: NetPlan, before: list[Any], by_net: frozenset[int] = frozenset()
) -> list[tuple[int, int, int, int]]:
    """Each shard's checkpoint row ``(shard, max_sequence, applies, batch_id)`` after
    batch 1 applied once: a shard in ``by_net`` by the net path (one transaction, up to
    the range's last sequence; the existing path skips it), any other by the existing
    path (one transaction per stretch of rows between DDL statements holding a row of
    the shard and above its checkpoint, up to the shard's last row), routed as the glue routes it
    (:func:`~headwater.pipeline.direct.spark_shard` of the key text the change rows
    carry: headwater.spark.partitions, surrogate escapes as ``undecodable_text_base64``)."""
    log = open_log(plan.options)
    try:
        changes = [
            change
            for rec in log.records(plan.first_seq, plan.end_seq)
            for change in decode_record(
                rec, source=plan.options.source_name, fde=log.fde, schema=log.schema
            )
        ]
    finally:
        log.close()
    held = {shard: max_sequence for shard, max_sequence, _a, _b in before}
    last: dict[int, int] = {}
    stretches: dict[int, set[int]] = {0: set(), 1: set()}
    stretch = 0
    for change in changes:
        if change.op == "ddl":
            stretch += 1
            continue
        assert change.database == case.db and change.key is not None
        text = orjson.dumps(_escape_surrogates(change.key), default=json_default).decode()
        shard = spark_shard(case.dst, change.table, text, 2)
        if change.sequence <= held[shard]:
            continue  # applied before: the existing path skips it
        last[shard] = max(last.get(shard, 0), change.sequence)
        stretches[shard].add(stretch)
    assert set(last) == {0, 1}, "a shard without rows checks nothing"
    out = []
    for shard, _max, applies, _batch in before:
        if shard in by_net:
            out.append((shard, plan.last_sequence, applies + 1, 1))
        else:
            out.append((shard, last[shard], applies + len(stretches[shard]), 1))
    return out


def shard_of(dst: str, table: str, key: dict[str, Any]) -> int:
    return spark_shard(dst, table, orjson.dumps(key).decode(), 2)


INT_TABLE = "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20) NULL, n INT NOT NULL)"
INT_SELECT = {"t": "id, HEX(v), n"}


def seed(server: MariadbSandbox, db: str, ids: range) -> None:
    values = ", ".join(f"({i}, 'v{i}', {i})" for i in ids)
    server.execute(f"INSERT INTO t VALUES {values}", database=db)


def test_a_truncate_in_the_range_is_refused_and_applied_by_the_existing_path(
    case: Any, caplog: pytest.LogCaptureFixture
) -> None:
    c: Case = case((INT_TABLE,), INT_SELECT)
    seed(c.source, c.db, range(1, 21))
    c.run(caplog)  # batch 0: the Spark job
    before = c.checkpoints()
    c.source.execute(
        "UPDATE t SET v = 'before truncate', n = n + 100",
        "TRUNCATE TABLE t",
        *(f"INSERT INTO t VALUES ({i}, 'after {i}', {i})" for i in range(15, 45)),
        "UPDATE t SET n = -n WHERE id % 3 = 0",
        "DELETE FROM t WHERE id % 7 = 0",
        database=c.db,
    )
    _runner, plan = refused_then_applied(c, caplog, r"a DDL statement in store record \d+")
    assert c.checkpoints() == expected_checkpoints(c, plan, before)
    assert c.target.query(f"SELECT MIN(id), COUNT(*) FROM `{c.dst}`.t") == [(15, 26)]


def test_a_schema_change_in_the_range_is_refused_and_applied_by_the_existing_path(
    case: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``ALTER TABLE ... ADD COLUMN`` between writes: two schema versions of the table in
    the range. The driver's look at the headers lets it through (each version alone is
    one the key-first read takes); the job refuses it, the existing path applies the
    rows on both sides of the DDL (with ``ddl: evolve``, the column added in between)."""
    c: Case = case((INT_TABLE,), {"t": "id, HEX(v), n, extra"})
    seed(c.source, c.db, range(1, 21))
    c.run(caplog)
    before = c.checkpoints()
    c.source.execute(
        "UPDATE t SET n = n + 100 WHERE id < 15",
        "ALTER TABLE t ADD COLUMN extra INT NULL",
        "UPDATE t SET extra = id * 2 WHERE id % 2 = 0",
        *(f"INSERT INTO t VALUES ({i}, 'after {i}', {i}, -{i})" for i in range(30, 50)),
        "DELETE FROM t WHERE id % 7 = 0",
        database=c.db,
    )
    _runner, plan = refused_then_applied(c, caplog, "the schema changes in the range")
    assert c.checkpoints() == expected_checkpoints(c, plan, before)


def test_a_checkpoint_inside_the_range_is_refused_and_the_rest_applied_by_the_existing_path(
    case: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The same pipeline name with a new checkpoint location (other batch boundaries):
    its first batch starts where the first location's batch 1 started, so each shard's
    checkpoint (batch 1's, applied by the net path) lies inside the range. The shard
    transactions refuse (``PartlyApplied``: a net effect cannot leave out the applied
    part) and the existing path applies only the rows above each checkpoint."""
    c: Case = case((INT_TABLE,), INT_SELECT)
    seed(c.source, c.db, range(1, 21))
    c.run(caplog)
    c.source.execute("UPDATE t SET n = n + 100", "DELETE FROM t WHERE id % 6 = 0", database=c.db)
    runner, refusals = c.run(caplog)
    assert refusals == [] and runner.writer.net is not None
    assert set(runner.writer.net.batches) == {1}  # batch 1: the net path
    first = offset_at(c.path.parent / "ck", 0)
    assert first is not None
    c.source.execute(
        "UPDATE t SET v = 'later' WHERE id % 2 = 0",
        *(f"INSERT INTO t VALUES ({i}, 'later {i}', {i})" for i in range(40, 60)),
        "DELETE FROM t WHERE id % 5 = 0",
        database=c.db,
    )
    before = c.checkpoints()
    second = c.path.parent / "second" / c.path.name
    second.parent.mkdir()
    second.write_text(
        c.path.read_text()
        .replace(f"checkpoint: {c.path.parent / 'ck'}", f"checkpoint: {second.parent / 'ck'}")
        .replace(
            "{driverApplyMaxRows: '0'}",
            f"{{driverApplyMaxRows: '0', startingPosition: 'seq:{first.seq}'}}",
        )
    )
    again = dataclasses.replace(c, path=second)
    runner, refusals = again.run(caplog)
    assert len(refusals) == 1 and refusals[0][0] == logging.INFO, refusals
    assert re.fullmatch(
        r"batch 0 takes the Spark path: shard [01] of batch 0: the checkpoint \(\d+\) is inside"
        r" the range \[\d+, \d+\]",
        refusals[0][1],
    ), refusals
    net = runner.writer.net
    assert net is not None and net.batches == {}
    c.assert_synced()
    plan = net.plan_of(0)
    assert plan is not None and plan.first_seq == first.seq
    net.close()
    assert all(plan.first_sequence <= m < plan.last_sequence for _s, m, _a, _b in before)
    assert c.checkpoints() == [
        (s, m, a, 0) for s, m, a, _b in expected_checkpoints(c, plan, before)
    ]


def not_full_image(case: Any, caplog: pytest.LogCaptureFixture, image: str) -> None:
    """Updates logged with ``binlog_row_image = image`` (set for the session) between
    FULL ones: refused, applied by the existing path, once per shard."""
    c: Case = case(
        ("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20) NULL, n INT NOT NULL,"
         " body TEXT NULL)",),
        {"t": "id, HEX(v), n, HEX(body)"},
    )  # fmt: skip
    c.source.execute(
        "INSERT INTO t VALUES " + ", ".join(f"({i}, 'v{i}', {i}, 'body {i}')" for i in range(40)),
        database=c.db,
    )
    c.run(caplog)
    before = c.checkpoints()
    conn = c.source.connect(c.db)
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE t SET v = CONCAT(v, '+'), body = CONCAT(body, '+') WHERE id < 5")
            cur.execute(f"SET SESSION binlog_row_image = '{image}'")
            # after images without the columns the statement does not set (MINIMAL: id,
            # v, body; NOBLOB: body), MINIMAL before images with the key only
            cur.execute("UPDATE t SET n = n * 10 WHERE id % 2 = 0")
            cur.execute("DELETE FROM t WHERE id % 5 = 1")
            cur.execute("SET SESSION binlog_row_image = 'FULL'")
            cur.execute("UPDATE t SET v = NULL WHERE id % 9 = 0")
    finally:
        conn.close()
    # the key pass's ConfigError (headwater.spark.asofread) as the job reports it
    _runner, plan = refused_then_applied(
        c,
        caplog,
        r"as_of: headwater replay: partial row image: \S+\.t change in store record"
        r" \d+ lacks columns \(binlog_row_image=MINIMAL or NOBLOB\); a replay needs"
        r" binlog_row_image=FULL",
    )
    assert c.checkpoints() == expected_checkpoints(c, plan, before)


def test_a_noblob_row_image_is_refused(case: Any, caplog: pytest.LogCaptureFixture) -> None:
    not_full_image(case, caplog, "NOBLOB")


def test_a_minimal_row_image_is_refused(case: Any, caplog: pytest.LogCaptureFixture) -> None:
    not_full_image(case, caplog, "MINIMAL")


def test_a_key_kind_the_key_pass_does_not_read_is_declined_up_front(
    case: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A DATETIME primary key (headwater.spark.asofscan.key_scan_kinds: integer or
    utf8/ascii text keys only): the driver declines the batch from the record headers
    and the schema history (logged at DEBUG), no job runs."""
    c: Case = case(
        ("CREATE TABLE d (at DATETIME(3) PRIMARY KEY, n INT NOT NULL)",),
        {"d": "CAST(at AS CHAR), n"},
    )
    c.source.execute(
        "INSERT INTO d VALUES "
        + ", ".join(f"('2024-01-01 00:00:{i:02}.{i:03}', {i})" for i in range(30)),
        database=c.db,
    )
    c.run(caplog)
    before = c.checkpoints()
    c.source.execute("UPDATE d SET n = n + 100", "DELETE FROM d WHERE n % 4 = 0", database=c.db)
    runner, refusals = c.run(caplog)
    assert refusals == [
        (logging.DEBUG, f"batch 1 takes the Spark path: {c.db}.d: no primary key the"
         " key-first read reads"),
    ]  # fmt: skip
    net = runner.writer.net
    assert net is not None and 1 not in net.batches and net.plan_of(1) is None
    net.close()
    c.assert_synced()
    after = c.checkpoints()
    assert [(s, a, b) for s, _m, a, b in after] == [(s, a + 1, 1) for s, _m, a, _b in before]


ASCII_TABLE = (
    "CREATE TABLE a (k VARCHAR(12) CHARACTER SET ascii PRIMARY KEY,"
    " note VARCHAR(12) CHARACTER SET ascii NULL, n INT NOT NULL)"
)
ASCII_SELECT = {"a": "HEX(k), HEX(note), n"}


def test_a_key_with_bytes_invalid_in_its_charset_is_refused(
    case: Any, caplog: pytest.LogCaptureFixture
) -> None:
    c: Case = case((ASCII_TABLE,), ASCII_SELECT)
    c.source.execute(
        "INSERT INTO a VALUES " + ", ".join(f"('k{i}', 'n{i}', {i})" for i in range(30)),
        database=c.db,
    )
    c.run(caplog)
    before = c.checkpoints()
    c.source.execute(
        "UPDATE a SET n = n + 1000",
        "INSERT INTO a VALUES (X'6BFF', 'high byte', 1), (X'6B81', NULL, 2)",
        "DELETE FROM a WHERE n % 4 = 0",
        "UPDATE a SET n = -n WHERE k = X'6BFF'",
        database=c.db,
    )
    assert c.source.query("SELECT HEX(k) FROM a WHERE n = -1", database=c.db) == [("6BFF",)]
    _runner, plan = refused_then_applied(
        c, caplog, "unroutable key: text the decoder keeps as surrogate escapes"
    )
    assert c.checkpoints() == expected_checkpoints(c, plan, before)


def test_a_value_beyond_its_arrow_type_is_refused_by_its_shard_only(
    case: Any, caplog: pytest.LogCaptureFixture
) -> None:
    c: Case = case((ASCII_TABLE,), ASCII_SELECT)
    keys = [f"k{i}" for i in range(40)]
    c.source.execute(
        "INSERT INTO a VALUES " + ", ".join(f"('{k}', 'n', {i})" for i, k in enumerate(keys)),
        database=c.db,
    )
    c.run(caplog)
    before = c.checkpoints()
    # a bad value left in a key of shard 0, one overwritten in a key of shard 1 (not a
    # survivor: shard 1's transaction applies its part)
    bad = next(k for k in keys if shard_of(c.dst, "a", {"k": k}) == 0)
    passing = next(k for k in keys if shard_of(c.dst, "a", {"k": k}) == 1)
    c.source.execute(
        "UPDATE a SET n = n + 1000, note = 'ok'",
        f"UPDATE a SET note = X'41FF42' WHERE k = '{bad}'",  # 0xFF: not ascii
        f"UPDATE a SET note = X'80' WHERE k = '{passing}'",
        f"UPDATE a SET note = 'fine' WHERE k = '{passing}'",
        "DELETE FROM a WHERE n % 6 = 0",
        database=c.db,
    )
    _runner, plan = refused_then_applied(
        c, caplog, r"\S+\.a\.note: a value that does not convert to string exactly"
    )
    # shard 1 applied by the net path (up to the range's last sequence) and skipped by
    # the existing path; shard 0 by the existing path
    assert c.checkpoints() == expected_checkpoints(c, plan, before, frozenset({1}))

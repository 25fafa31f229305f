"""Large micro-batches applied as their net effect (headwater.pipeline.netapply) leave the
target exactly as the existing path does.

One reader task captures a seeded random workload on two tables (an INT key and a text
key holding quotes, backslashes, control characters and non-ASCII text): inserts,
updates, key-changing updates (chains, and swaps through a free key in one transaction),
deletes, reinserts of deleted keys, NULL flips. Two pipelines (``driverApplyMaxRows: 0``,
two shards, renames of the database and of a column) read it: one with ``netApply``
(the default), one with ``netApply: false``. Batch 0 is the Spark job's (no offset before
it in Spark's log); batch 1, the workload, goes through the net path in the first. Both
targets must equal the source row by row. Then: the batch applied again changes nothing;
with one shard's checkpoint set back and its rows spoilt, the driver's row path replays
the batch and restores them (the other shard is skipped by its checkpoint); a batch with a
DDL statement, and a pipeline with a mask transform, take the existing path.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import SparkSession

from headwater.config import FilterConfig
from headwater.pipeline.columns import source_options
from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.direct import DirectApply, offset_at, spark_shard
from headwater.pipeline.netapply import NetApply, NetRead, net_reads, net_tables
from headwater.pipeline.runner import PipelineRunner
from headwater.sandbox import MariadbSandbox
from headwater.spark.offsets import parse_options
from tests.integration.test_reader_capture import Running, source_config, start_at, wait_caught_up

TABLES = (
    "CREATE TABLE acct (id INT PRIMARY KEY, name VARCHAR(40) NULL, bal DECIMAL(10,2) NULL,"
    " n BIGINT NOT NULL, score DOUBLE NULL)",
    "CREATE TABLE tags (k VARCHAR(30) CHARACTER SET utf8mb4 PRIMARY KEY, v INT NULL,"
    " note VARCHAR(50) CHARACTER SET utf8mb4 NULL)",
)
PIECES = [
    '"',
    "\\\\",
    "\\n",
    "\\t",
    "\\r",
    "\\Z",
    "\\b",
    "a",
    "b",
    "é",
    "€",
    "日本",
    "😀",
    " ",
    "'",
]


def _text(rng: random.Random) -> str:
    """A SQL string literal's content (escapes as MariaDB reads them)."""
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6))).replace("'", "''")


class Workload:
    def __init__(self, server: MariadbSandbox, db: str, seed: int) -> None:
        self.server, self.db, self.rng = server, db, random.Random(seed)
        self.ids: set[int] = set()
        self.gone: set[int] = set()
        self.tags: set[str] = set()

    def statements(self) -> list[str]:
        r = self.rng
        kind = r.random()
        bal = "NULL" if r.random() < 0.2 else f"{r.randint(-99999, 99999) / 100:.2f}"
        name = "NULL" if r.random() < 0.3 else f"'{_text(r)}'"
        score = "NULL" if r.random() < 0.3 else repr(r.uniform(-1e6, 1e6))
        if kind < 0.25 or len(self.ids) < 4:
            pick = r.choice(sorted(self.gone)) if self.gone and r.random() < 0.4 else None
            i = pick if pick is not None else r.randint(1, 10**6)
            if i in self.ids:
                return []
            self.ids.add(i)
            self.gone.discard(i)
            return [f"INSERT INTO acct VALUES ({i}, {name}, {bal}, {r.randint(0, 9)}, {score})"]
        i = r.choice(sorted(self.ids))
        if kind < 0.45:
            return [f"UPDATE acct SET name = {name}, bal = {bal}, n = n + 1 WHERE id = {i}"]
        if kind < 0.52:  # a key change (a chain when the key moves again)
            new = r.randint(1, 10**6)
            if new in self.ids:
                return []
            self.ids.discard(i)
            self.ids.add(new)
            self.gone.add(i)
            return [f"UPDATE acct SET id = {new}, score = {score} WHERE id = {i}"]
        if kind < 0.56 and len(self.ids) > 1:  # a swap through a free key
            j = r.choice(sorted(self.ids - {i}))
            return [
                f"UPDATE acct SET id = -1 WHERE id = {i}",
                f"UPDATE acct SET id = {i} WHERE id = {j}",
                f"UPDATE acct SET id = {j} WHERE id = -1",
            ]
        if kind < 0.63:
            self.ids.discard(i)
            self.gone.add(i)
            return [f"DELETE FROM acct WHERE id = {i}"]
        v = "NULL" if r.random() < 0.3 else str(r.randint(-5, 5))
        k = _text(r)
        if kind < 0.8 or not self.tags:
            self.tags.add(k)
            return [f"INSERT INTO tags VALUES ('{k}', {v}, {name}) ON DUPLICATE KEY UPDATE v = {v}"]
        old = r.choice(sorted(self.tags))
        if kind < 0.9:
            return [f"UPDATE tags SET v = {v}, note = {name} WHERE k = '{old}'"]
        if kind < 0.95 and k not in self.tags:
            self.tags.discard(old)
            self.tags.add(k)
            return [f"UPDATE IGNORE tags SET k = '{k}' WHERE k = '{old}'"]
        self.tags.discard(old)
        return [f"DELETE FROM tags WHERE k = '{old}'"]

    def run(self, transactions: int) -> None:
        conn = self.server.connect(database=self.db)
        try:
            with conn.cursor() as cur:
                for _ in range(transactions):
                    cur.execute("BEGIN")
                    for _ in range(self.rng.randint(1, 5)):
                        for sql in self.statements():
                            cur.execute(sql)
                    cur.execute("COMMIT")
                # every row's last write in this run: a shard's replay restores them all
                cur.execute("UPDATE acct SET n = n + 1")
                cur.execute("UPDATE tags SET v = COALESCE(v, 0) + 1")
        finally:
            conn.close()


def rows(server: MariadbSandbox, db: str, note: str = "note") -> dict[str, list[Any]]:
    return {
        "acct": server.query(
            f"SELECT id, name, bal, n, score FROM `{db}`.acct ORDER BY id", database=None
        ),
        "tags": server.query(
            f"SELECT HEX(k), v, {note} FROM `{db}`.tags ORDER BY HEX(k)", database=None
        ),
    }


def _config(path: Path, task_dir: Path, src: str, dst: str, target: MariadbSandbox,
            options: str, extra: str = "") -> Path:  # fmt: skip
    path.write_text(
        f"name: {path.stem}\n"
        f"source:\n  path: {task_dir}\n  options: {{driverApplyMaxRows: '0'{options}}}\n"
        f"checkpoint: {path.parent / ('ck_' + path.stem)}\n"
        "transforms:\n"
        f"  - rename_database: {{{src}: {dst}}}\n"
        "  - {rename_columns: {note: remark}, tables: ['.*\\.tags']}\n"
        f"{extra}"
        f"sinks:\n  - type: mysql\n    host: {target.host}\n    port: {target.port}\n"
        "    user: root\n    create_tables: true\n    shards: 2\n    ddl: evolve\n"
    )
    return path


def _run(spark: SparkSession, path: Path) -> PipelineRunner:
    runner = PipelineRunner(load_pipeline_config(path), spark=spark)
    query = runner.start(available_now=True)
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    return runner


def test_net_batches_give_the_state_the_row_path_gives(
    spark: SparkSession,
    mariadb: MariadbSandbox,
    mariadb_target: MariadbSandbox,
    db: str,
    tmp_path: Path,
) -> None:
    task_dir = tmp_path / "task"
    config = source_config(
        mariadb, f"net_{abs(hash(db)) % 10**6}", start=start_at(mariadb),
        filters=FilterConfig(include=(f"{db}\\..*",)),
    )  # fmt: skip
    mariadb.execute(*TABLES, database=db)
    running = Running(config, task_dir)
    paths: dict[bool, tuple[str, Path]] = {}
    try:
        workload = Workload(mariadb, db, seed=5)
        mariadb.execute("INSERT INTO acct VALUES (1, 'one', 1.00, 0, NULL)", database=db)
        workload.run(40)  # keys held before batch 1: some of them batch 1 deletes or moves
        wait_caught_up(running.task, mariadb)
        for net in (True, False):
            dst = f"{db}_{'net' if net else 'row'}"[:60]
            mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")
            options = "" if net else ", netApply: 'false'"
            paths[net] = (dst, _config(tmp_path / f"netpath_{net}.yaml", task_dir, db, dst,
                                       mariadb_target, options))  # fmt: skip
            _run(spark, paths[net][1])  # batch 0: the Spark job
        held = _keys(mariadb, db)
        workload.run(120)
        wait_caught_up(running.task, mariadb)
        # the net path removes exactly the keys held before the batch and gone after it:
        # not the keys the batch inserted (or moved to) and then deleted (or moved away)
        gone = {t: sorted(held[t] - keys) for t, keys in _keys(mariadb, db).items()}
        assert gone["acct"] and gone["tags"]
        runners = {net: _run(spark, path) for net, (_dst, path) in paths.items()}
        source = rows(mariadb, db)
        assert len(source["acct"]) > 10 and len(source["tags"]) > 5
        for dst, _path in paths.values():
            assert rows(mariadb_target, dst, "remark") == source, dst
        assert runners[False].writer.net is None
        net_path = runners[True].writer.net
        assert net_path is not None
        assert set(net_path.batches) == {1}
        done = net_path.batches[1]
        assert done.rows_in > 300 and done.rows_out == done.rows_in
        assert set(done.tables_in) == {f"{db}.acct", f"{db}.tags"}
        _walks_agree(net_path, done.tables_in, gone)

        # a new pipeline whose batch 0 (from a start option: no offset file holds its
        # start) is the workload: the net path takes it, same rows as the row path
        first = offset_at(paths[True][1].parent / "ck_netpath_True", 0)
        assert first is not None
        starts: dict[bool, PipelineRunner] = {}
        for net in (True, False):
            dst = f"{db}_{'n0' if net else 'r0'}"[:60]
            mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")
            options = f", startingPosition: 'seq:{first.seq}'" + (
                "" if net else ", netApply: 'false'"
            )
            starts[net] = _run(spark, _config(tmp_path / f"start0_{net}.yaml", task_dir, db, dst,
                                              mariadb_target, options))  # fmt: skip
        assert starts[True].writer.net is not None and set(starts[True].writer.net.batches) == {0}
        assert rows(mariadb_target, f"{db}_n0"[:60], "remark") == rows(
            mariadb_target, f"{db}_r0"[:60], "remark"
        )

        # the batch again: every shard's checkpoint skips it
        dst = paths[True][0]
        ckpt = "SELECT shard, max_sequence, applies FROM headwater.headwater_checkpoint" \
            " WHERE pipeline = 'netpath_True' ORDER BY shard"  # fmt: skip
        before = mariadb_target.query(ckpt)
        assert net_path.apply(spark, 1) is not None
        assert mariadb_target.query(ckpt) == before
        assert rows(mariadb_target, dst, "remark") == source

        # shard 1 behind (its checkpoint back to batch 0's, its rows spoilt): the driver's
        # row path replays the batch, skips shard 0 and restores shard 1
        ours = [
            i for (i,) in mariadb_target.query(f"SELECT id FROM `{dst}`.acct")
            if spark_shard(dst, "acct", orjson.dumps({"id": i}).decode(), 2) == 1
        ]  # fmt: skip
        assert ours
        mariadb_target.execute(
            f"UPDATE `{dst}`.acct SET n = -7 WHERE id IN ({', '.join(map(str, ours))})",
            "UPDATE headwater.headwater_checkpoint SET max_sequence = 0"
            " WHERE pipeline = 'netpath_True' AND shard = 1",
        )
        config = load_pipeline_config(paths[True][1])
        sinks = runners[True].sinks
        options = replace(parse_options(source_options(config, sinks)), direct_max_rows=10**9)
        driver = DirectApply(config.checkpoint, options, sinks, config.transforms)
        assert driver.apply(1) is not None
        driver.close()
        assert rows(mariadb_target, dst, "remark") == source
        ck = mariadb_target.query(ckpt)
        assert ck[0] == before[0]  # shard 0: skipped
        assert 0 < ck[1][1] <= before[1][1]  # shard 1: applied again, up to its last row

        # a DDL in the batch: the existing path
        mariadb.execute("ALTER TABLE acct ADD COLUMN extra INT NULL", database=db)
        mariadb.execute("INSERT INTO acct (id, n) VALUES (-5, 3)", database=db)
        wait_caught_up(running.task, mariadb)
        runner = _run(spark, paths[True][1])
        assert runner.writer.net is not None and 2 not in runner.writer.net.batches
        got = mariadb_target.query(f"SELECT id, n, extra FROM `{dst}`.acct WHERE id = -5")
        assert got == [(-5, 3, None)]
    finally:
        running.stop()
        for dst, _path in paths.values():
            mariadb_target.execute(f"DROP DATABASE IF EXISTS `{dst}`")
        mariadb_target.execute(  # (other tests' pipelines read other tasks named "task")
            "DELETE FROM headwater.headwater_checkpoint WHERE pipeline LIKE 'netpath\\_%'"
        )


def _tables(read: NetRead) -> dict[tuple[str, str], Any]:
    """A read's upserts and removes per table (removes in the scanner's table order:
    sorted)."""
    from headwater.sinks.netwrite import StreamedRows

    return {
        (t.database, t.table): (
            (t.upserts.table() if isinstance(t.upserts, StreamedRows) else t.upserts).to_pylist(),
            sorted(map(repr, t.removes.to_pylist())),
        )
        for t in read.tables
    }


def _keys(server: MariadbSandbox, db: str) -> dict[str, set[str]]:
    """Each table's keys, as the removes' rows repr them."""
    return {
        "acct": {repr({"id": i}) for (i,) in server.query("SELECT id FROM acct", database=db)},
        "tags": {repr({"k": k}) for (k,) in server.query("SELECT k FROM tags", database=db)},
    }


def _walks_agree(net_path: NetApply, tables_in: dict[str, int], gone: dict[str, list[str]]) -> None:
    """Batch 1's net effect per shard is the same walked in C (walk.c, each table into its
    own scanner) as in Python, with the payloads kept or read again (KEEP_BYTES 0); and
    one walk for both shards (net_reads: the walk's Scanner fans the keys out) gives each
    shard what a walk of that shard alone gives. The shards' removes are ``gone``: the
    keys held when the batch began and not when it ended."""
    from headwater.spark import asofscan
    from headwater.spark.logaccess import open_log

    plan = net_path.plan_of(1)
    assert plan is not None
    plan = replace(plan, shards=2)
    keep = asofscan.KEEP_BYTES
    removed = 0
    modes = ((False, keep), (True, keep), (True, 0))
    alone = {}
    for shard in (0, 1):
        got = []
        for in_c, keep_bytes in modes:
            asofscan.WALK_IN_C, asofscan.KEEP_BYTES = in_c, keep_bytes
            log = open_log(plan.options)
            try:
                read = net_tables(plan, shard, log)
                tables = _tables(read)  # survivors decoded while the log is open
            finally:
                asofscan.WALK_IN_C, asofscan.KEEP_BYTES = True, keep
                log.close()
            assert read.tables_in == tables_in
            got.append(tables)
        assert got[1] == got[0] and got[2] == got[0]
        assert sum(len(u) for u, _r in got[0].values()) > 3
        removed += sum(len(r) for _u, r in got[0].values())
        alone[shard] = got[0]
    assert removed > 0
    assert alone[0] != alone[1]
    for table, want in gone.items():
        got = [r for shard in alone.values() for (_d, t), (_u, rs) in shard.items() if t == table
               for r in rs]  # fmt: skip
        assert sorted(got) == want, table
    for in_c, keep_bytes in modes:
        asofscan.WALK_IN_C, asofscan.KEEP_BYTES = in_c, keep_bytes
        log = open_log(plan.options)
        try:
            reads = net_reads(plan, log)
            decoded = {k: _tables(r) for k, r in reads.items()}
        finally:
            asofscan.WALK_IN_C, asofscan.KEEP_BYTES = True, keep
            log.close()
        assert {k: r.tables_in for k, r in reads.items()} == {0: tables_in, 1: tables_in}
        assert decoded == alone


def test_a_mask_transform_takes_the_existing_path(tmp_path: Path) -> None:
    task = tmp_path / "task"
    task.mkdir()
    path = tmp_path / "p.yaml"
    path.write_text(
        f"name: p\nsource:\n  path: {task}\ncheckpoint: {tmp_path / 'ck'}\n"
        "transforms:\n  - mask: {name: {fixed: hidden}}\n"
        "sinks:\n  - type: mysql\n    host: 127.0.0.1\n    port: 1\n    user: root\n"
    )
    config = load_pipeline_config(path)
    from headwater.pipeline.sinks import build_sink

    sinks = [build_sink(s, config) for s in config.sinks]
    assert NetApply.of(config, sinks) is None
    plain = tmp_path / "q.yaml"
    plain.write_text(path.read_text().replace("name: p", "name: q").split("transforms:")[0]
                     + "sinks:" + path.read_text().split("sinks:")[1])  # fmt: skip
    config = load_pipeline_config(plain)
    assert NetApply.of(config, [build_sink(s, config) for s in config.sinks]) is not None

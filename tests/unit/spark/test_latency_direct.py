"""The pieces of the driver path of small micro-batches (headwater.pipeline.direct) and of
the source's burst gate that need no server: Spark's offset log, the gate's cut of a live
workload's commit, the ``driverApplyMaxRows`` option, the transforms against the
executors' Python pass, the progress reports, and the shard hash against Spark's own
``xxhash64`` (a local Spark session, no database)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from headwater.changes.schema import change_arrow_schema
from headwater.errors import ConfigError
from headwater.pipeline.direct import (
    DirectApply,
    DirectBatch,
    _xxh64,
    offset_at,
    spark_shard,
    xxhash64,
    xxhash64_column,
)
from headwater.pipeline.status import OBSERVED_IN, _observed, _observed_tables
from headwater.position import Position
from headwater.spark.offsets import DEFAULT_DIRECT_MAX_ROWS, LogOffset, parse_options
from headwater.spark.source import BURST_RECORDS, BurstGate
from headwater.spark.transforms import (
    ExcludeSpec,
    MaskRule,
    MaskSpec,
    RenameColumnsSpec,
    RenameDatabaseSpec,
    RenameTableSpec,
    _RowPass,
)


def _keys() -> list[tuple[str, str, str | None]]:
    """Database, table and key texts of every length round the hash's 4-, 8- and
    32-byte steps, multi-byte UTF-8, and a NULL key."""
    rng = random.Random(17)
    alphabet = 'abcXYZ019{}":,é€😀 '
    out: list[tuple[str, str, str | None]] = [("", "", None), ("db", "t", None), ("db", "t", "")]
    for n in range(80):
        key = "".join(rng.choice(alphabet) for _ in range(n))
        out.append((f"db{n % 3}", f"table_{n}", key))
    out += [("shop", "orders", f'{{"id": {i}}}') for i in range(-5, 60)]
    return out


def test_xxhash64_is_sparks_and_shards_as_the_glue_does(spark: SparkSession) -> None:
    keys = _keys()
    df = spark.createDataFrame(keys, "d string, t string, k string")
    rows = df.selectExpr(
        "d", "t", "k", "xxhash64(d, t, k) AS h", "CAST(pmod(xxhash64(d, t, k), 2) AS INT) AS s2",
        "CAST(pmod(xxhash64(d, t, k), 5) AS INT) AS s5",
    ).collect()  # fmt: skip
    assert len(rows) == len(keys)
    for r in rows:
        assert xxhash64(r["d"], r["t"], r["k"]) == r["h"], (r["d"], r["t"], r["k"])
        assert spark_shard(r["d"], r["t"], r["k"], 2) == r["s2"]
        assert spark_shard(r["d"], r["t"], r["k"], 5) == r["s5"]


def test_xxhash64_column_is_the_scalar_hash() -> None:
    """The numpy hash of a key column (direct._route's) equals :func:`_xxh64` value by
    value: every length round the 4-, 8- and 32-byte steps, multi-byte UTF-8, nulls
    (the seed as it is), seeds of every bit, a sliced array and a large_string one."""
    rng = random.Random(5)
    keys = [k for _d, _t, k in _keys()] * 2 + ["x" * n for n in range(0, 130)]
    seeds = [rng.getrandbits(64) for _ in keys]
    want = [s if k is None else _xxh64(k.encode(), s) for k, s in zip(keys, seeds, strict=True)]
    arr = pa.array(keys, pa.string())
    got = xxhash64_column(arr, np.array(seeds, dtype=np.uint64))
    assert got.dtype == np.uint64 and got.tolist() == want
    part = xxhash64_column(arr.slice(7, 60), np.array(seeds[7:67], dtype=np.uint64))
    assert part.tolist() == want[7:67]
    large = xxhash64_column(pa.array(keys, pa.large_string()), np.array(seeds, np.uint64))
    assert large.tolist() == want
    assert xxhash64_column(pa.array([], pa.string()), np.zeros(0, np.uint64)).tolist() == []
    # as Spark's chained xxhash64(database, table, key): the key seeded by the names' hash
    seed = _xxh64(b"users", _xxh64(b"shop", 42))
    one = xxhash64_column(pa.array(['{"id": 7}']), np.array([seed], np.uint64))
    assert int(one.view(np.int64)[0]) == xxhash64("shop", "users", '{"id": 7}')


def test_xxhash64_of_known_values() -> None:
    # Spark 4.3: SELECT xxhash64('Spark') = -4294468057691064905 (its function docs'
    # example, seed 42); nulls leave the seed as it is.
    assert xxhash64("Spark") == -4294468057691064905
    assert xxhash64(None) == 42
    assert xxhash64("a", None) == xxhash64("a")


def _offset_file(checkpoint: Path, batch: int, doc: str, version: str = "v1") -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1795525196288,"conf":{}}'
    (checkpoint / "offsets" / str(batch)).write_text(f"{version}\n{meta}\n{doc}")


def test_offsets_come_from_sparks_offset_log(tmp_path: Path) -> None:
    _offset_file(tmp_path, 3, '{"seq": 1302, "row": 0, "last_position": "0:1:1353581:0"}')
    _offset_file(tmp_path, 4, '{"seq": 1310, "row": 7}')
    assert offset_at(tmp_path, 3) == LogOffset(1302, 0)
    assert offset_at(tmp_path, 3).last_position == Position(0, 1, 1353581, 0)  # type: ignore[union-attr]
    assert offset_at(tmp_path, 4) == LogOffset(1310, 7)
    # batch 0's start (the initial offset) is in no file; missing and foreign files
    assert offset_at(tmp_path, -1) is None
    assert offset_at(tmp_path, 5) is None
    _offset_file(tmp_path, 6, '{"seq": 1}', version="v2")
    _offset_file(tmp_path, 7, '{"partition": 3}')
    _offset_file(tmp_path, 8, "not json")
    assert [offset_at(tmp_path, b) for b in (6, 7, 8)] == [None, None, None]


def test_driver_apply_option() -> None:
    assert parse_options({"path": "/x"}).direct_max_rows == DEFAULT_DIRECT_MAX_ROWS
    assert parse_options({"path": "/x", "driverApplyMaxRows": "0"}).direct_max_rows == 0
    assert parse_options({"path": "/x", "DRIVERAPPLYMAXROWS": "250"}).direct_max_rows == 250
    with pytest.raises(ConfigError) as e:
        parse_options({"path": "/x", "driverApplyMaxRows": "-1"})
    assert e.value.field == "driverApplyMaxRows"


class _Log:
    def __init__(self, ends: list[int]) -> None:
        self.ends = ends
        self.polls = 0

    def end(self) -> int:
        self.polls += 1
        return self.ends[min(self.polls, len(self.ends)) - 1]


def test_a_live_commit_after_an_idle_stream_is_cut_at_once() -> None:
    now = [100.0]

    def sleep(s: float) -> None:
        now[0] += s

    gate = BurstGate(0.2, 0.05, clock=lambda: now[0], sleep=sleep)
    log = _Log([12, 40, 75])
    # one commit's record after idle: no poll, no wait
    assert gate.settle(11, log.end, begin=10) == 11
    assert log.polls == 0 and now[0] == 100.0
    # a catch-up that shows itself at the first look is still waited for
    gate.nothing_new()
    first = 10 + BURST_RECORDS
    log = _Log([first + 100, first + 300, first + 300])
    assert gate.settle(first, log.end, begin=10) == first + 300
    assert log.polls == 3


def _direct(*specs: object) -> DirectApply:
    return DirectApply(Path("/nonexistent"), parse_options({"path": "/x"}), [], specs)


def _change(i: int, op: str = "update") -> dict[str, object]:
    row: dict[str, object] = {name: None for name in change_arrow_schema().names}
    row.update(
        source="s", database="shop", table="users", op=op, ts_us=1_000 + i, sequence=i,
        change_id=0, file_num=1, offset=100 + i, event_index=0, gtid="", txn_id="",
        schema_version=1, key=f'{{"id": {i}}}', before_key=None,
        before=f'{{"id": {i}, "email": "u{i}@x.org", "pw": "p{i}", "n": {i}.5}}',
        after=f'{{"id": {i}, "email": "v{i}@x.org", "pw": "q{i}", "n": 1e{i}}}',
    )  # fmt: skip
    return row


def test_driver_transforms_equal_the_executors_python_pass() -> None:
    specs = (
        ExcludeSpec(("pw",)),
        RenameColumnsSpec({"email": "mail"}, tables=(r"shop\.users",)),
        MaskSpec({"mail": MaskRule("keep_first", n=2)}),
        RenameDatabaseSpec({"shop": "shop2"}),
    )
    rows = [_change(i) for i in range(5)]
    schema = change_arrow_schema()
    python_specs = tuple((i, s) for i, s in enumerate(specs[:3]))
    batch = pa.RecordBatch.from_pylist([dict(r) for r in rows], schema=schema)
    executor = [
        r for b in _RowPass(python_specs, tuple(schema.names))([batch]) for r in b.to_pylist()
    ]
    driver = _direct(*specs)._transform([dict(r) for r in rows])
    assert [r["database"] for r in driver] == ["shop2"] * 5
    assert [{**r, "database": "shop"} for r in driver] == executor
    assert orjson.loads(driver[0]["after"]) == {"id": 0, "mail": "v0******", "n": 1.0}
    # renames only: the images' text is left as the decoder wrote it
    names_only = _direct(RenameDatabaseSpec({"shop": "x"}))._transform([dict(r) for r in rows])
    assert [r["after"] for r in names_only] == [r["after"] for r in rows]


def test_driver_renames_on_columns_equal_the_row_operations() -> None:
    """Renames of databases and tables only (direct._transform_table: once per distinct
    name pair) give the rows the row operations give; with image edits, the rows path."""
    rows = [_change(i, "insert") for i in range(6)]
    for row in rows[::2]:
        row.update(database="crm", table="leads")
    table = pa.Table.from_pylist(rows, schema=change_arrow_schema())
    for specs in (
        (RenameDatabaseSpec({"shop": "shop2"}), RenameTableSpec({"crm.leads": "other.l2"})),
        (RenameTableSpec({"shop.users": "people"}),),
        (RenameDatabaseSpec({"nothing": "x"}),),
        (RenameDatabaseSpec({"shop": "s2"}), ExcludeSpec(("pw",))),
    ):
        want = _direct(*specs)._transform([dict(r) for r in rows])
        got = _direct(*specs)._transform_table(table).to_pylist()
        assert got == want, specs
    assert [r["database"] for r in got] == ["crm", "s2"] * 3
    assert {
        (r["database"], r["table"])
        for r in _direct(
            RenameDatabaseSpec({"shop": "shop2"}), RenameTableSpec({"crm.leads": "other.l2"})
        )
        ._transform_table(table)
        .to_pylist()
    } == {("shop2", "users"), ("other", "l2")}


def test_driver_batches_fill_the_progress_reports_spark_leaves_empty() -> None:
    direct = _direct()
    direct.batches[7] = DirectBatch(
        rows_in=3, rows_out=2, tables_in={"a.t": 3}, tables_out={"b.t": 2},
        newest_ts_us=1_700_000_000_000_000, seconds=0.01,
    )  # fmt: skip
    spark_batch = {"batchId": 6, "numInputRows": 5, "observedMetrics": {}}
    empty = {"batchId": 7, "numInputRows": 0, "durationMs": {"triggerExecution": 50}}
    out = direct.patch([spark_batch, empty, None])
    assert out[0] is spark_batch and out[2] is None
    assert out[1]["numInputRows"] == 3 and out[1]["durationMs"] == {"triggerExecution": 50}
    assert _observed(out[1], "rows_out") == 2
    assert _observed(out[1], "newest_ts_us") == 1_700_000_000_000_000
    assert _observed_tables(out[1], OBSERVED_IN) == {"a.t": 3}
    assert _observed_tables(out[1], None) == {"b.t": 2}


def test_driver_routing_is_the_glues(spark: SparkSession) -> None:
    """Each row copy's shard in the driver (direct._route: Spark's xxhash64 of the copy's
    key, seeded by its table's names, in numpy) is the partition the SQL sinks' Spark
    glue routes it to, key updates, DDL, tables of two databases and a keyless row
    included (the glue's own routing projection, run by Spark)."""
    from headwater.changes.schema import change_schema
    from headwater.pipeline.direct import _Routed, _segments
    from headwater.sinks.glue import _part_keys, _routed

    rows = [_change(i, "insert") for i in range(40)]
    for row in rows[::3]:
        row.update(database="shop_two", table="orders")
    rows[5]["key"] = None
    moved = _change(40)
    moved["before_key"] = '{"id": 4000}'
    ddl = _change(41, "ddl")
    ddl.update(key=None, before=None, after=None, sql="ALTER TABLE users ADD c INT")
    rows += [moved, ddl, _change(42, "delete")]
    df = spark.createDataFrame(rows, change_schema())
    segments = _segments(pa.Table.from_pylist(rows, schema=change_arrow_schema()))
    assert [type(s) is _Routed for s in segments] == [True, False, True]
    for count in (2, 3):
        keys = _part_keys(spark, count)
        got = sorted(
            (r["sequence"], r["role"], r["key"], keys.index(r["part"]))
            for r in _routed(df, count, keys).collect()
        )
        want = []
        for r in rows:
            if r["op"] == "ddl":
                want += [(r["sequence"], 0, r["key"], s) for s in range(count)]
            elif r["before_key"] is not None:
                for role, key in ((1, r["before_key"]), (2, r["key"])):
                    want.append(
                        (r["sequence"], role, key, spark_shard("shop", "users", key, count))
                    )
            else:
                shard = spark_shard(r["database"], r["table"], r["key"], count)
                want.append((r["sequence"], 0, r["key"], shard))
        assert got == sorted(want)
        driver = []
        for segment in segments:
            if not isinstance(segment, _Routed):
                driver += [(segment.sequence, 0, None, s) for s in range(count)]
                continue
            c = segment.cols
            for shard, copies in segment.by_shard(count).items():
                driver += [(c.sequence[i], c.role[i], c.key[i], shard) for i in copies]
        assert sorted(driver) == got


class _Shards:
    """A sink's shard transactions as the driver calls them (no target: the order of
    errors is the driver's own logic): ``fail`` maps a shard to what it raises."""

    def __init__(self, fail: dict[int, BaseException]) -> None:
        from types import SimpleNamespace

        self.config = SimpleNamespace(shards=2)
        self.fail = fail
        self.ran: list[tuple[int, list[int]]] = []

    def apply_columns(self, cols: object, rows: list[int], batch_id: int, shard: int) -> str:
        self.ran.append((shard, rows))
        if shard in self.fail:
            raise self.fail[shard]
        return f"shard {shard}"


@pytest.mark.parametrize("threads", [False, True])
def test_driver_shard_errors_come_after_every_shard_ran(threads: bool) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from headwater.errors import SinkError
    from headwater.pipeline.direct import _apply_rows, _segments

    rows = [_change(i, "insert") for i in range(20)]
    (routed,) = _segments(pa.Table.from_pylist(rows, schema=change_arrow_schema()))
    shards = routed.by_shard(2)
    assert sorted(shards) == [0, 1]
    assert sorted(i for copies in shards.values() for i in copies) == list(range(20))
    pool = ThreadPoolExecutor(2) if threads else None
    try:
        ok = _Shards({})
        _apply_rows(ok, routed, 3, pool)  # type: ignore[arg-type]
        assert sorted(ok.ran) == sorted(shards.items())
        # a SinkError of shard 0: shard 1 still ran, then the error
        bad = _Shards({0: SinkError("shard 0 refused")})
        with pytest.raises(SinkError, match="shard 0 refused"):
            _apply_rows(bad, routed, 3, pool)  # type: ignore[arg-type]
        assert sorted(s for s, _rows in bad.ran) == [0, 1]
        # another error wins over a SinkError
        worse = _Shards({0: SinkError("refused"), 1: RuntimeError("bug")})
        with pytest.raises(RuntimeError, match="bug"):
            _apply_rows(worse, routed, 3, pool)  # type: ignore[arg-type]
    finally:
        if pool is not None:
            pool.shutdown()

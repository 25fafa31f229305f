"""The source's ``columns`` option and the columns a pipeline's plan reads
(headwater.pipeline.columns): the option's parsing, the pruned batches (the same values
as the full batch's columns), the source's Spark schema, and what a pipeline of SQL sinks,
filters, computed columns, rules, message-bus sinks and other sinks asks for."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyspark.sql import SparkSession

from headwater.changes import ChangeBlock
from headwater.changes.schema import CHANGE_COLUMNS, change_arrow_schema
from headwater.errors import ConfigError
from headwater.pipeline.columns import needed_columns, source_options
from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.direct import DirectApply
from headwater.pipeline.runner import PipelineRunner
from headwater.pipeline.sinks import build_sink
from headwater.position import Position
from headwater.sinks.glue import SOURCE_COLUMNS
from headwater.spark.offsets import parse_options
from headwater.spark.partitions import _Columns, slice_schema
from headwater.spark.source import HeadwaterDataSource

ALL = [name for name, _kind in CHANGE_COLUMNS]
#: What a pipeline of SQL sinks reads, in the change schema's order.
SQL_COLUMNS = [
    "source", "database", "table", "op", "ts_us", "change_id", "file_num", "offset",
    "event_index", "sequence", "key", "after", "sql", "before_key",
]  # fmt: skip


def test_columns_option_keeps_the_schema_order_and_drops_duplicates() -> None:
    options = parse_options({"path": "/x/t", "columns": " after, key ,sequence,key"})
    assert options.columns == ("sequence", "key", "after")
    assert parse_options({"path": "/x/t"}).columns is None


@pytest.mark.parametrize(
    ("text", "message"),
    [("key,bfore", "unknown change column 'bfore'"), (" , ", "expected a comma list")],
)
def test_columns_option_errors_name_the_option(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options({"path": "/x/t", "Columns": text})
    assert info.value.field == "columns"
    assert message in str(info.value)


def _blocks() -> list[ChangeBlock]:
    pos = Position(2, 5, 400, 1)
    return [
        ChangeBlock("db", "t", "insert", pos, 0, [(1, "a"), (2, "b")], [], ["id", "v"], ("id",)),
        ChangeBlock(
            "db", "t", "update", pos, 2, [((1, "a"), (7, "z")), ((2, "b"), (2, "c"))],
            ["id", "v"], ["id", "v"], ("id",),
        ),
        ChangeBlock("db", "t", "delete", pos, 4, [(7, "z")], ["id", "v"], [], ("id",)),
        ChangeBlock("db", "", "ddl", pos, 5, [], [], [], None, "ALTER TABLE t ADD w INT"),
    ]  # fmt: skip


def _batch(schema: object) -> object:
    built = _Columns()
    record = SimpleNamespace(
        seq=9, gtid="0-1-3", position=Position(2, 5, 400, 0), ts_us=1_700_000_000_000_001,
        schema_version=3,
    )  # fmt: skip
    for block in _blocks():
        built.add_block(block, record, "src", 0, max(len(block), 1))
    return built.batch(schema)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "columns",
    ["key,after,before_key", ",".join(SQL_COLUMNS), "sequence", "commit_ts,gtid,txn_id,before"],
)
def test_pruned_batch_is_the_full_batchs_columns(columns: str) -> None:
    options = parse_options({"path": "/x/t", "columns": columns})
    pruned = _batch(slice_schema(options))
    full = _batch(change_arrow_schema())
    assert pruned.schema.names == [c for c in ALL if c in columns.split(",")]  # type: ignore[attr-defined]
    assert pruned.equals(full.select(pruned.schema.names))  # type: ignore[attr-defined]
    rows = pruned.to_pylist()  # type: ignore[attr-defined]
    assert len(rows) == 6
    if "before_key" in columns:
        assert [r["before_key"] for r in rows] == [None, None, '{"id":1}', None, None, None]
    if "commit_ts" in columns:
        assert rows[0]["commit_ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, 1, tzinfo=dt.UTC)
        assert rows[3]["before"] == '{"id":2,"v":"b"}'


def test_source_schema_is_the_options_columns() -> None:
    full = HeadwaterDataSource({"path": "/x/t"}).schema()
    assert [f.name for f in full.fields] == ALL
    pruned = HeadwaterDataSource({"path": "/x/t", "columns": "after,key,op"}).schema()
    assert [(f.name, f.dataType.simpleString()) for f in pruned.fields] == [
        ("op", "string"),
        ("key", "string"),
        ("after", "string"),
    ]


def _config(tmp_path: Path, transforms: str, sinks: str, source: str = "") -> object:
    file = tmp_path / "p.yaml"
    (tmp_path / "rule.py").write_text("def rule(change):\n    return change\n")
    file.write_text(
        f"name: p\nsource:\n  path: {tmp_path / 'task'}\n{source}checkpoint: ck\n"
        + (f"transforms:\n{transforms}" if transforms else "")
        + f"sinks:\n{sinks}"
    )
    return load_pipeline_config(file, env={})


MYSQL = "  - {type: mysql, host: 127.0.0.1, port: 3306, user: root}\n"
POSTGRES = "  - {type: postgres, database: wh}\n"
KAFKA = "  - {type: kafka, bootstrap_servers: '127.0.0.1:9092', format: debezium}\n"
NATS = "  - {type: nats, url: 'nats://127.0.0.1:4222', stream: s}\n"
REDIS = "  - {type: redis, host: 127.0.0.1, port: 6379}\n"
#: What a pipeline of message-bus sinks reads: every column but commit_ts.
BUS = [name for name in ALL if name != "commit_ts"]


@pytest.mark.parametrize(
    ("transforms", "sinks", "want"),
    [
        # SQL sinks: what the glue reads, not before, gtid, txn_id, commit_ts, schema_version
        ("  - rename_database: {a: b}\n", MYSQL, SQL_COLUMNS),
        ("  - exclude: [v]\n  - mask: {v: {fixed: '***'}}\n",
         MYSQL + POSTGRES, SQL_COLUMNS),
        # a filter adds the change columns its text names (an image shorthand: that image)
        ("  - filter: \"gtid <> '' AND before.v IS NULL\"\n", MYSQL,
         sorted({*SQL_COLUMNS, "gtid", "before"}, key=ALL.index)),
        ("  - compute: {w: \"row.v || `txn_id`\"}\n", MYSQL,
         sorted({*SQL_COLUMNS, "txn_id", "before"}, key=ALL.index)),
        # every column: a rule sees them all; a filter over *; a sink that is not SQL
        ("  - rule: rule.py\n", MYSQL, None),
        ("  - filter: \"size(array(*)) > 0\"\n", MYSQL, None),
        ("  - rename_database: {a: b}\n", MYSQL + "  - {type: ums, path: out}\n", None),
        ("", KAFKA + "  - {type: ums, path: out}\n", None),
        # bus sinks: all but commit_ts, whatever the format; with a SQL sink: the union
        ("", KAFKA, BUS),
        ("", NATS + REDIS, BUS),
        ("  - exclude: [v]\n", MYSQL + KAFKA, BUS),
        # ... unless a filter names it
        ("  - filter: \"commit_ts > TIMESTAMP '2020-01-01'\"\n", KAFKA, None),
        ("  - filter: \"commit_ts > TIMESTAMP '2020-01-01'\"\n", MYSQL,
         sorted({*SQL_COLUMNS, "commit_ts"}, key=ALL.index)),
    ],
)  # fmt: skip
def test_needed_columns_of_a_pipeline(
    tmp_path: Path, transforms: str, sinks: str, want: list[str] | None
) -> None:
    config = _config(tmp_path, transforms, sinks)
    built = [build_sink(s, config) for s in config.sinks]  # type: ignore[attr-defined]
    got = needed_columns(config.transforms, built)  # type: ignore[attr-defined]
    assert got == (None if want is None else tuple(want))
    options = source_options(config, built)  # type: ignore[arg-type]
    assert options.get("columns") == (None if want is None else ",".join(want))
    assert set(SOURCE_COLUMNS) == set(SQL_COLUMNS)


def test_a_columns_option_of_the_configuration_is_kept(tmp_path: Path) -> None:
    config = _config(tmp_path, "", MYSQL, source="  options: {columns: 'key,after'}\n")
    built = [build_sink(s, config) for s in config.sinks]  # type: ignore[attr-defined]
    assert source_options(config, built)["columns"] == "key,after"  # type: ignore[arg-type]


def test_the_pipeline_reads_and_drives_only_the_needed_columns(
    tmp_path: Path, spark: SparkSession
) -> None:
    config = _config(tmp_path, "  - rename_database: {a: b}\n", MYSQL)
    runner = PipelineRunner(config, spark=spark)  # type: ignore[arg-type]
    assert runner.changes().columns == SQL_COLUMNS
    direct = DirectApply.of(config, runner.sinks)  # type: ignore[arg-type]
    assert direct is not None
    assert direct.options.columns == tuple(SQL_COLUMNS)


def test_a_bus_pipelines_source_builds_no_commit_ts(tmp_path: Path, spark: SparkSession) -> None:
    config = _config(tmp_path, "", KAFKA)
    runner = PipelineRunner(config, spark=spark)  # type: ignore[arg-type]
    assert runner.changes().columns == BUS
    assert DirectApply.of(config, runner.sinks) is None  # type: ignore[arg-type]

"""Sinks built from a pipeline file: each folder parses its own section; errors name the
file, the line and the dotted field."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.connections import TargetConnection
from headwater.errors import ConfigError
from headwater.pipeline.config import load_pipeline_config
from headwater.pipeline.sinks import build_sink, sink_context
from headwater.sinks import DdlMode, RetryPolicy, SchemaFile
from headwater.sinks.files import ParquetChangeLog, ParquetMirror
from headwater.sinks.mysql import MysqlSink
from headwater.sinks.postgres import PostgresSink
from headwater.sinks.ums import UmsFileSink
from headwater.spark.transforms import RenameDatabaseSpec, TransformedSchema

HEAD = """\
name: shop-sync
source:
  path: data/shop
checkpoint: ck
transforms:
  - rename_database: {shop: shop2}
sinks:
"""


def build(tmp_path: Path, sinks: str) -> list[object]:
    file = tmp_path / "conf" / "p.yaml"
    file.parent.mkdir(exist_ok=True)
    file.write_text(HEAD + sinks)
    config = load_pipeline_config(file, env={})
    return [build_sink(s, config) for s in config.sinks]


def error(tmp_path: Path, sinks: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        build(tmp_path, sinks)
    return info.value


def test_mysql_section_builds_the_sink_with_typed_fields(tmp_path: Path) -> None:
    (sink,) = build(
        tmp_path,
        "  - type: mysql\n"
        "    host: db.example\n"
        "    port: 3307\n"
        "    password_file: secrets/pw\n"
        "    session: {innodb_lock_wait_timeout: 5}\n"
        "    database_map: {shop2: warehouse}\n"
        "    ddl: fail\n"
        "    retry: {attempts: 2}\n"
        "    shards: 4\n",
    )
    assert isinstance(sink, MysqlSink)
    c = sink.config
    conf = tmp_path / "conf"
    assert c.connection == TargetConnection(
        host="db.example",
        port=3307,
        password_file=str(conf / "secrets" / "pw"),
        session=(("innodb_lock_wait_timeout", 5),),
    )
    assert c.pipeline == "shop-sync"
    assert c.database_map == (("shop2", "warehouse"),)
    assert c.ddl is DdlMode.FAIL
    assert c.retry == RetryPolicy(attempts=2)
    assert (c.shards, c.zero_dates) == (4, "keep")
    # the schema is the task's history seen through the transforms
    assert isinstance(c.schema, TransformedSchema)
    assert c.schema.base == SchemaFile(str(conf / "data" / "shop" / "schema.jsonl"))
    assert c.schema.specs == (RenameDatabaseSpec({"shop": "shop2"}),)


def test_every_kind_is_built_by_its_folder(tmp_path: Path) -> None:
    sinks = build(
        tmp_path,
        "  - type: postgres\n    database: wh\n"
        "  - type: parquet_log\n    path: /data/log\n"
        "  - type: parquet_mirror\n    path: mirror\n    buckets: 3\n"
        "  - type: ums\n    path: out\n    max_rows: 7\n",
    )
    assert [type(s) for s in sinks] == [PostgresSink, ParquetChangeLog, ParquetMirror, UmsFileSink]
    pg, log, mirror, ums = sinks
    assert pg.config.connection == TargetConnection(database="wh")  # type: ignore[attr-defined]
    assert log.config.path == "/data/log"  # type: ignore[attr-defined]
    assert mirror.config.buckets == 3  # type: ignore[attr-defined]
    assert (ums.path, ums.max_rows) == (str(tmp_path / "conf" / "out"), 7)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("sinks", "where", "message"),
    [
        ("  - type: pigeon\n    loft: t\n", "8: sinks[0].type", "unknown sink type 'pigeon'"),
        ("  - type: ums\n    path: o\n  - type: mysql\n    hots: x\n", "10: sinks[1].hots",
         "unknown field for a mysql sink; expected one of"),
        ("  - type: mysql\n    ddl: sometimes\n", "8: sinks[0].ddl",
         "expected one of evolve, lenient, ignore, fail, got 'sometimes'"),
        ("  - type: postgres\n    database_map: [a, b]\n", "8: sinks[0].database_map",
         "must map source databases to target databases"),
        ("  - type: mysql\n    retry: {tries: 3}\n", "8: sinks[0].retry", "unexpected keyword"),
        ("  - type: mysql\n    session: [a]\n", "8: sinks[0].session",
         "must map session variables"),
        ("  - type: ums\n    max_rows: 0\n    path: o\n", "8: sinks[0].max_rows",
         "must be a positive integer"),
        ("  - type: ums\n    max_rows: 3\n", "8: sinks[0].path", "missing (required)"),
        ("  - type: parquet_log\n", "8: sinks[0]", "missing 1 required positional argument"),
    ],
)  # fmt: skip
def test_errors_name_file_line_and_field(
    tmp_path: Path, sinks: str, where: str, message: str
) -> None:
    e = error(tmp_path, sinks)
    assert str(e).startswith(f"{tmp_path / 'conf' / 'p.yaml'}:{where}: "), str(e)
    assert message in str(e)


def test_a_server_source_gives_sinks_the_readers_schema_history(tmp_path: Path) -> None:
    # issue #16: no schema_file on executors; the history comes from /v1/decoding
    # (tests/integration/test_reader_schema_http.py reads it from a live reader).
    from headwater.pipeline.readerschema import ReaderSchema

    file = tmp_path / "p.yaml"
    file.write_text(
        "name: n\nsource:\n  server: http://h:1\n  task: t\ncheckpoint: ck\n"
        "sinks:\n  - type: parquet_mirror\n    path: m\n"
    )
    config = load_pipeline_config(file, env={})
    context = sink_context(config)
    assert context.schema_file is None and context.schema == ReaderSchema("http://h:1", "t")
    build_sink(config.sinks[0], config)  # no "missing: schema_file" any more


def test_capabilities_say_bulk_load_and_ordering_as_data() -> None:
    from headwater.sinks import sink_factory

    kinds = ("mysql", "postgres", "parquet_log", "parquet_mirror", "ums")
    caps = {k: sink_factory(k).capabilities for k in kinds}
    assert {k: c.ordering for k, c in caps.items()} == {
        "mysql": "key",
        "postgres": "key",
        "parquet_log": "none",
        "parquet_mirror": "key",
        "ums": "table",
    }
    assert [k for k, c in caps.items() if c.bulk_load] == ["mysql"]

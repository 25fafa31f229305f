"""The Spark source over HTTP from a *live* reader decodes MINIMAL-metadata tables with
their column names: ``/v1/decoding`` serves the running task's schema history (issue 14:
it answered ``schema_history: null``, and Spark saw ``{'@1': ..., '@2': ...}``).

Real parts: the session's MariaDB logging with ``binlog_row_metadata=MINIMAL``, a
:class:`ReaderService` reading it and serving its HTTP API, local Spark."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson

from headwater.config import parse_reader_config
from headwater.reader.service import ReaderService
from headwater.sandbox import MariadbSandbox
from headwater.spark import register
from tests.integration.server_support import Http


def test_spark_over_http_from_a_live_reader_names_the_columns_of_a_minimal_metadata_table(
    mariadb: MariadbSandbox, db: str, spark: Any, tmp_path: Path
) -> None:
    mariadb.execute(
        f"CREATE TABLE `{db}`.item (id INT UNSIGNED PRIMARY KEY, name VARCHAR(20), "
        "qty SMALLINT UNSIGNED)"
    )
    file, offset = mariadb.binlog_position()
    config = parse_reader_config(
        f"""data_dir: {tmp_path / "data"}
server: {{listen: "127.0.0.1:0"}}
sources:
  - name: live
    host: {mariadb.host}
    port: {mariadb.port}
    user: root
    server_id: 9201
    heartbeat_period: 0.5
    start: {{file: {file}, offset: {offset}}}
    filters: {{include: ['{db}\\..*']}}
""",
        env={},
    )
    with mariadb.binlog_settings(metadata="MINIMAL"):
        mariadb.execute(
            f"INSERT INTO `{db}`.item VALUES (4294967295, 'café', 65535), (1, 'b', 2)",
            f"UPDATE `{db}`.item SET qty = qty - 1 WHERE id = 1",
        )
    service = ReaderService(config)
    service.start()
    try:
        assert service.server is not None
        url = service.server.url
        task = service.tasks["live"]
        deadline = time.monotonic() + 30
        while task.transactions_stored < 2:
            assert time.monotonic() < deadline, task.status()
            time.sleep(0.05)
        decoding = Http(url).post("/v1/decoding", {"task": "live"}).json()
        assert decoding["schema_history"] is not None

        register(spark)
        df = spark.read.format("headwater").option("server", url).option("task", "live").load()
        rows = [
            (r["op"], orjson.loads(r["after"]))
            for r in df.orderBy("sequence").collect()
            if r["table"] == "item"
        ]
    finally:
        service.stop()
    assert rows == [
        ("insert", {"id": 4294967295, "name": "café", "qty": 65535}),
        ("insert", {"id": 1, "name": "b", "qty": 2}),
        ("update", {"id": 1, "name": "b", "qty": 1}),
    ]

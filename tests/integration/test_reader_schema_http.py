"""Sinks of a ``server:`` source get table definitions from the reader's API (issue #16):
:class:`ReaderSchema` answers from ``/v1/decoding`` of a live reader, is never stale after
a DDL (a position past its copy fetches again), and is what the pipeline's sinks get
when no schema_file is configured. Real parts: MariaDB, a ReaderService serving HTTP."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest

from headwater.config import parse_reader_config
from headwater.pipeline.config import parse_pipeline_config
from headwater.pipeline.readerschema import ReaderSchema, clear_cache
from headwater.pipeline.sinks import sink_context
from headwater.reader.service import ReaderService
from headwater.sandbox import MariadbSandbox
from headwater.spark.logaccess import HttpLog
from headwater.spark.offsets import SourceOptions

pytestmark = pytest.mark.integration


def names(tdef: object) -> list[str]:
    assert tdef is not None
    return [c.name for c in tdef.columns]  # type: ignore[attr-defined]


def test_reader_schema_follows_ddl_over_http(
    mariadb: MariadbSandbox, db: str, tmp_path: Path
) -> None:
    mariadb.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, a INT)")
    file, offset = mariadb.binlog_position()
    config = parse_reader_config(
        f"""data_dir: {tmp_path / "data"}
server: {{listen: "127.0.0.1:0"}}
sources:
  - name: live
    host: {mariadb.host}
    port: {mariadb.port}
    user: root
    server_id: 9207
    heartbeat_period: 0.5
    start: {{file: {file}, offset: {offset}}}
    filters: {{include: ['{db}\\..*']}}
""",
        env={},
    )
    mariadb.execute(f"INSERT INTO `{db}`.t VALUES (1, 1)")
    service = ReaderService(config)
    service.start()
    clear_cache()
    try:
        assert service.server is not None
        url = service.server.url
        task = service.tasks["live"]

        def published(n: int) -> object:
            """The last record's position once ``n`` transactions are served by the API
            (stored is not yet published: the writer acknowledges after its flush)."""
            deadline = time.monotonic() + 60
            log = HttpLog(SourceOptions(task="live", server=url), decoding=False)
            try:
                while True:
                    end, position = log.end()
                    if end >= n and position is not None:
                        return position
                    assert time.monotonic() < deadline, task.status()
                    time.sleep(0.05)
            finally:
                log.close()

        first = published(1)
        schema = ReaderSchema(url, "live", "tok-not-shown")
        assert "tok-not-shown" not in repr(schema)
        assert names(schema.table_at(db, "t", first)) == ["id", "a"]

        mariadb.execute(
            f"ALTER TABLE `{db}`.t ADD COLUMN b VARCHAR(5)",
            f"INSERT INTO `{db}`.t VALUES (2, 2, 'x')",
        )
        after = published(3)
        assert after > first  # type: ignore[operator]
        # The copy fetched before the ALTER must not answer for a later position.
        assert names(schema.table_at(db, "t", after)) == ["id", "a", "b"]
        assert names(schema.table_at(db, "t", first)) == ["id", "a"]
        # As shipped to an executor (another process has its own cache; here: cleared).
        clear_cache()
        shipped = pickle.loads(pickle.dumps(schema))
        assert names(shipped.table_at(db, "t", after)) == ["id", "a", "b"]

        # A pipeline with a server source and no schema_file: its sinks get this.
        pipeline = parse_pipeline_config(
            f"name: p\nsource:\n  server: {url}\n  task: live\ncheckpoint: ck\n"
            "sinks:\n  - type: ums\n    path: out\n",
            file="p.yaml",
            base=tmp_path,
            env={},
        )
        context = sink_context(pipeline)
        assert context.schema == ReaderSchema(url, "live")
    finally:
        service.stop()

"""``POST /v1/decoding``: a client of the raw formats gets the source's FORMAT_DESCRIPTION and
schema history, and decodes a MINIMAL-metadata table exactly as the server would."""

from __future__ import annotations

from pathlib import Path

from headwater.changes import decode_record
from headwater.sandbox import MariadbSandbox
from headwater.schema import SchemaHistory, read_tables
from headwater.server import ServerOptions, TaskHandle
from headwater.server.app import HeadwaterServer
from headwater.spark.logaccess import HttpLog
from headwater.spark.offsets import SourceOptions
from tests.integration.server_support import Http, binlog_records, fill


def test_minimal_metadata_table_decodes_over_http_with_the_served_history(
    mariadb: MariadbSandbox, db: str, tmp_path: Path
) -> None:
    mariadb.execute(
        f"CREATE TABLE `{db}`.t (id INT UNSIGNED PRIMARY KEY, name VARCHAR(10) CHARACTER SET"
        " latin1, big BIGINT UNSIGNED)"
    )
    conn = mariadb.connect()
    try:
        bootstrap = read_tables(conn, [db])
    finally:
        conn.close()
    with mariadb.binlog_settings(metadata="MINIMAL"):
        file, start = mariadb.binlog_position()
        mariadb.execute(f"INSERT INTO `{db}`.t VALUES (4294967295, 'café', 18446744073709551615)")
    fde, records = binlog_records(mariadb, file, start)
    history = SchemaHistory.open(tmp_path / "schema.jsonl")
    history.bootstrap(bootstrap, records[0].position)
    log = fill(tmp_path / "log", records)
    task = TaskHandle(log=log, fde=fde, schema=history, status={})
    server = HeadwaterServer({"t": task}, ServerOptions()).start()
    try:
        reply = Http(server.url).post("/v1/decoding", {"task": "t"}).json()
        assert reply["format_description"]["server_version"] == fde.server_version
        assert reply["schema_history"] is not None

        remote = HttpLog(SourceOptions(task="t", server=server.url))
        remote.close()
        assert remote.fde == fde
        assert remote.schema is not None
        with log.reader("earliest") as reader:
            record = reader.next(1.0)
        assert record is not None
        (change,) = decode_record(record, source="t", fde=remote.fde, schema=remote.schema)
        assert change.after == {"id": 4294967295, "name": "café", "big": 18446744073709551615}
        assert change.key == {"id": 4294967295}
        # Without the history the TABLE_MAP alone says nothing of names or signedness.
        (bare,) = decode_record(record, source="t", fde=fde)
        assert bare.after is not None and set(bare.after) == {"@1", "@2", "@3"}

        unknown = Http(server.url).post("/v1/decoding", {"task": "nope"})
        assert unknown.status == 404
        bad = Http(server.url).post("/v1/decoding", {"task": 3})
        assert (bad.status, bad.json()["field"]) == (400, "task")
    finally:
        server.close()
        log.close()
        history.close()

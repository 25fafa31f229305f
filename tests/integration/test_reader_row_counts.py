"""Row counts of store records: the length walk (``count_rows``) against the decoder.

The type catalog's workload (every column type MariaDB logs, with NULLs and edge values;
multi-row INSERT, UPDATE per row, DELETE of all rows) is logged once with FULL row images
and once more with MINIMAL and NOBLOB images (fewer columns per image). Every rows event of
it is counted without decoding and decoded, and the reader's records must list, per table,
exactly the rows ``decode_record`` yields.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from headwater.binlog.events import iter_events
from headwater.binlog.framing import FormatDescription
from headwater.binlog.rows import RowsEvent, count_rows
from headwater.changes import decode_record
from headwater.sandbox import MariadbSandbox
from tests.integration.test_reader_capture import (
    Running,
    source_config,
    start_at,
    stored_records,
    wait_caught_up,
)
from tests.integration.type_catalog import CASES, create_and_fill


def _workload(server: MariadbSandbox, db: str) -> None:
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = ''")

            def run(*statements: str) -> None:
                for sql in statements:
                    cur.execute(sql)

            for case in CASES:
                create_and_fill(run, db, case)
            for image in ("MINIMAL", "NOBLOB"):
                cur.execute(f"SET SESSION binlog_row_image = {image}")
                for case in CASES:
                    table = f"`{db}`.`t_{case.name}`"
                    values = (*case.values, "NULL")
                    run(f"INSERT INTO {table} (v) VALUES " + ", ".join(f"({v})" for v in values))
                    run(f"UPDATE {table} SET v = {values[0]}", f"DELETE FROM {table}")
    finally:
        conn.close()


def test_row_counts_match_the_decoder_for_every_type_and_row_image(
    mariadb: MariadbSandbox, db: str, tmp_path: Path
) -> None:
    start = start_at(mariadb)
    config = source_config(mariadb, "counts", start=start)
    run = Running(config, tmp_path / "task")
    try:
        _workload(mariadb, db)
        wait_caught_up(run.task, mariadb, timeout=60)
        assert run.task._grouper.count_errors == 0
    finally:
        run.stop()
    assert start.coordinate is not None
    path = str(mariadb.binlog_path(start.coordinate.file))
    events = 0
    seen: Counter[str] = Counter()
    for raw, event in iter_events(path, start.coordinate.offset):
        if not isinstance(event, RowsEvent) or event.table_map.schema != db:
            continue
        counted = count_rows(raw.type_code, raw.body, table_map=event.table_map)
        assert counted == len(event.rows), (event.table_map.table, event.kind)
        events += 1
        seen[event.kind] += 1
    assert events >= 5 * len(CASES) and set(seen) == {"insert", "update", "delete"}
    # The reader's records list the same rows per table as decoding them gives.
    fde = FormatDescription.parse((tmp_path / "task" / "fde.bin").read_bytes())
    for rec in stored_records(tmp_path / "task"):
        decoded = Counter(
            f"{c.database}.{c.table}"
            for c in decode_record(rec, source="t", fde=fde)
            if c.op != "ddl"
        )
        assert dict(rec.tables) == {name: decoded.get(name, 0) for name, _ in rec.tables}

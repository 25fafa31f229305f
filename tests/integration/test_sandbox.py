"""The test fixtures themselves: the sandbox server has the binlog settings tests rely on."""

from __future__ import annotations

from collections.abc import Callable

from headwater.sandbox import MariadbSandbox


def test_session_server_logs_rows_with_full_metadata(mariadb: MariadbSandbox) -> None:
    row = mariadb.query(
        "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata,"
        " @@binlog_checksum"
    )[0]
    assert row == (1, "ROW", "FULL", "FULL", "CRC32")


def test_binlog_settings_are_restored(mariadb: MariadbSandbox) -> None:
    with mariadb.binlog_settings(row_image="MINIMAL", metadata="MINIMAL", checksum="NONE"):
        inside = mariadb.query(
            "SELECT @@GLOBAL.binlog_row_image, @@binlog_row_metadata, @@binlog_checksum"
        )[0]
    after = mariadb.query(
        "SELECT @@GLOBAL.binlog_row_image, @@binlog_row_metadata, @@binlog_checksum"
    )[0]
    assert inside == ("MINIMAL", "MINIMAL", "NONE")
    assert after == ("FULL", "FULL", "CRC32")


def test_each_test_gets_an_empty_database(mariadb: MariadbSandbox, db: str) -> None:
    assert mariadb.query(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s", (db,)
    ) == [(0,)]


def test_factory_starts_a_statement_format_server(
    sandbox_factory: Callable[..., MariadbSandbox],
) -> None:
    server = sandbox_factory(binlog_format="STATEMENT", server_id=7)
    assert server.query("SELECT @@binlog_format, @@server_id") == [("STATEMENT", 7)]

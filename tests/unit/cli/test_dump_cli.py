"""``headwater binlog dump``: in-process through ``main([...])`` and once through the
installed console script. Expected values come from the fixtures' origins (rust_mysql_common
@0648371 ``binlog_event_roundtrip``: ``toddy_test.outbox`` with columns id, topic,
event_type, event, created; the 3230202323 of minimal_row_metadata.000001; the payload of
transaction_compression.000001 holding QUERY, TABLE_MAP, WRITE_ROWS, XID) and from
mysql-binlog-connector-java @a4c14bb (``testChecksumNONE``: 191 events)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from headwater.binlog.dump import format_time, render_json
from headwater.cli.main import main

MYSQL = Path("/work/shared/fixtures/binlog/mysql")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def json_lines(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def test_json_rows_of_the_mariadb_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "binlog", "dump", "--json", str(MYSQL / "mariadb-bin.000001"))
    assert (code, err) == (0, "")
    records = json_lines(out)
    rows = [r for r in records if "op" in r]
    assert len(rows) == 2
    for row in rows:
        assert (row["db"], row["table"], row["op"], row["before"]) == (
            "toddy_test",
            "outbox",
            "insert",
            None,
        )
        after = row["after"]
        assert isinstance(after, dict)
        assert list(after) == ["id", "topic", "event_type", "event", "created"]
        assert row["type"] == "WRITE_ROWS_V1"
        assert row["file"] == str(MYSQL / "mariadb-bin.000001")
    assert [r["type"] for r in records][:3] == [
        "FORMAT_DESCRIPTION",
        "MARIADB_GTID_LIST",
        "BINLOG_CHECKPOINT",
    ]
    assert records[0]["offset"] == 4


def test_json_unsigned_value_and_position_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "binlog", "dump", "--json", str(MYSQL / "minimal_row_metadata.000001")
    )
    assert code == 0
    (row,) = [r for r in json_lines(out) if "op" in r]
    after = row["after"]
    assert isinstance(after, dict) and after["@5"] == 3230202323
    assert set(row) == {
        "file",
        "offset",
        "log_pos",
        "timestamp",
        "server_id",
        "type",
        "db",
        "table",
        "op",
        "before",
        "after",
    }


def test_text_format_payload_inner_events_share_the_offset(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "binlog", "dump", str(MYSQL / "transaction_compression.000001"))
    assert code == 0
    lines = out.splitlines()
    payload = next(i for i, line in enumerate(lines) if " TRANSACTION_PAYLOAD " in line)
    offset = lines[payload].split()[0]
    inner = [line.split()[1] for line in lines[payload + 1 :] if line.split()[0] == offset]
    assert inner == ["QUERY", "TABLE_MAP", "WRITE_ROWS", "XID"]


def test_start_applies_to_the_first_file_only(capsys: pytest.CaptureFixture[str]) -> None:
    first = MYSQL / "mysql-bin.checksum-none"
    code, out, _ = run(capsys, "binlog", "dump", "--json", str(first))
    assert code == 0
    whole = [r for r in json_lines(out) if r["file"] == str(first)]
    # one record per event, rows events one per row: count events by unique offset
    assert len({r["offset"] for r in whole}) == 191
    start = whole[10]["offset"]
    assert isinstance(start, int)
    code, out, _ = run(
        capsys,
        "binlog",
        "dump",
        "--json",
        "--start",
        str(start),
        str(first),
        str(MYSQL / "mariadb-bin.000001"),
    )
    assert code == 0
    records = json_lines(out)
    assert records[0]["offset"] == start
    assert [r["offset"] for r in records if r["file"] == str(first)] == [
        r["offset"] for r in whole[10:]
    ]
    assert next(r for r in records if r["file"] != str(first))["offset"] == 4


@pytest.mark.parametrize("name", ["mysql_type_bit.000001", "write-full-row.binlog"])
def test_start_inside_an_event_is_an_error_naming_the_offset(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    # CRC32 (mysql_type_bit) and no checksum (write-full-row): both refuse a start offset
    # that is not an event boundary instead of printing garbage.
    code, out, err = run(capsys, "binlog", "dump", "--json", "--start", "130", str(MYSQL / name))
    assert code == 2
    assert "offset 130" in err
    assert out == ""


def test_start_at_an_event_boundary_skips_what_is_before(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = str(MYSQL / "mysql_type_bit.000001")
    _, whole, _ = run(capsys, "binlog", "dump", "--json", path)
    events = json_lines(whole)
    third = events[2]["offset"]
    code, out, err = run(capsys, "binlog", "dump", "--json", "--start", str(third), path)
    assert (code, err) == (0, "")
    assert json_lines(out) == events[2:]


def test_gzip_files_are_read(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "binlog", "dump", str(MYSQL / "mysql-bin.sakila.gz"))
    assert code == 0
    assert out.splitlines()[0].startswith("#4 FORMAT_DESCRIPTION binlog_version=4")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give at least one FILE"),
        (["--gtid", "0-1-5", "x"], "--gtid only apply with --source"),
        (["--source", "mysql://u@h:3306", "x"], "not both"),
        (["--source", "http://h"], "expected mysql://user@host:port"),
        (["--source", "mysql://u@h:3306"], "needs --server-id"),
        (
            [
                "--source",
                "mysql://u@h:3306",
                "--server-id",
                "5",
                "--from",
                "f.1:4",
                "--gtid",
                "0-1-1",
            ],
            "--from or --gtid, not both",
        ),
        (["--follow", "x"], "--follow only apply with --source"),
    ],
)
def test_usage_errors_exit_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["binlog", "dump", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "secret" not in err


def test_password_in_url_is_refused_without_echoing_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["binlog", "dump", "--source", "mysql://u:secret@h:3306", "--server-id", "5"])
    err = capsys.readouterr().err
    assert code == 2
    assert "carries a password" in err
    assert "secret" not in err


def test_argparse_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["binlog", "dump", "--start", "2", "f"])
    assert info.value.code == 2
    assert "byte offset >= 4" in capsys.readouterr().err


def test_missing_file_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "binlog", "dump", "/nonexistent/binlog.000001")
    assert code == 2
    assert err == "headwater: error: /nonexistent/binlog.000001: No such file or directory\n"


def test_help_documents_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["binlog", "dump", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "exit status:" in out and "130" in out
    for flag in (
        "--source",
        "--from",
        "--gtid",
        "--server-id",
        "--password-file",
        "--json",
        "--start",
    ):
        assert flag in out


def test_value_rendering() -> None:
    record = {
        "d": Decimal("0.0000000000"),
        "n": Decimal("-12.3400"),
        "b": b"\x00\xff",
        "t": timedelta(hours=-838, minutes=-59, seconds=-59),
        "f": timedelta(hours=100, microseconds=5),
        "s": ("a", "b"),
        "bad": "ok\udcff",
    }
    assert json.loads(render_json(record)) == {
        "d": "0.0000000000",
        "n": "-12.3400",
        "b": {"base64": "AP8="},
        "t": "-838:59:59",
        "f": "100:00:00.000005",
        "s": ["a", "b"],
        "bad": {"undecodable_text_base64": "b2v/"},
    }
    assert format_time(timedelta(0)) == "00:00:00"


def test_console_script_subprocess() -> None:
    exe = Path(sys.executable).parent / "headwater"
    proc = subprocess.run(
        [str(exe), "binlog", "dump", "--json", str(MYSQL / "mysql_type_bit.000001")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    (row,) = [r for r in records if "op" in r]
    # rust_mysql_common: the row is (0b100, "foo", 0b100000)
    assert row["after"] == {"a": 4, "b": "foo", "c": 32}
    assert row["op"] == "insert"

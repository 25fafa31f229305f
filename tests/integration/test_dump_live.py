"""``headwater binlog dump --source``: the same records as from the file, read as a replica."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.cli.main import main
from headwater.sandbox import MariadbSandbox

HEADWATER = str(Path(sys.executable).with_name("headwater"))


def _rows(out: str) -> list[dict[str, object]]:
    return [r for r in map(json.loads, out.splitlines()) if "op" in r]


def test_live_dump_prints_the_rows_the_file_dump_prints(
    mariadb: MariadbSandbox, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    mariadb.execute(
        f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, name VARCHAR(20), amount DECIMAL(6,2))"
    )
    file, pos = mariadb.binlog_position()
    mariadb.execute(
        f"INSERT INTO `{db}`.t VALUES (1, 'ünï', -12.50), (2, NULL, 0)",
        f"UPDATE `{db}`.t SET name = 'x' WHERE id = 2",
        f"DELETE FROM `{db}`.t WHERE id = 1",
    )
    code = main(
        [
            "binlog",
            "dump",
            "--json",
            "--source",
            mariadb.url,
            "--server-id",
            "77",
            "--from",
            f"{file}:{pos}",
        ]
    )
    live = capsys.readouterr().out
    assert code == 0
    code = main(["binlog", "dump", "--json", "--start", str(pos), str(mariadb.binlog_path(file))])
    from_file = capsys.readouterr().out
    assert code == 0
    live_rows, file_rows = _rows(live), _rows(from_file)
    assert [(r["op"], r["before"], r["after"]) for r in live_rows] == [
        ("insert", None, {"id": 1, "name": "ünï", "amount": "-12.50"}),
        ("insert", None, {"id": 2, "name": None, "amount": "0.00"}),
        (
            "update",
            {"id": 2, "name": None, "amount": "0.00"},
            {"id": 2, "name": "x", "amount": "0.00"},
        ),
        ("delete", {"id": 1, "name": "ünï", "amount": "-12.50"}, None),
    ]
    # The same events at the same offsets as reading the file directly.
    assert [(r["offset"], r["op"], r["after"]) for r in live_rows] == [
        (r["offset"], r["op"], r["after"]) for r in file_rows
    ]


def test_live_dump_with_password_from_environment_and_a_wrong_one(
    mariadb: MariadbSandbox, db: str
) -> None:
    mariadb.execute(
        "CREATE USER IF NOT EXISTS 'dumper'@'%' IDENTIFIED BY 's3cret-pw'",
        "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO 'dumper'@'%'",
        f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY)",
    )
    file, pos = mariadb.binlog_position()
    mariadb.execute(f"INSERT INTO `{db}`.t VALUES (42)")
    url = f"mysql://dumper@{mariadb.host}:{mariadb.port}"
    args = [
        HEADWATER,
        "binlog",
        "dump",
        "--json",
        "--source",
        url,
        "--server-id",
        "78",
        "--from",
        f"{file}:{pos}",
    ]
    env = {**os.environ, "HEADWATER_SOURCE_PASSWORD": "s3cret-pw"}
    ok = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert [r["after"] for r in _rows(ok.stdout)] == [{"id": 42}]

    env["HEADWATER_SOURCE_PASSWORD"] = "wrong-pw-123"
    bad = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "dumper" in bad.stderr and "Traceback" not in bad.stderr
    assert "wrong-pw-123" not in bad.stderr + bad.stdout
    assert "s3cret" not in bad.stderr + bad.stdout


def test_live_dump_requires_a_server_id(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["binlog", "dump", "--source", "mysql://u@127.0.0.1:3306"])
    assert exit_info.value.code == 2
    assert "--server-id" in capsys.readouterr().err

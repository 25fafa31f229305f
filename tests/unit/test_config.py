"""Reader configuration: YAML loading, and errors that name file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.config import load_reader_config, parse_reader_config
from headwater.errors import ConfigError
from headwater.position import BinlogCoordinate, MariadbGtidPos

GOOD = """\
data_dir: data
sources:
  - name: shop
    hosts: ["db1:3306", "db2:3307"]
    user: repl
    password_file: pw.txt
    server_id: 4242
    start: {file: mysql-bin.000003, offset: 1234}
    filters:
      include: ['shop\\..*']
      exclude: ['.*\\.tmp_.*']
      events: [insert, update, ddl]
    heartbeat: {table: hw.heartbeat, interval: 0.5}
    chunk_bytes: 8MiB
    reconnect: {initial: 0.1, max: 10}
    store: {durability: fsync, segment_bytes: 1MiB}
  - name: crm
    host: 10.0.0.5
    user: repl
    password_env: CRM_PW
    server_id: 4243
    start: {gtid: "0-1-100"}
"""


def _error(text: str, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_reader_config(text, file="reader.yaml", base=Path("/cfg"), env=env or {})
    return info.value


def test_a_full_configuration_loads(tmp_path: Path) -> None:
    (tmp_path / "pw.txt").write_text("s3cret\nignored\n")
    path = tmp_path / "reader.yaml"
    path.write_text(GOOD)
    config = load_reader_config(path, env={"CRM_PW": "crm-pw"})
    shop, crm = config.sources
    assert config.data_dir == tmp_path / "data"
    assert config.task_dir("shop") == tmp_path / "data" / "shop"
    assert [str(h) for h in shop.hosts] == ["db1:3306", "db2:3307"]
    assert shop.password == "s3cret" and crm.password == "crm-pw"
    assert "s3cret" not in repr(shop) and "crm-pw" not in repr(config)
    assert shop.start.kind == "file"
    assert shop.start.coordinate == BinlogCoordinate("mysql-bin.000003", 1234)
    assert shop.filters.include == ("shop\\..*",)
    assert shop.filters.events == ("insert", "update", "ddl")
    assert shop.heartbeat is not None and shop.heartbeat.interval == 0.5
    assert shop.chunk_bytes == 8 * 1024 * 1024
    assert shop.store.durability == "fsync" and shop.store.segment_bytes == 1024 * 1024
    assert crm.hosts[0].port == 3306
    assert crm.start.gtid_set == MariadbGtidPos.parse("0-1-100")


@pytest.mark.parametrize(
    ("text", "line", "field", "words"),
    [
        (
            "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n",
            3,
            "sources[0].server_id",
            "missing",
        ),
        (
            "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: x1\n",
            6,
            "sources[0].server_id",
            "must be an integer",
        ),
        (
            "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 0\n",
            6,
            "sources[0].server_id",
            "must be in 1..4294967295",
        ),
        (
            "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
            "    sever_id: 2\n",
            7,
            "sources[0].sever_id",
            "unknown field",
        ),
        (
            "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
            "    filters:\n      include: ['ok', 'shop\\\\.(']\n",
            8,
            "sources[0].filters.include[1]",
            "bad regular expression",
        ),
        (
            "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
            "    port: '3306'\n",
            7,
            "sources[0].port",
            "must be an integer",
        ),
        (
            "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
            "    filters: {events: [insert, truncate]}\n",
            7,
            "sources[0].filters.events[1]",
            "unknown event type",
        ),
        (
            "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
            "    start: {gtid: 'zz'}\n",
            7,
            "sources[0].start.gtid",
            "not a MySQL GTID",
        ),
        (
            "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
            "    start: yesterday\n",
            7,
            "sources[0].start",
            "expected earliest, latest",
        ),
        (
            "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
            "  - name: a\n    user: u\n    host: h\n    server_id: 2\n",
            7,
            "sources[1].name",
            "already the name",
        ),
        ("data_dir: d\nsources: []\n", 2, "sources", "non-empty list"),
        ("data_dir: [d\n", 2, None, "not valid YAML"),
        (
            "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
            "    chunk_bytes: 1KiB\n",
            7,
            "sources[0].chunk_bytes",
            "must be in 65536",
        ),
    ],
)
def test_errors_name_file_line_and_field(
    text: str, line: int, field: str | None, words: str
) -> None:
    e = _error(text)
    assert (e.file, e.line, e.field) == ("reader.yaml", line, field)
    assert words in str(e)
    assert str(e).startswith(f"reader.yaml:{line}: ")


def test_password_never_appears_in_errors() -> None:
    e = _error(
        "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n"
        "    password: hunter2\n    server_id: nope\n"
    )
    assert "hunter2" not in str(e)


def test_missing_password_env_and_file_are_errors() -> None:
    base = "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
    e = _error(base + "    password_env: NOPE\n")
    assert (e.line, e.field) == (7, "sources[0].password_env") and "not set" in str(e)
    e = _error(base + "    password_file: /nonexistent/pw\n")
    assert (e.line, e.field) == (7, "sources[0].password_file") and "cannot read" in str(e)
    e = _error(base + "    password_file: a\n    password_env: B\n")
    assert e.field == "sources[0].password_env" and "only one" in str(e)


def test_start_forms() -> None:
    base = "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
    for text, kind in [
        ("earliest", "earliest"),
        ("latest", "latest"),
        ("{timestamp: '2024-01-02T03:04:05Z'}", "timestamp"),
        ("{timestamp: 1700000000.5}", "timestamp"),
        ("{file: mysql-bin.000001}", "file"),
    ]:
        (src,) = parse_reader_config(base + f"    start: {text}\n", env={}).sources
        assert src.start.kind == kind
    (src,) = parse_reader_config(
        base + "    start: {timestamp: '2024-01-02T03:04:05Z'}\n", env={}
    ).sources
    assert src.start.ts_us == 1704164645_000_000
    (src,) = parse_reader_config(base + "    start: {file: mysql-bin.000001}\n", env={}).sources
    assert src.start.coordinate == BinlogCoordinate("mysql-bin.000001", 4)


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        load_reader_config(tmp_path / "missing.yaml")


def test_secrets_written_inline_are_refused_without_showing_them() -> None:
    base = "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
    e = _error(base + "    password: hunter2\n")
    assert (e.line, e.field) == (7, "sources[0].password")
    assert "password_file" in str(e) and "password_env" in str(e)
    assert "hunter2" not in str(e)
    e = _error(base + "server:\n  token: tok-123456\n")
    assert (e.line, e.field) == (8, "server.token")
    assert "token_file" in str(e) and "tok-123456" not in str(e)


def test_token_from_env_is_kept_out_of_the_repr() -> None:
    base = "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
    config = parse_reader_config(
        base + "server: {listen: '0.0.0.0:9000', token_env: TOK}\n", env={"TOK": "tok-987"}
    )
    assert config.server is not None and config.server.token == "tok-987"
    assert "tok-987" not in repr(config)


def test_a_file_that_is_not_utf8_is_a_config_error_naming_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "reader.yaml"
    path.write_bytes(b"data_dir: d\n# caf\xe9 in Latin-1\nsources: []\n")
    with pytest.raises(ConfigError) as info:
        load_reader_config(path)
    e = info.value
    assert (e.file, e.line) == (str(path), 2)
    assert "not UTF-8" in str(e) and "byte 0xe9 at byte offset 17" in str(e)


def test_server_limits_load_and_default() -> None:
    base = "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
    config = parse_reader_config(base + "server: {listen: '127.0.0.1:0'}\n", env={})
    assert config.server is not None
    sc = config.server
    assert (sc.max_connections, sc.idle_timeout_s, sc.header_timeout_s) == (64, 30.0, 10.0)
    assert (sc.backlog, sc.fetch_workers) == (128, 2)
    text = (
        "server: {listen: '127.0.0.1:0', max_connections: 5, idle_timeout: 2.5,"
        " header_timeout: 1, backlog: 16, fetch_workers: 0}\n"
    )
    sc2 = parse_reader_config(base + text, env={}).server
    assert sc2 is not None
    assert (sc2.max_connections, sc2.idle_timeout_s, sc2.header_timeout_s) == (5, 2.5, 1.0)
    assert (sc2.backlog, sc2.fetch_workers) == (16, 0)
    e = _error(base + "server: {max_connections: 0}\n")
    assert e.field == "server.max_connections"


def test_tls_modes_and_files(tmp_path: Path) -> None:
    base = "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
    (src,) = parse_reader_config(base, env={}).sources
    assert src.tls.mode == "preferred" and src.tls.ca is None  # MySQL's default
    (tmp_path / "ca.pem").write_text("x")
    (tmp_path / "c.pem").write_text("x")
    (tmp_path / "c.key").write_text("x")
    text = base + "    tls: {mode: verify_identity, ca: ca.pem, cert: c.pem, key: c.key}\n"
    (src,) = parse_reader_config(text, base=tmp_path, env={}).sources
    assert src.tls.mode == "verify_identity"
    assert (src.tls.ca, src.tls.cert, src.tls.key) == (
        tmp_path / "ca.pem",
        tmp_path / "c.pem",
        tmp_path / "c.key",
    )
    e = _error(base + "    tls: {mode: strict}\n")
    assert e.field == "sources[0].tls.mode" and "verify_identity" in str(e)
    e = _error(base + "    tls: {mode: verify_ca, ca: /nonexistent/ca.pem}\n")
    assert e.field == "sources[0].tls.ca" and "no such file" in str(e)
    with pytest.raises(ConfigError) as info:
        parse_reader_config(base + "    tls: {mode: required, ca: ca.pem}\n", base=tmp_path, env={})
    assert info.value.field == "sources[0].tls.ca" and "checks no certificate" in str(info.value)

"""TLS to the source as MySQL's ``ssl-mode`` says, against real MariaDB servers: one started
with a certificate for ``localhost`` signed by a CA this test generates (openssl), and the
session's plain-text server. The reader's configuration is parsed from YAML, so the path
from the file to the socket is the one ``headwater reader run`` takes."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from headwater.binlog.client import _NO_TLS, BinlogClient, ClientOptions, connect_mysql
from headwater.binlog.events import DecodeContext, RowsEvent, parse_event
from headwater.config import HostConfig, SourceConfig, parse_reader_config
from headwater.errors import SourceError
from headwater.position import BinlogCoordinate
from headwater.reader.source import connect, tls_options
from headwater.sandbox import MariadbSandbox


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _ca(tmp: Path, name: str) -> tuple[Path, Path]:
    cert, key = tmp / f"{name}.pem", tmp / f"{name}.key"
    _openssl(
        *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}"),
        *("-keyout", str(key), "-out", str(cert)),
    )
    return cert, key


def _server_cert(tmp: Path, ca: tuple[Path, Path], dns: str) -> tuple[Path, Path]:
    cert, key, csr, ext = (tmp / f"server.{s}" for s in ("pem", "key", "csr", "ext"))
    _openssl(
        *("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={dns}"),
        *("-keyout", str(key), "-out", str(csr)),
    )
    ext.write_text(f"subjectAltName=DNS:{dns}\n")
    _openssl(
        *("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1])),
        *("-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert)),
    )
    return cert, key


def _source(tmp: Path, server: MariadbSandbox, tls: str) -> SourceConfig:
    text = (
        f"data_dir: data\nsources:\n  - name: s\n    host: {server.host}\n"
        f"    port: {server.port}\n    user: root\n    server_id: 9101\n    tls: {tls}\n"
    )
    (source,) = parse_reader_config(text, base=tmp, env={}).sources
    return source


def _cipher(source: SourceConfig, host: str) -> str | None:
    """The TLS version of a connection made as the reader makes its connections (None:
    plain text), read from the server's side."""
    conn = connect(source, HostConfig(host, source.hosts[0].port))
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
            row = cur.fetchone()
        return (row[1] or None) if row else None
    finally:
        conn.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("pki")
    ca = _ca(tmp, "test-ca")
    other, _ = _ca(tmp, "other-ca")
    cert, key = _server_cert(tmp, ca, "localhost")
    return {"ca": ca[0], "other": other, "cert": cert, "key": key, "dir": tmp}


@pytest.fixture
def secure(sandbox_factory: Callable[..., MariadbSandbox], pki: dict[str, Path]) -> MariadbSandbox:
    return sandbox_factory(
        extra=(f"--ssl-ca={pki['ca']}", f"--ssl-cert={pki['cert']}", f"--ssl-key={pki['key']}")
    )


def test_tls_modes_against_a_server_with_a_certificate_for_localhost(
    secure: MariadbSandbox, pki: dict[str, Path]
) -> None:
    tmp = pki["dir"]
    # preferred (the default) and required encrypt without checking anything
    assert _cipher(_source(tmp, secure, "{}"), "127.0.0.1") is not None
    assert _cipher(_source(tmp, secure, "{mode: required}"), "127.0.0.1") is not None
    assert _cipher(_source(tmp, secure, "{mode: disabled}"), "127.0.0.1") is None
    # verify_ca: the right CA is accepted whatever the name; another CA is refused
    right_ca = _source(tmp, secure, f"{{mode: verify_ca, ca: {pki['ca']}}}")
    assert _cipher(right_ca, "127.0.0.1") is not None
    other_ca = _source(tmp, secure, f"{{mode: verify_ca, ca: {pki['other']}}}")
    with pytest.raises(SourceError, match="CERTIFICATE_VERIFY_FAILED"):
        _cipher(other_ca, "127.0.0.1")
    # verify_identity: the certificate names localhost, so 127.0.0.1 is the wrong host
    identity = _source(tmp, secure, f"{{mode: verify_identity, ca: {pki['ca']}}}")
    assert _cipher(identity, "localhost") is not None
    with pytest.raises(SourceError, match=r"CERTIFICATE_VERIFY_FAILED|match"):
        _cipher(identity, "127.0.0.1")


def test_the_dump_itself_uses_the_mode(secure: MariadbSandbox, pki: dict[str, Path]) -> None:
    secure.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)")
    file, offset = secure.binlog_position()
    secure.execute("INSERT INTO d.t VALUES (1)")
    for host, ok in (("localhost", True), ("127.0.0.1", False)):
        source = _source(pki["dir"], secure, f"{{mode: verify_identity, ca: {pki['ca']}}}")
        options = ClientOptions(
            host=host,
            port=secure.port,
            user="root",
            server_id=9102,
            start=BinlogCoordinate(file, offset),
            blocking=False,
            tls=tls_options(source),
        )
        if ok:
            with BinlogClient(options) as client:
                events = list(client.events())
            assert len(events) > 3
        else:
            with pytest.raises(SourceError, match=r"TLS to .* failed"):
                BinlogClient(options).connect()


def test_required_refuses_a_server_without_tls(mariadb: MariadbSandbox, tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="TLS") as e:
        _cipher(_source(tmp_path, mariadb, "{mode: required}"), mariadb.host)
    assert "required" in str(e.value)
    assert _cipher(_source(tmp_path, mariadb, "{}"), mariadb.host) is None  # preferred: plain


def _global_status(conn: Any, name: str) -> int:
    with conn.cursor() as cur:
        cur.execute(f"SHOW GLOBAL STATUS LIKE '{name}'")
        return int(cur.fetchone()[1])


def _session_tls(conn: Any) -> str:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
        return str(cur.fetchone()[1])


def test_preferred_mode_encrypts_when_offered_and_falls_back_to_plain_text(
    secure: MariadbSandbox, mariadb: MariadbSandbox, db: str
) -> None:
    # preferred passes PyMySQL a shared context without CAs, which PyMySQL takes as
    # "TLS required": against a server without TLS that is error 2026, then plain text,
    # and the server is remembered as such (one aborted connect, not one per connection).
    _NO_TLS.clear()
    for server, database, offers_tls in ((secure, "d", True), (mariadb, db, False)):
        server.execute(
            f"CREATE DATABASE IF NOT EXISTS `{database}`",
            f"CREATE TABLE `{database}`.pref (id INT PRIMARY KEY, v VARCHAR(8))",
        )
        file, offset = server.binlog_position()
        server.execute(f"INSERT INTO `{database}`.pref VALUES (7, 'seven')")
        watcher = server.connect()  # opened first: its own handshake is not counted below
        try:
            accepted = _global_status(watcher, "Ssl_accepts")
            aborted = _global_status(watcher, "Aborted_connects")
            options = ClientOptions(
                host=server.host,
                port=server.port,
                user="root",
                server_id=9103,
                start=BinlogCoordinate(file, offset),
                blocking=False,
            )
            ctx = DecodeContext()
            with BinlogClient(options) as client:
                events = [parse_event(e.raw, ctx) for e in client.events()]
            rows = [e.rows for e in events if isinstance(e, RowsEvent)]
            assert rows == [[(7, "seven")]]
            for _ in range(2):
                conn = connect_mysql(None, host=server.host, port=server.port, user="root")
                try:
                    assert bool(_session_tls(conn)) is offers_tls
                finally:
                    conn.close()
            # Three connections: all TLS handshakes the server accepted, or plain text
            # after one attempt the server counted as aborted.
            assert _global_status(watcher, "Ssl_accepts") - accepted == 3 * offers_tls
            assert _global_status(watcher, "Aborted_connects") - aborted == int(not offers_tls)
            assert ((server.host, server.port, None) in _NO_TLS) is not offers_tls
        finally:
            watcher.close()

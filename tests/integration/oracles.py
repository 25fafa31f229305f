"""Independent decoders to compare headwater with: ``mariadb-binlog -vv`` and
python-mysql-replication.

``mariadb-binlog`` (C, the server's own code) prints each row as ``@N=value /* TYPE ... */``
lines; :func:`render_like_mariadb_binlog` turns a headwater value into that exact text, so the
comparison is of strings the server's code produced. Its quirks, from MariaDB
``sql/log_event_client.cc`` (``log_event_print_value``, ``my_b_write_quoted``):

* integers print signed, followed by ``(unsigned)`` when the sign bit is set;
* strings print raw bytes in single quotes, bytes below 0x20 as ``\\xNN`` and nothing else
  escaped (the branches for ``'`` and ``\\`` come after the ``> 0x1F`` test, so never run);
* DATE prints as ``'YYYY:MM:DD'`` (colons); TIMESTAMP as epoch seconds with ``fsp`` digits;
* YEAR prints ``%04d`` of the stored byte plus 1900, so the zero year prints ``1900``;
* ENUM prints the index; BIT prints its bits ``b'...'``; SET prints its bitmask bytes in
  storage order (little-endian), each byte's bits most significant first;
* FLOAT prints ``%-20g`` of the value widened to double, DOUBLE ``%-.20g``.
"""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import warnings
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

MARIADB_BINLOG = "mariadb-binlog"


@dataclass
class TextRow:
    """One row change as ``mariadb-binlog -vv`` printed it."""

    kind: str  # insert / update / delete
    table: str  # db.table
    before: list[tuple[bytes, str]] | None  # (value text, type comment) per printed column
    after: list[tuple[bytes, str]] | None
    columns_before: list[int]
    columns_after: list[int]


_ROW_START = re.compile(rb"^### (INSERT INTO|UPDATE|DELETE FROM) `(.*)`\.`(.*)`$")
_COLUMN = re.compile(rb"^###   @(\d+)=(.*) /\* (.*?) meta=\d+ nullable=\d is_null=\d \*/$")


def mariadb_binlog_rows(path: Path, start: int, stop: int | None = None) -> list[TextRow]:
    args = [MARIADB_BINLOG, "-vv", "--base64-output=decode-rows", f"--start-position={start}"]
    if stop is not None:
        args.append(f"--stop-position={stop}")
    out = subprocess.run([*args, str(path)], capture_output=True, check=True, timeout=120)
    rows: list[TextRow] = []
    current: TextRow | None = None
    section: list[tuple[bytes, str]] | None = None
    section_cols: list[int] | None = None
    for line in out.stdout.split(b"\n"):
        m = _ROW_START.match(line)
        if m:
            kind = {b"INSERT INTO": "insert", b"UPDATE": "update", b"DELETE FROM": "delete"}
            current = TextRow(
                kind[m.group(1)], f"{m.group(2).decode()}.{m.group(3).decode()}", None, None, [], []
            )
            rows.append(current)
            continue
        if current is None:
            continue
        if line == b"### WHERE":
            current.before, current.columns_before = [], []
            section, section_cols = current.before, current.columns_before
        elif line == b"### SET":
            current.after, current.columns_after = [], []
            section, section_cols = current.after, current.columns_after
        elif line.startswith(b"###   @"):
            c = _COLUMN.match(line)
            assert c is not None, f"unparsed mariadb-binlog line: {line[:200]!r}"
            assert section is not None and section_cols is not None
            section.append((c.group(2).rstrip(b" "), c.group(3).decode()))
            section_cols.append(int(c.group(1)) - 1)
        else:
            current, section, section_cols = None, None, None
    return rows


_INT_BITS = {"TINYINT": 8, "SHORTINT": 16, "MEDIUMINT": 24, "INT": 32, "LONGINT": 64}


def _quote(raw: bytes) -> bytes:
    return (
        b"'"
        + b"".join(
            b if b[0] > 0x1F else b"\\x%02x" % b[0]
            for b in (raw[i : i + 1] for i in range(len(raw)))
        )
        + b"'"
    )


def _fraction(micro: int, fsp: int) -> str:
    return f".{micro:06d}"[: fsp + 1] if fsp else ""


def render_like_mariadb_binlog(
    value: Any,
    type_comment: str,
    *,
    codec: str | None,
    enum_values: tuple[str, ...] | None = None,
    set_values: tuple[str, ...] | None = None,
) -> bytes:
    """The text mariadb-binlog prints for ``value`` in a column of ``type_comment``."""
    if value is None:
        return b"NULL"
    kind = type_comment.split("(")[0].split(" ")[0]
    fsp_m = re.search(r"\((\d)\)", type_comment)
    fsp = int(fsp_m.group(1)) if fsp_m else 0
    if kind in _INT_BITS:
        bits = _INT_BITS[kind]
        signed = value - (1 << bits) if value >= 1 << (bits - 1) else value
        return (f"{signed} ({signed & ((1 << bits) - 1)})" if signed < 0 else str(signed)).encode()
    if kind == "DECIMAL":
        assert isinstance(value, Decimal)
        return format(value, "f").encode()
    if kind == "FLOAT":
        return f"{value:g}".encode()
    if kind == "DOUBLE":
        return f"{value:.20g}".encode()
    if kind == "YEAR":
        return f"{value if value else 1900:04d}".encode()
    if kind == "BIT":
        return f"b'{value:0{int(type_comment[4:-1])}b}'".encode()
    if kind == "ENUM":
        if isinstance(value, int):
            return str(value).encode()
        assert enum_values is not None
        return str(enum_values.index(value) + 1 if value else 0).encode()
    if kind == "SET":
        width = 8 * int(type_comment[4:].split(" ")[0])
        mask = value if isinstance(value, int) else sum(1 << set_values.index(v) for v in value)  # type: ignore[union-attr]
        # Printed in storage order: little-endian bytes, each most significant bit first.
        bits = "".join(f"{b:08b}" for b in mask.to_bytes(width // 8, "little"))
        return f"b'{bits}'".encode()
    if kind == "DATE":
        text = value if isinstance(value, str) else value.isoformat()
        return f"'{text.replace('-', ':')}'".encode()
    if kind == "DATETIME":
        if isinstance(value, str):
            return f"'{value}'".encode()
        return f"'{value:%Y-%m-%d %H:%M:%S}{_fraction(value.microsecond, fsp)}'".encode()
    if kind == "TIMESTAMP":
        if isinstance(value, str):
            return ("0" + ("." + "0" * fsp if fsp else "")).encode()
        assert value.tzinfo is not None
        seconds = int((value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).total_seconds() // 1)
        return f"{seconds}{_fraction(value.microsecond, fsp)}".encode()
    if kind == "TIME":
        assert isinstance(value, dt.timedelta)
        micros = value // dt.timedelta(microseconds=1)
        sign = "-" if micros < 0 else ""
        micros = abs(micros)
        secs, frac = divmod(micros, 1_000_000)
        text = f"{sign}{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
        return f"'{text}{_fraction(frac, fsp)}'".encode()
    if isinstance(value, str):
        assert codec is not None, f"str value for {type_comment} without a codec"
        return _quote(value.encode(codec, "surrogateescape"))
    assert isinstance(value, bytes | bytearray), f"{type_comment}: {type(value)}"
    return _quote(bytes(value))


# --- python-mysql-replication ---------------------------------------------------------


@dataclass
class PmrRow:
    kind: str
    table: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


def pymysqlreplication_rows(
    host: str, port: int, log_file: str, log_pos: int, server_id: int = 4242
) -> list[PmrRow]:
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    stream = BinLogStreamReader(
        connection_settings={"host": host, "port": port, "user": "root", "password": ""},
        server_id=server_id,
        log_file=log_file,
        log_pos=log_pos,
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    out: list[PmrRow] = []
    try:
        with warnings.catch_warnings():
            # python-mysql-replication 1.0.17 passes PyMySQL's deprecated 'db' argument.
            warnings.filterwarnings("ignore", "'db' is deprecated", DeprecationWarning)
            events = list(stream)
        for ev in events:
            table = f"{ev.schema}.{ev.table}"
            for row in ev.rows:
                if isinstance(ev, WriteRowsEvent):
                    out.append(PmrRow("insert", table, None, row["values"]))
                elif isinstance(ev, DeleteRowsEvent):
                    out.append(PmrRow("delete", table, row["values"], None))
                else:
                    out.append(PmrRow("update", table, row["before_values"], row["after_values"]))
    finally:
        stream.close()
    return out


def like_pymysqlreplication(value: Any, sql_type: str) -> Any:
    """headwater's value in python-mysql-replication's conventions (for comparison)."""
    if value is None:
        return None
    upper = sql_type.upper()
    if upper.startswith("BIT"):
        return value  # compared as int: python-mysql-replication's bit string is converted
    if upper.startswith("SET"):
        return set(value)
    if upper.startswith(("DATE", "DATETIME")) and isinstance(value, str):
        return None  # python-mysql-replication maps zero and partial dates to None
    if upper.startswith("TIMESTAMP"):
        if isinstance(value, str):
            return None
        return value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def normalize_pymysqlreplication(value: Any, sql_type: str) -> Any:
    if value is None:
        return None
    if sql_type.upper().startswith("BIT") and isinstance(value, str):
        return int(value, 2)
    return value

"""The bulk text of ``sinks/netwrite.py``: SQL literals for MySQL/MariaDB as PyMySQL
renders parameters, and PostgreSQL ``COPY`` text lines."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
from pymysql.converters import escape_item

from headwater.schema.model import Column
from headwater.sinks import netwrite
from headwater.sinks.netwrite import copy_text, mysql_literals

TEXT = Column("t", "varchar", "varchar(40)", charset="utf8mb4")
BLOB = Column("r", "varbinary", "varbinary(16)", charset="binary")


def test_mysql_text_literals_equal_pymysql_escaping() -> None:
    values = ["", "a'b", 'q"', "back\\slash", "tab\t", "nl\n", "cr\r", "nul\x00", "\x1a", "ü€𝄞"]
    got = mysql_literals(pa.array([*values, None]), TEXT, False).to_pylist()
    assert got == [escape_item(v, "utf8mb4").encode() for v in values] + [b"NULL"]
    # NO_BACKSLASH_ESCAPES: only the quote is doubled.
    assert mysql_literals(pa.array(["a'b\\"]), TEXT, True).to_pylist() == [b"'a''b\\'"]


def test_mysql_number_and_bytes_literals() -> None:
    ints = mysql_literals(
        pa.array([2**64 - 1, 0, None], pa.uint64()), Column("u", "bigint", "bigint unsigned"), False
    )
    assert ints.to_pylist() == [b"18446744073709551615", b"0", b"NULL"]
    floats = mysql_literals(
        pa.array([0.1, 1e300, -0.0, None]), Column("d", "double", "double"), False
    )
    assert floats.to_pylist() == [b"0.1e0", b"1e+300", b"-0e0", b"NULL"]
    assert [float(v) for v in floats.to_pylist()[:3]] == [0.1, 1e300, -0.0]
    dec = pa.array(
        [Decimal("0E-10"), Decimal("0.0000001000"), Decimal("-1.5000000000")], pa.decimal128(30, 10)
    )
    got = mysql_literals(dec, Column("m", "decimal", "decimal(30,10)"), False).to_pylist()
    # Quoted: MySQL converts text to DECIMAL exactly, exponent (Arrow's 1.000E-7) included.
    assert [Decimal(v.strip(b"'").decode()) for v in got] == [
        Decimal(0),
        Decimal("1E-7"),
        Decimal("-1.5"),
    ]
    assert all(v.startswith(b"'") for v in got)
    raw = mysql_literals(pa.array([b"\x00\xff'\\", None]), BLOB, False).to_pylist()
    assert raw == [b"_binary'\\0\xff\\'\\\\'", b"NULL"]


def test_copy_text_lines() -> None:
    t = pa.table(
        {
            "id": pa.array([1, 2], pa.int32()),
            "s": pa.array(["tab\tnl\ncr\rbs\\", None]),
            "f": pa.array([0.1, None], pa.float32()),
            "e": pa.array(["", "\\N"]),
        }
    )
    assert copy_text(t, t.column_names) == (
        b"1\ttab\\tnl\\ncr\\rbs\\\\\t0.10000000149011612\t\n2\t\\N\t\\N\t\\\\N\n"
    )


def test_texts_in_slices_join_to_the_whole_text() -> None:
    rows = pa.table(
        {
            "id": pa.array(range(100), pa.int64()),
            "s": pa.array([f"v\t{i}" if i % 7 else None for i in range(100)]),
        }
    )
    whole = netwrite.copy_text(rows, ["id", "s"])
    for per in (1, 7, 37, 99, 100, 1000):
        parts = list(netwrite._texts(rows, ["id", "s"], per))
        assert len(parts) == -(-100 // per)
        assert b"".join(parts) == whole
    assert whole.count(b"\n") == 100
    assert whole.startswith(b"0\t\\N\n1\tv\\t1\n")

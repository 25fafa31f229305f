"""Every column type MariaDB 10.11 can put in a row event, with its edge values.

Each entry makes one table ``(id INT AUTO_INCREMENT PRIMARY KEY, v <type>)`` that receives
every value (one INSERT of all rows, so the event holds many rows), then an UPDATE of each
row to the next value, then a DELETE of all rows: the differential tests decode all three.
Values are SQL literals; NULL is added to every entry.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TypeCase:
    name: str
    sql_type: str
    values: tuple[str, ...]


def _q(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


ENUM_300 = ",".join(_q(f"v{i}") for i in range(300))
SET_64 = ",".join(_q(f"s{i}") for i in range(64))
DEEP_JSON = "[" * 30 + "1" + "]" * 30  # MariaDB JSON_VALID allows depth 32

CASES: tuple[TypeCase, ...] = (
    TypeCase("tinyint", "TINYINT", ("-128", "127", "0", "-1")),
    TypeCase("tinyint_u", "TINYINT UNSIGNED", ("0", "255", "128")),
    TypeCase("smallint", "SMALLINT", ("-32768", "32767", "-1")),
    TypeCase("smallint_u", "SMALLINT UNSIGNED", ("65535", "32768", "0")),
    TypeCase("mediumint", "MEDIUMINT", ("-8388608", "8388607", "-1", "1")),
    TypeCase("mediumint_u", "MEDIUMINT UNSIGNED", ("16777215", "8388608")),
    TypeCase("int", "INT", ("-2147483648", "2147483647", "-1")),
    TypeCase("int_u", "INT UNSIGNED", ("4294967295", "2147483648")),
    TypeCase("bigint", "BIGINT", ("-9223372036854775808", "9223372036854775807", "-1")),
    TypeCase("bigint_u", "BIGINT UNSIGNED", ("18446744073709551615", "9223372036854775808")),
    TypeCase(
        "decimal_10_3",
        "DECIMAL(10,3)",
        ("-123.456", "0", "9999999.999", "-9999999.999", "0.001", "-0.001", "1.5"),
    ),
    TypeCase(
        "decimal_65_30",
        "DECIMAL(65,30)",
        (
            "-" + "9" * 35 + "." + "9" * 30,
            "12345678901234567890.123456789012345678901234567890",
            "-0.000000000000000000000000000001",
            "0",
        ),
    ),
    TypeCase(
        "decimal_18_0", "DECIMAL(18,0)", ("-999999999999999999", "123456789012345678", "0", "-1")
    ),
    TypeCase("decimal_5_5", "DECIMAL(5,5)", ("0.12345", "-0.00001", "0")),
    TypeCase("decimal_19_9", "DECIMAL(19,9) UNSIGNED", ("1234567890.123456789", "0.000000001")),
    TypeCase("decimal_9_2", "DECIMAL(9,2)", ("-1234567.89", "0.05")),
    TypeCase("float", "FLOAT", ("1.5", "-3.25e38", "0", "1e-30", "3.1415927")),
    TypeCase(
        "double",
        "DOUBLE",
        (
            "1.7976931348623157e308",
            "-2.2250738585072014e-308",
            "0",
            "3.141592653589793",
            "-2.25e100",
        ),
    ),
    TypeCase("bit1", "BIT(1)", ("b'1'", "b'0'")),
    TypeCase("bit10", "BIT(10)", ("b'1010101010'", "b'1'", "b'1111111111'")),
    TypeCase("bit64", "BIT(64)", ("b'" + "1" * 64 + "'", "b'10000000'", "0")),
    TypeCase("year", "YEAR", ("1901", "2155", "0", "2024")),
    TypeCase(
        "date",
        "DATE",
        ("'1000-01-01'", "'9999-12-31'", "'0000-00-00'", "'2020-02-29'", "'2020-00-15'"),
    ),
    *(
        TypeCase(f"time{fsp}", f"TIME({fsp})", values)
        for fsp, values in (
            (0, ("'-838:59:59'", "'838:59:59'", "'00:00:00'", "'-00:00:01'", "'12:34:56'")),
            (1, ("'-838:59:58.9'", "'12:34:56.7'", "'-00:00:00.1'")),
            (2, ("'-838:59:59.99'", "'00:00:00.01'", "'-01:00:00.50'")),
            (3, ("'-00:00:00.001'", "'23:59:59.999'", "'100:00:00.5'")),
            (4, ("'-12:00:00.0001'", "'00:00:01.9999'")),
            (5, ("'-00:00:00.00001'", "'838:59:58.99999'")),
            (6, ("'-838:59:58.999999'", "'-00:00:00.000001'", "'00:00:00'", "'01:02:03.4'")),
        )
    ),
    *(
        TypeCase(
            f"datetime{fsp}",
            f"DATETIME({fsp})",
            (
                "'1000-01-01 00:00:00'",
                "'9999-12-31 23:59:59.999999'",
                "'0000-00-00 00:00:00'",
                "'2020-02-29 12:00:00.5'",
                "'2020-00-00 10:00:00'",
                "'1969-12-31 23:59:59.123456'",
            ),
        )
        for fsp in range(7)
    ),
    *(
        TypeCase(
            f"timestamp{fsp}",
            f"TIMESTAMP({fsp}) NULL",
            (
                "'1970-01-01 00:00:01'",
                "'2038-01-19 03:14:07.999999'",
                "'0000-00-00 00:00:00'",
                "'2021-06-07 08:09:10.123456'",
            ),
        )
        for fsp in range(7)
    ),
    TypeCase("char", "CHAR(10)", ("''", "'abc'", "'😀中文'", "'trail  '", "'ÿ'")),
    TypeCase("char_255", "CHAR(255)", ("'" + "é" * 255 + "'", "'x'")),
    TypeCase("varchar", "VARCHAR(300)", ("''", "'" + "x" * 300 + "'", "'a😀b'", "'it''s \\\\'")),
    TypeCase(
        "varchar_latin1", "VARCHAR(20) CHARACTER SET latin1", ("'café'", "''", "'Ÿ€'", "'\t\\n'")
    ),
    TypeCase("varchar_ascii", "VARCHAR(20) CHARACTER SET ascii", ("'plain'",)),
    TypeCase("char_binary", "BINARY(4)", ("x'00'", "x'01020304'", "x''")),
    TypeCase("varbinary", "VARBINARY(100)", ("x''", "x'00ff00'", "x'27'")),
    TypeCase("tinyblob", "TINYBLOB", ("x''", "x'" + "ab" * 255 + "'")),
    TypeCase("blob", "BLOB", ("x''", "REPEAT(x'ab', 65535)", "x'00'")),
    TypeCase("mediumblob", "MEDIUMBLOB", ("REPEAT(x'cd', 70000)",)),
    TypeCase("longblob", "LONGBLOB", ("REPEAT(x'ef', 100000)", "x''")),
    TypeCase("tinytext", "TINYTEXT", ("''", "'😀'")),
    TypeCase("text", "TEXT", ("''", "REPEAT('é', 32767)", "'line\\nbreak'")),
    TypeCase("mediumtext", "MEDIUMTEXT", ("REPEAT('a😀', 20000)",)),
    TypeCase("longtext", "LONGTEXT", ("REPEAT('z', 70000)",)),
    TypeCase("text_latin1", "TEXT CHARACTER SET latin1", ("'façade'",)),
    TypeCase("enum", "ENUM('a','b','c')", ("'a'", "'c'", "''")),
    TypeCase("enum_300", f"ENUM({ENUM_300})", ("'v0'", "'v299'", "'v256'")),
    TypeCase("set", "SET('x','y','z')", ("''", "'x,z'", "'x,y,z'", "'y'")),
    TypeCase("set_64", f"SET({SET_64})", ("'s0,s63'", "''", "'s8,s9,s10'")),
    TypeCase(
        "json",
        "JSON",
        (
            "'{}'",
            "'[]'",
            """'{"a": {"b": [1, 2, {"c": null}]}, "d": true}'""",
            f"'{DEEP_JSON}'",
            """'"é😀"'""",
            "'1.5e300'",
            "'null'",
        ),
    ),
    TypeCase(
        "geometry",
        "GEOMETRY",
        (
            "ST_GeomFromText('POINT(1 2)')",
            "ST_GeomFromText('LINESTRING(0 0, 1 1, 2 3)', 4326)",
            "ST_GeomFromText('POLYGON((0 0, 4 0, 4 4, 0 4, 0 0))')",
        ),
    ),
    TypeCase("point", "POINT", ("ST_GeomFromText('POINT(-1.5 2.25)')",)),
)


def create_and_fill(execute: object, database: str, case: TypeCase) -> None:
    """Create the case's table and run its INSERT, UPDATEs and DELETE (all logged)."""
    run = execute  # a callable taking SQL statements
    table = f"`{database}`.`t_{case.name}`"
    values = (*case.values, "NULL")
    statements = [
        f"CREATE TABLE {table} (id INT AUTO_INCREMENT PRIMARY KEY, v {case.sql_type})",
        f"INSERT INTO {table} (v) VALUES " + ", ".join(f"({v})" for v in values),
    ]
    for i in range(len(values)):
        statements.append(
            f"UPDATE {table} SET v = {values[(i + 1) % len(values)]} WHERE id = {i + 1}"
        )
    statements.append(f"DELETE FROM {table}")
    run(*statements)  # type: ignore[operator]

"""The canonical text of values: what pymysql and psycopg return for equal stored values
renders the same (headwater.verify.canonical)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from headwater.errors import ConfigError
from headwater.verify.canonical import canonical, canonical_row, column_kind, row_digest
from headwater.verify.endpoints import parse_endpoint


def test_decimal_scale_does_not_matter() -> None:
    assert canonical(Decimal("1.50")) == canonical(Decimal("1.5")) == "1.5"
    assert canonical(Decimal("100")) == canonical(Decimal("1E+2")) == "100"
    assert canonical(Decimal("-0.00")) == "0"


def test_unsigned_bigint_as_numeric_equals_the_int() -> None:
    assert canonical(Decimal("18446744073709551615")) == canonical(18446744073709551615)


def test_aware_timestamp_equals_the_naive_utc_one() -> None:
    aware = dt.datetime(2024, 5, 1, 14, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    assert (
        canonical(aware)
        == canonical(dt.datetime(2024, 5, 1, 12, 0))
        == ("2024-05-01 12:00:00.000000")
    )


def test_time_and_interval_render_as_microseconds() -> None:
    assert canonical(dt.timedelta(hours=-1, microseconds=5)) == str(-3600 * 10**6 + 5)


def test_json_text_equals_jsonb_object() -> None:
    assert canonical('{"b": 1, "a": [1, 2]}', json_column=True) == canonical({"a": [1, 2], "b": 1})
    assert canonical('{"b": 1}') == '{"b": 1}'  # not a JSON column: the text itself


def test_bool_equals_tinyint_and_bytes_are_hex() -> None:
    assert canonical(True) == canonical(1) == "1"
    assert canonical(b"\x00\xff") == canonical(memoryview(b"\x00\xff")) == "00ff"


def test_null_differs_from_the_text_none() -> None:
    assert row_digest(canonical_row([None], [""])) != row_digest(canonical_row(["None"], [""]))


def test_url_with_a_password_is_refused_and_the_env_supplies_it() -> None:
    with pytest.raises(ConfigError, match="carries a password") as e:
        parse_endpoint("mysql://root:s3cret@h:1/db", role="source")
    assert "s3cret" not in str(e.value)
    ep = parse_endpoint(
        "postgresql://u@h/db", role="target", env={"HEADWATER_TARGET_PASSWORD": "pw"}
    )
    assert (ep.kind, ep.port, ep.database, ep.password) == ("postgresql", 5432, "db", "pw")
    assert "pw" not in repr(ep) and str(ep) == "postgresql://u@h:5432/db"


def test_bit_compares_as_its_unsigned_integer() -> None:
    kind = column_kind("bit", "bigint", is_json=False, cross=True)
    assert kind == "bit"
    assert canonical(b"\x02\xaa", kind=kind) == canonical(682, kind=kind) == "682"
    assert canonical(b"\xff" * 8, kind=kind) == canonical(Decimal(2**64 - 1), kind=kind)
    assert canonical(b"\x01", kind=kind) != canonical(2, kind=kind)


def test_binary_compares_with_its_zero_padding() -> None:
    """BINARY(n) holds n bytes; the decoder pads what the row events strip, so a target
    holding fewer bytes is a difference (the padding is part of the value)."""
    kind = column_kind("binary", "bytea", is_json=False, cross=True)
    assert kind == ""
    assert canonical(b"\x01\x00\x00\x00", kind=kind) != canonical(b"\x01", kind=kind)
    assert canonical(b"\x01\x00", kind=kind) == canonical(b"\x01\x00", kind=kind)


def test_single_precision_float_compares_to_six_digits() -> None:
    kind = column_kind("float", "real", is_json=False, cross=True)
    assert canonical(3.14159, kind=kind) == canonical(3.1415927, kind=kind) == "3.14159"
    assert canonical(-3.25e38, kind=kind) == canonical(-3.25e38, kind=kind)
    assert canonical(1.5, kind=kind) != canonical(1.25, kind=kind)
    assert column_kind("double", "double precision", is_json=False, cross=True) == ""


def test_zero_dates_are_null_only_against_another_product() -> None:
    cross = column_kind("datetime", "timestamp without time zone", is_json=False, cross=True)
    same = column_kind("datetime", "datetime", is_json=False, cross=False)
    assert canonical("0000-00-00 00:00:00", kind=cross) is None
    assert canonical("0000-00-00 00:00:00", kind=same) == "0000-00-00 00:00:00"
    assert canonical(dt.datetime(2024, 1, 2), kind=cross) == "2024-01-02 00:00:00.000000"


def test_canonical_row_applies_each_column_kind() -> None:
    row = canonical_row((b"\x05", '{"b":1, "a":2}', "x"), ("bit", "json", ""))
    assert row == ("5", '{"a":2,"b":1}', "x")

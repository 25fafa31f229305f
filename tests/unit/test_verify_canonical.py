"""The canonical text of values: what pymysql and psycopg return for equal stored values
renders the same (headwater.verify.canonical)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from headwater.errors import ConfigError
from headwater.verify.canonical import canonical, canonical_row, row_digest
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
    assert row_digest(canonical_row([None], [False])) != row_digest(
        canonical_row(["None"], [False])
    )


def test_url_with_a_password_is_refused_and_the_env_supplies_it() -> None:
    with pytest.raises(ConfigError, match="carries a password") as e:
        parse_endpoint("mysql://root:s3cret@h:1/db", role="source")
    assert "s3cret" not in str(e.value)
    ep = parse_endpoint(
        "postgresql://u@h/db", role="target", env={"HEADWATER_TARGET_PASSWORD": "pw"}
    )
    assert (ep.kind, ep.port, ep.database, ep.password) == ("postgresql", 5432, "db", "pw")
    assert "pw" not in repr(ep) and str(ep) == "postgresql://u@h:5432/db"

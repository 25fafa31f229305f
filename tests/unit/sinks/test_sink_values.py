"""JSON image values back to SQL parameters; PostgreSQL types; DDL rewriting; registry."""

from __future__ import annotations

import datetime as dt
import pickle
from decimal import Decimal

import pytest
from hypothesis import given, settings, strategies as st

from headwater.connections import TargetConnection
from headwater.errors import ConfigError
from headwater.schema.model import Column
from headwater.sinks import SINKS, StaticSchema, sink_factory
from headwater.sinks.mysql.client import MysqlDialect, rewrite_databases
from headwater.sinks.postgres.client import pg_type
from headwater.sinks.values import ValueRules, column_converter, converter, parse_time

KEEP = ValueRules("keep")
NULL = ValueRules("null", text_bytes=False)


def c(data_type: str, column_type: str | None = None, **kw: object) -> Column:
    return Column("c", data_type, column_type or data_type, **kw)  # type: ignore[arg-type]


def test_decimal_strings_become_exact_decimals() -> None:
    assert converter(c("decimal", "decimal(6,2)"), KEEP)("-12.30") == Decimal("-12.30")


def test_a_decimal_that_is_not_a_number_is_a_value_error_without_the_value() -> None:
    with pytest.raises(ValueError, match=r"^not a decimal number$"):
        converter(c("decimal", "decimal(6,2)"), KEEP)("12,5 secret")
    with pytest.raises(ValueError, match=r"^not a decimal number$"):
        column_converter(c("decimal", "decimal(6,2)"), KEEP)(["1.5", "x"])


def test_base64_becomes_bytes() -> None:
    assert converter(c("blob", charset="binary"), KEEP)({"base64": "AP8="}) == b"\x00\xff"


def test_time_beyond_a_day_and_negative() -> None:
    assert parse_time("-838:59:59") == -dt.timedelta(hours=838, minutes=59, seconds=59)
    assert parse_time("100:00:00.000005") == dt.timedelta(hours=100, microseconds=5)


def test_timestamps_keep_their_utc_offset() -> None:
    got = converter(c("timestamp"), KEEP)("2022-04-20T22:18:04+00:00")
    assert got == dt.datetime(2022, 4, 20, 22, 18, 4, tzinfo=dt.UTC)


def test_zero_dates_are_kept_nulled_or_refused() -> None:
    assert converter(c("date"), KEEP)("0000-00-00") == "0000-00-00"
    assert converter(c("datetime"), NULL)("2020-00-15 00:00:00") is None
    with pytest.raises(ValueError, match="zero date"):
        converter(c("date"), ValueRules("fail"))("0000-00-00")


def test_set_members_join_and_undecodable_text_depends_on_the_target() -> None:
    assert converter(c("set"), KEEP)(["a", "b"]) == "a,b"
    raw = {"undecodable_text_base64": "/w=="}
    assert converter(c("varchar", charset="utf8mb4"), KEEP)(raw) == b"\xff"
    assert converter(c("varchar", charset="utf8mb4"), NULL)(raw) == "\ufffd"


def test_null_stays_null() -> None:
    assert converter(c("decimal", "decimal(6,2)"), KEEP)(None) is None


def test_a_column_converts_like_each_of_its_values() -> None:
    date = column_converter(c("date"), NULL)
    assert date(["2024-02-29", None, "0000-00-00"]) == [dt.date(2024, 2, 29), None, None]
    text = column_converter(c("varchar", charset="utf8mb4"), KEEP)
    assert text(["a", {"undecodable_text_base64": "/w=="}, None]) == ["a", b"\xff", None]
    assert column_converter(c("decimal", "decimal(6,2)"), KEEP)(["1.50"]) == [Decimal("1.50")]


def test_columns_that_bind_as_they_are_are_not_copied() -> None:
    ints = [1, None, 3]
    assert column_converter(c("int"), KEEP)(ints) is ints
    texts = ["a", None, "b"]  # no undecodable value: nothing to convert
    assert column_converter(c("varchar", charset="utf8mb4"), KEEP)(texts) is texts


def test_a_column_refuses_what_its_values_refuse() -> None:
    with pytest.raises(ValueError, match="zero date"):
        column_converter(c("date"), ValueRules("fail"))(["2024-01-01", "0000-00-00"])


def test_mysql_refuses_a_decimal_nan_as_pymysql_does() -> None:
    import pymysql

    with pytest.raises(pymysql.err.ProgrammingError, match="nan"):
        MysqlDialect().render_columns(CURSORS[0], [[Decimal("1.5"), Decimal("NaN")]])


class _Cursor:
    """What MysqlDialect.render_columns needs of a cursor: a PyMySQL connection (never
    connected: escaping reads only its encoders and server status)."""

    def __init__(self, server_status: int) -> None:
        import pymysql

        self.connection = pymysql.connections.Connection(defer_connect=True)
        self.connection.server_status = server_status


#: One per server status (a PyMySQL connection object takes 25 ms to build).
CURSORS = {status: _Cursor(status) for status in (0, 512)}


MYSQL_VALUES = st.one_of(
    st.none(),
    st.integers(-(2**70), 2**70),
    st.text(),
    st.sampled_from(["it's", "back\\slash", "nul\x00", "ctrl-z\x1a", '"q"', "\n\r"]),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.binary(max_size=8),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.dates(),
    st.datetimes(),
    st.timedeltas(),
)
#: Text that needs escaping now and then (a column is scanned once for it).
MYSQL_TEXT = st.text(alphabet=st.sampled_from("ab'\"\\\x00\n\r\x1aé"), max_size=4)
#: Columns of one type (and NULLs), as statements mostly are, and of mixed types.
MYSQL_COLUMNS = st.one_of(
    st.lists(MYSQL_VALUES, min_size=3, max_size=3),
    *(
        st.lists(st.one_of(st.none(), kind), min_size=3, max_size=3)
        for kind in (
            st.integers(),
            st.text(),
            MYSQL_TEXT,
            st.decimals(allow_nan=False, allow_infinity=False),
        )
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(MYSQL_COLUMNS, min_size=1, max_size=4), st.sampled_from([0, 512]))
def test_mysql_literals_are_pymysql_escapes_of_each_value(
    columns: list[list[object]], server_status: int
) -> None:
    """512: SERVER_STATUS_NO_BACKSLASH_ESCAPES (quotes doubled, backslashes kept)."""
    cur = CURSORS[server_status]
    escape = cur.connection.escape
    rows = zip(*columns, strict=True)
    expected = ", ".join("(" + ", ".join(escape(v) for v in row) + ")" for row in rows)
    assert MysqlDialect().render_columns(cur, columns) == expected


@pytest.mark.parametrize(
    ("data_type", "column_type", "unsigned", "expected"),
    [
        ("bigint", "bigint unsigned", True, "numeric(20)"),
        ("int", "int unsigned", True, "bigint"),
        ("tinyint", "tinyint", False, "smallint"),
        ("decimal", "decimal(30,10)", False, "numeric(30,10)"),
        ("datetime", "datetime(3)", False, "timestamp(3)"),
        ("timestamp", "timestamp", False, "timestamptz"),
        ("time", "time(6)", False, "interval"),
        ("varchar", "varchar(20)", False, "varchar(20)"),
        ("json", "json", False, "jsonb"),
        ("longblob", "longblob", False, "bytea"),
    ],
)
def test_postgres_types(data_type: str, column_type: str, unsigned: bool, expected: str) -> None:
    assert pg_type(c(data_type, column_type, unsigned=unsigned)) == expected


def test_ddl_database_names_are_mapped() -> None:
    sql = rewrite_databases("ALTER TABLE src.items ADD COLUMN x INT", {"src": "dst"})
    assert sql == "ALTER TABLE dst.items ADD COLUMN x INT"
    assert rewrite_databases("CREATE DATABASE src", {"src": "dst"}) == "CREATE DATABASE dst"
    assert rewrite_databases("ALTER TABLE other.t DROP x", {"src": "dst"}).startswith(
        "ALTER TABLE other.t"
    )


def test_sinks_are_listed_with_capabilities_as_data() -> None:
    assert sorted(SINKS) == [
        "kafka",
        "mysql",
        "nats",
        "parquet_log",
        "parquet_mirror",
        "postgres",
        "redis",
        "ums",
    ]
    caps = {name: sink_factory(name).capabilities for name in SINKS}
    assert {name: cap.name for name, cap in caps.items()} == {name: name for name in SINKS}
    assert [n for n, cap in caps.items() if cap.transactional] == ["mysql", "postgres"]
    assert [n for n, cap in caps.items() if cap.applies_ddl] == [
        "mysql",
        "postgres",
        "parquet_mirror",
    ]
    assert [n for n, cap in caps.items() if cap.bulk_load] == ["mysql"]
    with pytest.raises(ConfigError, match="unknown sink 'pulsar'"):
        sink_factory("pulsar")


def test_sinks_pickle_and_never_hold_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    from headwater.sinks.postgres import PostgresSink, PostgresSinkConfig

    monkeypatch.setenv("HW_TEST_PG_PASSWORD", "s3cret")
    options = TargetConnection(password_env="HW_TEST_PG_PASSWORD")
    sink = PostgresSink(PostgresSinkConfig("p", options, StaticSchema(())))
    data = pickle.dumps(sink)
    # Issue #16: the password read on the driver travels inside the pickled task (an
    # executor has neither the variable nor the file); no repr ever shows it.
    monkeypatch.delenv("HW_TEST_PG_PASSWORD")
    shipped = pickle.loads(data).config
    assert shipped == sink.config and "s3cret" not in repr(shipped)
    assert "s3cret" not in repr(sink.config)
    assert shipped.connection.password() == "s3cret"
    with pytest.raises(ConfigError, match="HW_TEST_MISSING is not set"):
        TargetConnection(password_env="HW_TEST_MISSING").password()


def test_schema_file_reads_the_history_at_a_position_without_touching_it(tmp_path: object) -> None:
    from pathlib import Path

    from headwater.position import Position
    from headwater.schema.history import SchemaHistory
    from headwater.schema.model import TableDef
    from headwater.sinks import SchemaFile

    path = Path(str(tmp_path)) / "schema.jsonl"
    v1 = TableDef("shop", "t", (Column("id", "int", "int", nullable=False),), primary_key=("id",))
    with SchemaHistory.open(path) as history:
        history.bootstrap({("shop", "t"): v1}, Position(0, 1, 4))
        history.apply_ddl("ALTER TABLE t ADD COLUMN v INT", "shop", Position(0, 1, 500))
    with open(path, "ab") as f:
        f.write(b'{"torn')  # a writer in the middle of a line
    size = path.stat().st_size
    schema = SchemaFile(str(path))
    assert schema.table_at("shop", "t", Position(0, 1, 100)) == v1
    later = schema.table_at("shop", "t", Position(0, 1, 600))
    assert later is not None and later.column_names == ("id", "v")
    assert path.stat().st_size == size  # the live file was not repaired under its writer
    assert pickle.loads(pickle.dumps(schema)) == schema

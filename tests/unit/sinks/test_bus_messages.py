"""Bus messages from change rows: routing, keys, ids, and the three formats.

The Debezium envelope is checked against the fields Debezium documents for the MySQL
connector's change-event values and ``source`` block
(https://debezium.io/documentation/reference/stable/connectors/mysql.html).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from headwater.sinks.bus.messages import BusOptions, bus_messages, route
from headwater.sinks.section import SinkContext, SinkSection

DEBEZIUM_VALUE_FIELDS = {"before", "after", "source", "op", "ts_ms", "transaction"}
DEBEZIUM_SOURCE_FIELDS = {
    "version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "table",
    "server_id", "gtid", "file", "pos", "row", "thread", "query",
}  # fmt: skip


def change(op: str, seq: int, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "source": "src", "database": "shop", "table": "orders", "op": op,
        "ts_us": 1_700_000_000_123_456, "change_id": 1, "file_num": 3, "offset": 4096,
        "event_index": 2, "gtid": "0-1-7", "txn_id": "0-1-7", "sequence": seq,
        "key": '{"id": 1}', "before": None, "after": None, "schema_version": 1, "sql": None,
        "before_key": None,
    }  # fmt: skip
    base.update(kw)
    return base


def values(messages: list[Any]) -> list[Any]:
    return [None if m.value is None else orjson.loads(m.value) for m in messages]


def test_debezium_envelope_has_the_documented_fields() -> None:
    rows = [
        change("insert", 10, after='{"id": 1, "amount": "9.50", "b": {"base64": "AAE="}}'),
        change("update", 11, before='{"id": 1, "amount": "9.50"}',
               after='{"id": 1, "amount": "1.00"}'),
        change("delete", 12, before='{"id": 1, "amount": "1.00"}'),
        change("read", 13, after='{"id": 1, "amount": "1.00"}'),
    ]  # fmt: skip
    msgs = list(bus_messages(rows, BusOptions(format="debezium")))
    got = values(msgs)
    assert [v["op"] for v in got] == ["c", "u", "d", "r"]
    for v in got:
        assert set(v) == DEBEZIUM_VALUE_FIELDS
        assert set(v["source"]) == DEBEZIUM_SOURCE_FIELDS
        assert v["source"]["connector"] == "mysql" and v["source"]["db"] == "shop"
        assert v["source"]["table"] == "orders" and v["source"]["gtid"] == "0-1-7"
        assert v["source"]["ts_ms"] == 1_700_000_000_123 == v["ts_ms"]
        assert v["source"]["pos"] == 4096 and v["source"]["row"] == 2
    assert got[0]["before"] is None and got[0]["after"]["b"] == "AAE="  # base64 text
    assert got[1]["before"]["amount"] == "9.50" and got[1]["after"]["amount"] == "1.00"
    assert got[2]["after"] is None and got[2]["before"]["id"] == 1
    assert [v["source"]["snapshot"] for v in got] == ["false", "false", "false", "true"]
    assert {m.key for m in msgs} == {b'{"id":1}'}
    assert [m.topic for m in msgs] == ["src.shop.orders"] * 4
    assert [(m.sequence, m.sub) for m in msgs] == [(10, 0), (11, 0), (12, 0), (13, 0)]


def test_debezium_primary_key_change_is_delete_tombstone_create() -> None:
    row = change(
        "update", 20, key='{"id": 2}', before_key='{"id": 1}',
        before='{"id": 1, "v": 0}', after='{"id": 2, "v": 1}',
    )  # fmt: skip
    msgs = list(bus_messages([row], BusOptions(format="debezium", tombstones=True)))
    assert [(m.key, m.sub) for m in msgs] == [(b'{"id":1}', 0), (b'{"id":1}', 1), (b'{"id":2}', 2)]
    got = values(msgs)
    assert got[0]["op"] == "d" and got[1] is None and got[2]["op"] == "c"
    without = list(bus_messages([row], BusOptions(format="debezium")))
    assert [m.sub for m in without] == [0, 2]  # ids stay the same without tombstones


def test_change_row_format_and_tombstones() -> None:
    rows = [change("insert", 1, after='{"id": 1}'), change("delete", 2, before='{"id": 1}')]
    msgs = list(bus_messages(rows, BusOptions(tombstones=True)))
    assert [(m.sequence, m.sub, m.value is None) for m in msgs] == [
        (1, 0, False), (2, 0, False), (2, 1, True),
    ]  # fmt: skip
    first = orjson.loads(msgs[0].value or b"")
    assert first["after"] == {"id": 1} and first["key"] == {"id": 1} and first["sequence"] == 1
    assert msgs[0].id == "src:1-0"


def test_ddl_goes_to_the_schema_topic_as_its_own_kind() -> None:
    ddl = change("ddl", 5, table="orders", key=None, sql="ALTER TABLE orders ADD x INT")
    rows = [change("insert", 4, after='{"id": 1}'), ddl, change("insert", 6, after='{"id": 2}')]
    plain = list(bus_messages(rows, BusOptions()))
    assert [m.topic for m in plain] == ["src.shop.orders", "src.schema_changes", "src.shop.orders"]
    assert orjson.loads(plain[1].value or b"")["kind"] == "ddl"
    (dbz_message,) = bus_messages([ddl], BusOptions(format="debezium"))
    dbz = orjson.loads(dbz_message.value or b"")
    assert set(dbz) == {"source", "ts_ms", "databaseName", "schemaName", "ddl", "tableChanges"}
    assert dbz["ddl"] == "ALTER TABLE orders ADD x INT" and dbz["databaseName"] == "shop"
    ums = list(bus_messages(rows, BusOptions(format="ums")))
    assert [m.topic for m in ums] == ["src.shop.orders", "src.schema_changes", "src.shop.orders"]
    assert orjson.loads(ums[0].value or b"")["payload"][0]["tuple"][0] == 4


def test_ums_runs_are_cut_by_table_and_max_rows() -> None:
    rows = [change("insert", i, key=f'{{"id": {i}}}', after=f'{{"id": {i}}}') for i in range(5)]
    rows.insert(3, change("insert", 99, table="items", after='{"id": 9}'))
    msgs = list(bus_messages(rows, BusOptions(format="ums", ums_max_rows=2)))
    sizes = [len(orjson.loads(m.value or b"")["payload"]) for m in msgs]
    assert sizes == [2, 1, 1, 2] and [m.sequence for m in msgs] == [0, 2, 99, 3]
    assert msgs[0].key == b"src.shop.orders"


def test_topic_names_are_sanitized_and_one_topic_is_possible() -> None:
    assert route(
        "{source}.{database}.{table}", {"source": "s", "database": "d b", "table": "t/ä"}
    ) == ("s.d_b.t__")
    assert route("changes", {"source": "s", "database": "d", "table": "t"}) == "changes"
    with pytest.raises(ValueError, match="template"):
        BusOptions(topic="{nope}")
    with pytest.raises(ValueError, match="format"):
        BusOptions(format="avro")


def section(kind: str, **fields: Any) -> SinkSection:
    return SinkSection(kind, tuple(fields.items()), line=7, path="sinks[0]")


def test_sections_parse_and_name_bad_fields(tmp_path: Any) -> None:
    from headwater.errors import ConfigError
    from headwater.sinks.kafka.configuration import parse as kafka
    from headwater.sinks.nats.configuration import parse as nats
    from headwater.sinks.redis.configuration import parse as redis

    ctx = SinkContext(pipeline="p", base_dir=tmp_path)
    k = kafka(
        section("kafka", bootstrap_servers="h:9092", partitioning="single", format="ums"), ctx
    )
    assert k.ordering == "global" and k.bus.format == "ums" and k.pipeline == "p"
    with pytest.raises(ConfigError, match=r"sinks\[0\]\.format"):
        kafka(section("kafka", bootstrap_servers="h", format="avro"), ctx)
    with pytest.raises(ConfigError, match="carries a secret"):
        kafka(section("kafka", bootstrap_servers="h", producer={"sasl.password": "x"}), ctx)
    with pytest.raises(ConfigError, match=r"sinks\[0\]\.bootstrap_servers"):
        kafka(section("kafka"), ctx)
    n = nats(section("nats", url="nats://h:4222"), ctx)
    assert n.subjects == ["hw.>"]
    with pytest.raises(ConfigError, match="literal token"):
        nats(section("nats", url="nats://h", topic="{source}.x"), ctx)
    r = redis(section("redis", host="h", password_env="RPW"), ctx)
    assert r.bus.topic == "{source}.{database}.{table}"
    with pytest.raises(ConfigError, match="one stream per table"):
        redis(section("redis", host="h", topic="all"), ctx)
    assert redis(section("redis", host="h", topic="all", ordering="global"), ctx).bus.topic == "all"
    with pytest.raises(ConfigError, match="inline password"):
        redis(section("redis", host="h", password="s3cret"), ctx)


def test_spliced_change_row_equals_parsed_and_reencoded() -> None:
    """The fast path (images spliced as text) against the plain one (parse, encode)."""
    from headwater.sinks.bus.messages import change_row_bytes, change_row_value

    rows = [
        change("insert", 1, after='{"id":1,"s":"a\\"b","f":1.5,"n":null,"u":"\\u00e9"}'),
        change("update", 2, key='{"id":2}', before_key='{"id":1}', before='{"id":1}',
               after='{"id":2,"d":"2024-01-01","b":{"base64":"AA=="}}'),
        change("delete", 3, before='{"id":3}', key='{"id":3}'),
    ]  # fmt: skip
    for row in rows:
        spliced = orjson.loads(change_row_bytes(row))
        assert spliced == change_row_value(row)
        as_dicts = {
            k: orjson.loads(v) if k in ("key", "before", "after", "before_key") and v else v
            for k, v in row.items()
        }
        assert orjson.loads(change_row_bytes(as_dicts)) == spliced  # images given as dicts


def test_kafka_producers_compress_with_lz4_unless_the_section_says_otherwise() -> None:
    from headwater.sinks.kafka import KafkaConfig
    from headwater.sinks.kafka.producer import producer_settings

    settings = producer_settings(KafkaConfig("k:9092"))
    assert settings["compression.type"] == "lz4"
    assert settings["enable.idempotence"] is True and settings["acks"] == "all"
    own = producer_settings(KafkaConfig("k:9092", producer=(("compression.type", "none"),)))
    assert own["compression.type"] == "none"

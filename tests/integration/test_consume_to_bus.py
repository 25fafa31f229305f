"""``headwater consume run --to kafka|nats|redis`` and ``--sink FILE`` against a live
MariaDB, ``headwater reader run`` and real buses (Tansu, nats-server, redis-server).

Oracles: the reader's own JSON stream of the source's changes (every change delivered to
each bus), the source table (replaying the bus's change-row messages per key rebuilds it),
the pipeline's message encoding (:func:`headwater.sinks.bus.messages.change_row_value`),
and the group's checkpoints, which only cover what the bus has (ack after delivery).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from headwater.client import FileStore
from headwater.client.decoded import row_of
from headwater.errors import ConfigError
from headwater.sandbox import MariadbSandbox
from headwater.server.sharding import shard_of
from headwater.sinks.bus.direct import bus_writer
from tests.integration.bus_support import free_port, kafka_broker, nats_server, redis_server  # noqa: F401
from tests.integration.server_support import Http
from tests.integration.test_consumer_sdk import _cli, _expected, _stop, _workload, reader  # noqa: F401
from tests.integration.test_reader_capture import wait_for
from tests.integration.test_sink_bus import kafka_read, nats_read

pytestmark = pytest.mark.integration


def _by_key(messages: list[dict[str, Any]]) -> dict[Any, list[int]]:
    keys: dict[Any, list[int]] = {}
    for m in messages:
        keys.setdefault(orjson.dumps(m["key"]), []).append(m["sequence"])
    return keys


def _redis_entries(server: tuple[str, int]) -> list[dict[str, Any]]:
    import redis

    client = redis.Redis(host=server[0], port=server[1])
    try:
        out = []
        for entry_id, fields in client.xrange("cb.sdk.t"):
            value = orjson.loads(fields[b"value"])
            assert entry_id.decode() == f"{value['sequence']}-0"  # id from the sequence
            out.append(value)
        return out
    finally:
        client.close()


def test_consume_sends_each_change_to_kafka_nats_and_redis_acking_after_delivery(
    mariadb: MariadbSandbox,
    reader: Http,  # noqa: F811
    kafka_broker: str,  # noqa: F811
    nats_server: str,  # noqa: F811
    redis_server: tuple[str, int],  # noqa: F811
    tmp_path: Path,
) -> None:
    _workload(mariadb, random.Random(2020), 60)
    rows = _expected(reader, mariadb)
    expected = sorted(r["sequence"] for r in rows)

    def common(shards: int) -> list[str]:
        return ["--reader", reader.url, "--task", "src", "--tables", "sdk.*", "--shards",
                str(shards), "--batch-size", "9",
                "--checkpoints", str(tmp_path / "cp")]  # fmt: skip

    nats_sink = tmp_path / "nats.yaml"
    nats_sink.write_text(
        f"type: nats\nurl: '{nats_server}'\nstream: cbus\n"
        "topic: 'cbus.{database}.{table}'\nschema_topic: 'cbus.schema'\n"
    )
    dead_sink = tmp_path / "dead.yaml"  # nothing listens there: no delivery, no ack
    dead_sink.write_text(f"type: kafka\nbootstrap_servers: '127.0.0.1:{free_port()}'\n"
                         "timeout_s: 1\n")  # fmt: skip
    errors = tmp_path / "stderr"
    procs = [
        _cli([*common(2), "--group", "to-kafka", "--to", "kafka", "--bus", kafka_broker,
              "--topic", "cb.{database}.{table}"], errors),
        _cli([*common(2), "--group", "to-nats", "--sink", str(nats_sink)], errors),
        _cli([*common(1), "--group", "to-redis", "--to", "redis",
              "--bus", f"{redis_server[0]}:{redis_server[1]}", "--topic", "cb.{database}.{table}"],
             errors),
        _cli([*common(2), "--group", "to-nowhere", "--sink", str(dead_sink)], errors),
    ]  # fmt: skip
    try:
        wait_for(lambda: len(_redis_entries(redis_server)) >= len(expected), 60, "redis")
        found = kafka_read(kafka_broker, ["cb.sdk.t"], len(expected))
        wait_for(lambda: len(nats_read(nats_server, "cbus", "sdk")) >= len(expected), 60, "nats")
        nats_msgs = nats_read(nats_server, "cbus", "sdk")
    finally:
        outs = [_stop(p) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors.read_text()
    assert outs == [b"", b"", b"", b""]  # a bus replaces the JSON lines

    kafka_msgs = [m for part in found.values() for m in part]
    for m in kafka_msgs:  # the row key as the message key, as the pipeline's sink sends it
        assert m.key() == orjson.dumps(orjson.loads(m.value())["key"])
    kafka_values = [orjson.loads(m.value()) for part in found.values() for m in part]
    redis_values = _redis_entries(redis_server)
    for name, got in (("kafka", kafka_values), ("nats", nats_msgs), ("redis", redis_values)):
        assert sorted(m["sequence"] for m in got) == expected, name  # each change once
        for seqs in _by_key(got).values():  # each key's changes in log order
            assert seqs == sorted(seqs), name
    # The pipeline's change_row format: the reader's JSON row, less commit_ts, same values.
    by_seq = {r["sequence"]: r for r in rows}
    for m in redis_values:
        row = by_seq[m["sequence"]]
        assert (m["op"], m["database"], m["table"]) == (row["op"], "sdk", "t")
        assert (m["key"], m["before"], m["after"]) == (row["key"], row["before"], row["after"])
        assert "commit_ts" not in m

    # Acked only after delivery: the groups whose bus has every change moved past them;
    # the group whose bus never answered acked nothing.
    store = FileStore(tmp_path / "cp")
    for group, shards in (("to-kafka", 2), ("to-nats", 2), ("to-redis", 1)):
        state = store.load(group)
        assert state is not None and state.count == shards
        for shard, next_sequence in state.next.items():
            mine = [r["sequence"] for r in rows if shard_of(row_of(r), shards) == shard]
            assert next_sequence > max(mine), (group, shard)
    nowhere = store.load("to-nowhere")
    assert nowhere is None or max(nowhere.next.values()) <= expected[0]


def test_consume_refuses_what_a_consumer_cannot_give() -> None:
    with pytest.raises(ConfigError, match=r"--to\.partitioning: global order needs one shard"):
        bus_writer("kafka", {"bootstrap_servers": "h:1", "partitioning": "single"},
                   group="g", shards=2)  # fmt: skip
    with pytest.raises(ConfigError, match=r"--to\.delivery: exactly_once needs"):
        bus_writer("kafka", {"bootstrap_servers": "h:1", "delivery": "exactly_once"},
                   group="g", shards=1)  # fmt: skip
    with pytest.raises(ConfigError, match=r"--shards: Redis streams need their entries"):
        bus_writer("redis", {"host": "h"}, group="g", shards=2)
    with pytest.raises(ConfigError, match=r"--to: 'mysql' is not a message bus"):
        bus_writer("mysql", {}, group="g", shards=1)

"""The Redis sink's password reaches the executors from the driver (issue #16).

The variable is set in the driver's process after the Spark session started: the JVM,
and the Python workers it starts, took their environment at launch and never see it, as
a worker on another machine would not. The sink writes all the same, because the
password was read on the driver when the sink was pickled into the task."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from headwater.sinks.bus.messages import BusOptions
from headwater.sinks.redis import RedisConfig, RedisSink
from tests.integration.bus_support import redis_server  # noqa: F401
from tests.integration.sink_support import row
from tests.integration.test_sink_spark import frame

pytestmark = pytest.mark.integration

PASSWORD = "driver-only-pw"


@pytest.fixture
def locked_redis(redis_server: tuple[str, int]) -> Iterator[Any]:  # noqa: F811
    """The session's Redis with a password for this test only; an authenticated client."""
    import redis

    client = redis.Redis(host=redis_server[0], port=redis_server[1])
    client.ping()  # logged in before the password is set
    client.config_set("requirepass", PASSWORD)
    try:
        yield client
    finally:
        client.config_set("requirepass", "")
        client.close()


def test_password_env_of_the_driver_only_reaches_the_executors(
    spark: Any,
    locked_redis: Any,
    redis_server: tuple[str, int],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spark.sparkContext.parallelize([0], 1).collect()  # the workers are running already
    monkeypatch.setenv("HW_TEST_REDIS_PW", PASSWORD)
    seen = (
        spark.sparkContext.parallelize([0], 1)
        .map(lambda _: __import__("os").environ.get("HW_TEST_REDIS_PW"))
        .collect()
    )
    assert seen == [None]  # the executor's environment lacks it
    sink = RedisSink(RedisConfig(
        host=redis_server[0], port=redis_server[1], password_env="HW_TEST_REDIS_PW", tasks=1,
        bus=BusOptions(topic="pw.{database}.{table}", schema_topic="pws.{database}.{table}"),
    ))  # fmt: skip
    assert PASSWORD not in repr(sink)
    rows = [row("insert", i, "pwdb", "t", after={"id": i}) for i in range(1, 4)]
    sink.write_batch(frame(spark, rows, 2), 0)
    entries = locked_redis.xrange("pw.pwdb.t")
    assert [e[0].decode() for e in entries] == [f"{r['sequence']}-0" for r in rows]
    locked_redis.delete("pw.pwdb.t")

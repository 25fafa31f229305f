"""The executor side of the Redis Streams sink (redis-py).

Each message is ``XADD <stream> <sequence>-<sub> key <key> value <value>`` (fields
omitted when None: a tombstone has no ``value``). Redis refuses an id not above the
stream's last one ("The ID specified in XADD is equal or smaller than the target stream
top item", https://redis.io/docs/latest/commands/xadd/); since each stream is written by
one task in sequence order (:mod:`headwater.sinks.redis.configuration`), that refusal
means the entry is there already (a replay) and it is skipped; any other error fails
the batch. A lost or refused connection is a ``TransientSinkError`` (Spark retries the
task); a refused login (redis-py's ``AuthenticationError``/``AuthorizationError``, which
it derives from ``ConnectionError``) or command is a plain ``SinkError``, returned to the
driver without a retry (:mod:`headwater.sinks.failfast`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from headwater.errors import SinkError, TransientSinkError
from headwater.sinks.bus.arrow import batch_messages
from headwater.sinks.bus.messages import BusMessage
from headwater.sinks.redis.configuration import RedisConfig

if TYPE_CHECKING:
    import pyarrow

__all__ = ["write_partition"]

_PIPELINE = 500  # commands per round trip
_DUPLICATE = "equal or smaller than the target stream top item"


def write_partition(config: RedisConfig, index: int, batches: Iterator[pyarrow.RecordBatch]) -> int:
    """Append one ordered partition's messages; the number appended (replays excluded)."""
    import redis
    import redis.exceptions
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis(
        host=config.host, port=config.port, db=config.db, password=config.password(),
        socket_timeout=config.timeout_s, socket_connect_timeout=config.timeout_s,
    )  # fmt: skip
    # redis-py retries a ConnectionError, and a refused login is one to it: the first
    # connection (the login) is made without retries, later ones with redis-py's own.
    retry = client.get_retry()
    client.set_retry(Retry(NoBackoff(), 0))
    logged_in = False
    added = 0
    try:
        for batch in batches:
            if not logged_in:
                client.ping()
                if retry is not None:
                    client.set_retry(retry)
                logged_in = True
            pipe = client.pipeline(transaction=False)
            queued = []
            for m in batch_messages(batch, config.bus):
                entry = {"id": m.id.encode()}
                if m.key is not None:
                    entry["key"] = m.key
                if m.value is not None:
                    entry["value"] = m.value
                pipe.xadd(m.topic, entry, id=f"{m.sequence}-{m.sub}")  # type: ignore[arg-type]
                queued.append(m)
                if len(queued) >= _PIPELINE:
                    added += _run(pipe, queued)
                    queued = []
            added += _run(pipe, queued)
    except (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError) as e:
        # a ConnectionError to redis-py, but a retry sends the same password: terminal
        raise SinkError(f"Redis at {config.host}:{config.port} refused the login: {e}") from None
    except redis.ConnectionError as e:
        raise TransientSinkError(f"Redis at {config.host}:{config.port}: {e}") from None
    except redis.ResponseError as e:  # refused on connecting (SELECT of a db out of range)
        raise SinkError(f"Redis at {config.host}:{config.port}: {e}") from None
    finally:
        client.close()
    return added


def _run(pipe: Any, queued: list[BusMessage]) -> int:
    import redis

    if not queued:
        return 0
    results = pipe.execute(raise_on_error=False)
    added = 0
    for m, result in zip(queued, results, strict=True):
        if isinstance(result, redis.ResponseError):
            if _DUPLICATE in str(result):
                continue
            raise SinkError(f"Redis XADD to {m.topic!r} failed: {result}", table=m.topic)
        added += 1
    return added

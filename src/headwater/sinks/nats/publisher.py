"""The executor side of the NATS JetStream sink (nats-py, asyncio in the task's thread).

Each message is published with the header ``Nats-Msg-Id: <source>:<sequence>-<sub>``,
so JetStream drops a replayed message it has already stored within the stream's
``duplicate_window`` (https://docs.nats.io/using-nats/developer/develop_jetstream/model_deep_dive,
"Message Deduplication"). Tombstones have no NATS form and are not sent.

Publishes are asynchronous with a bounded window (``NatsConfig.window``): up to that many
messages are sent before the oldest one's acknowledgement is awaited (nats-py's
``publish_async``; the client's semaphore bounds what is outstanding). One connection
sends them in order and the server stores a connection's publishes to a stream in the
order received, so the stream order is the send order. Any failed or missing
acknowledgement fails the task (the batch is replayed and the server drops what it
stored already). The window's price: when one message is refused but later messages of
its window were stored, its replay lands after them; a lost connection loses every later
message too, so the order holds there. ``window: 1`` publishes one at a time.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from headwater.errors import SinkError, TransientSinkError
from headwater.sinks.bus.arrow import batch_messages
from headwater.sinks.nats.configuration import NatsConfig

if TYPE_CHECKING:
    import pyarrow

__all__ = ["ensure_stream", "write_partition"]


async def ensure_stream(js: Any, config: NatsConfig) -> None:
    """Create the stream when missing (its subjects and de-duplication window)."""
    from nats.js.api import StreamConfig
    from nats.js.errors import NotFoundError

    try:
        await js.stream_info(config.stream)
    except NotFoundError:
        await js.add_stream(
            StreamConfig(
                name=config.stream,
                subjects=config.subjects,
                duplicate_window=config.duplicate_window_s,
            )
        )


async def _publish(config: NatsConfig, batches: Iterator[Any]) -> int:
    import nats
    from nats.errors import Error as NatsError

    try:
        nc = await nats.connect(
            config.url, connect_timeout=config.timeout_s, max_reconnect_attempts=0
        )
    except (OSError, NatsError) as e:
        raise TransientSinkError(f"NATS: cannot connect to {config.url}: {e}") from None
    sent = 0
    pending: deque[tuple[str, asyncio.Future[Any]]] = deque()
    try:
        js = nc.jetstream(timeout=config.timeout_s, publish_async_max_pending=config.window)
        await ensure_stream(js, config)
        for batch in batches:
            for m in batch_messages(batch, config.bus):
                if m.value is None:
                    continue
                while pending and (pending[0][1].done() or len(pending) >= config.window):
                    await _acked(config, *pending.popleft())
                try:
                    future = await js.publish_async(
                        m.topic, m.value, wait_stall=config.timeout_s,
                        headers={"Nats-Msg-Id": m.id},
                    )  # fmt: skip
                except NatsError as e:
                    raise TransientSinkError(f"NATS: publish to {m.topic!r}: {e}") from None
                pending.append((m.topic, future))
                sent += 1
        while pending:
            await _acked(config, *pending.popleft())
    finally:
        for _, future in pending:
            future.cancel()
        await nc.close()
    return sent


async def _acked(config: NatsConfig, topic: str, future: asyncio.Future[Any]) -> None:
    """Wait for one publish's acknowledgement; a refusal or none in time fails the task."""
    from nats.errors import Error as NatsError

    try:
        await asyncio.wait_for(future, config.timeout_s)
    except TimeoutError:
        raise TransientSinkError(
            f"NATS: no acknowledgement from {topic!r} in {config.timeout_s}s", table=topic
        ) from None
    except NatsError as e:
        raise SinkError(f"NATS: publish to {topic!r} failed: {e}", table=topic) from None


def write_partition(config: NatsConfig, index: int, batches: Iterator[pyarrow.RecordBatch]) -> int:
    """Publish one ordered partition's messages; the number published."""
    return asyncio.run(_publish(config, batches))

"""Bus sinks without Spark: the consumer SDK's batches sent to Kafka, NATS or Redis.

``headwater consume run --to kafka|nats|redis`` (or ``--sink FILE``) hands every batch of
the SDK (:mod:`headwater.client`) to a :class:`BusWriter`: the batch's changes become one
Arrow batch of change rows (:data:`headwater.changes.schema.CHANGE_COLUMNS`) and go
through the same executor function the pipeline's sink runs per Spark partition
(``write_partition`` of :mod:`headwater.sinks.kafka.producer`,
:mod:`headwater.sinks.nats.publisher`, :mod:`headwater.sinks.redis.writer`), so the
messages, their topics, keys and ids are the pipeline's, byte for byte
(:mod:`headwater.sinks.bus.messages`). The shard number stands where the pipeline has
the Spark partition index.

Delivery: ``write_partition`` returns only when the bus has confirmed every message
(Kafka: ``flush`` with ``acks=all`` on an idempotent producer, delivery errors raised;
NATS: every JetStream publish acknowledged; Redis: the pipeline of ``XADD``\\ s executed).
The SDK acks a batch when its handler returns, so a batch is acked only after the bus has
it: at least once. A batch redelivered after a crash is sent again: NATS and Redis drop
the copies by message id (the row sequence); Kafka consumers see them (Kafka's
``exactly_once`` needs the pipeline's batch ids and is refused here).

Ordering: a shard's changes arrive in log order, so each key's messages are in log order
(the SDK shards by key). Global order (Kafka ``partitioning: single``, ``ordering:
global``) needs one shard: refused with more. So does Redis, always: ``XADD`` refuses an
id not above the stream's last, so a stream must be written in sequence order by one
writer (:mod:`headwater.sinks.redis.writer`), and shards split a table by key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.errors import ConfigError

if TYPE_CHECKING:
    from headwater.changes import ChangeRow

__all__ = ["BUS_KINDS", "BusWriter", "bus_writer", "load_sink_file"]

#: The sink kinds a consumer can send to, and the field ``--bus`` fills for each.
BUS_KINDS: Mapping[str, str] = {"kafka": "bootstrap_servers", "nats": "url", "redis": "host"}


@dataclass(frozen=True, slots=True)
class BusWriter:
    """An SDK handler that sends each batch to a bus (module docstring); ``sent`` counts
    are not kept: the bus is the record."""

    kind: str
    config: Any

    def __call__(self, batch: Any) -> None:
        """The SDK's handler: ``batch.changes`` of shard ``batch.shard``, in log order."""
        self.write(batch.shard, batch.changes)

    def write(self, shard: int, changes: Sequence[ChangeRow]) -> int:
        """Send ``changes`` (one shard's, in log order); the number of messages sent,
        all of them confirmed by the bus."""
        if not changes:
            return 0
        batches = iter(_change_batch(changes).to_batches())
        if self.kind == "kafka":
            from headwater.sinks.kafka.producer import write_partition as kafka

            return kafka(self.config, 0, shard, batches)
        if self.kind == "nats":
            from headwater.sinks.nats.publisher import write_partition as nats

            return nats(self.config, shard, batches)
        from headwater.sinks.redis.writer import write_partition as redis

        return redis(self.config, shard, batches)


def _change_batch(changes: Sequence[ChangeRow]) -> Any:
    """``changes`` as an Arrow table of change rows, in the order given."""
    import pyarrow as pa

    from headwater.changes.schema import CHANGE_COLUMNS, change_arrow_schema, change_row_values

    values = [change_row_values(ch) for ch in changes]
    columns = [[v[i] for v in values] for i in range(len(CHANGE_COLUMNS))]
    return pa.Table.from_arrays(
        [pa.array(c, t.type) for c, t in zip(columns, change_arrow_schema(), strict=True)],
        schema=change_arrow_schema(),
    )


def bus_writer(
    kind: str, fields: Mapping[str, Any], *, group: str, shards: int, where: str = "--to",
    base_dir: Path | None = None, line: int = 0,
) -> BusWriter:  # fmt: skip
    """The writer of a sink section of ``kind`` with ``fields`` (the pipeline file's
    fields of that sink); ``group`` stands for the pipeline's name. A ConfigError names
    ``where`` and the field."""
    from headwater.sinks import SINKS
    from headwater.sinks.section import SinkContext, SinkSection

    if kind not in BUS_KINDS:
        raise ConfigError(
            f"{kind!r} is not a message bus; expected one of {', '.join(BUS_KINDS)}", field=where
        )
    section = SinkSection(kind, tuple(fields.items()), line, where)
    context = SinkContext(pipeline=group, base_dir=base_dir or Path.cwd())
    config = SINKS[kind].build(section, context).config
    if kind == "kafka" and config.delivery == "exactly_once":
        raise section.error(
            "exactly_once needs the pipeline's batch ids; a consumer sends at least once",
            "delivery",
        )
    single = config.partitioning == "single" if kind == "kafka" else config.ordering == "global"
    if single and shards > 1:
        raise section.error(
            f"global order needs one shard (--shards 1), not {shards}",
            "partitioning" if kind == "kafka" else "ordering",
        )
    if kind == "redis" and shards > 1:
        # Redis refuses an entry id not above the stream's last one (XADD), and the
        # writer takes that refusal for a replay: a table's stream must be written in
        # sequence order by one writer, and the SDK's shards split tables by key.
        raise ConfigError(
            f"Redis streams need their entries in sequence order: --shards 1, not {shards}",
            field="--shards",
        )
    return BusWriter(kind, config)


def load_sink_file(path: str, *, group: str, shards: int) -> BusWriter:
    """The writer of a YAML file holding one bus sink section (``type:`` and the fields a
    pipeline file's ``sinks:`` entry has); errors name the file, line and field."""
    import yaml

    from headwater.configfile import compose, read_config

    text, file, base = read_config(path)
    root = compose(text, file)
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError("must be a mapping: type: and the sink's fields", file=file, line=1)
    data = yaml.safe_load(text)
    kind = data.pop("type", None)
    if not isinstance(kind, str):
        raise ConfigError("missing (required)", file=file, line=1, field="type")
    try:
        return bus_writer(
            kind, data, group=group, shards=shards, where="sink", base_dir=base,
            line=root.start_mark.line + 1,
        )  # fmt: skip
    except ConfigError as e:
        raise ConfigError(_message(e), file=file, line=e.line, field=e.field) from None


def _message(e: ConfigError) -> str:
    """The message of ``e`` without its ``file:line: field:`` prefix."""
    text = str(e)
    where = ":".join(str(p) for p in (e.file, e.line) if p is not None)
    for prefix in (where, e.field):
        if prefix and text.startswith(f"{prefix}: "):
            text = text[len(prefix) + 2 :]
    return text

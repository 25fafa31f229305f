"""What the message-bus sinks (Kafka, NATS JetStream, Redis Streams) share.

``messages`` turns change rows into bus messages (routing, keys, the three formats and
DDL messages: pure functions); ``spark`` orders a micro-batch for a bus (per table or
global) and runs one writer per Spark partition on the executors.
"""

from __future__ import annotations

from headwater.sinks.bus.messages import FORMATS, BusMessage, BusOptions, bus_messages

__all__ = ["FORMATS", "BusMessage", "BusOptions", "bus_messages"]

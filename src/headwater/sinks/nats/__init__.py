"""NATS JetStream sink: changes as messages on subjects of one JetStream stream
(``configuration``, ``factory``; ``publisher``: the executor side)."""

from __future__ import annotations

from headwater.sinks.nats.configuration import NatsConfig
from headwater.sinks.nats.factory import CAPABILITIES, NatsSink

__all__ = ["CAPABILITIES", "NatsConfig", "NatsSink"]

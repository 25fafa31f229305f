"""Redis Streams sink: changes as stream entries whose ids are the row sequences
(``configuration``, ``factory``; ``writer``: the executor side)."""

from __future__ import annotations

from headwater.sinks.redis.configuration import RedisConfig
from headwater.sinks.redis.factory import CAPABILITIES, RedisSink

__all__ = ["CAPABILITIES", "RedisConfig", "RedisSink"]

"""Options of the NATS JetStream sink: :class:`NatsConfig`, and the parsing of its section.

``url`` (``nats://host:port``) is required. ``topic``/``schema_topic`` are subject
templates; both must begin with a literal token (``hw.{source}...``): the stream
``stream`` is created, when missing, over ``<token>.>`` of each, with a de-duplication
window of ``duplicate_window_s`` (a replay after a crash must come within it to be
de-duplicated). ``ordering``: ``table`` or ``global`` (:mod:`headwater.sinks.bus.spark`).
``window``: how many publishes may await their acknowledgement at once
(:mod:`headwater.sinks.nats.publisher`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from headwater.sinks.bus.messages import BusOptions
from headwater.sinks.bus.section import BUS_FIELDS, bus_options
from headwater.sinks.bus.spark import ORDERINGS
from headwater.sinks.section import SinkContext, SinkSection, section_fields

__all__ = ["NatsConfig", "parse"]

_DEFAULT_BUS: dict[str, Any] = {
    "topic": "hw.{source}.{database}.{table}",
    "schema_topic": "hw.{source}.schema",
}


def _token(template: str) -> str:
    token = template.split(".", 1)[0]
    if not token or "{" in token or "*" in token or ">" in token:
        raise ValueError(f"subject template {template!r} must begin with a literal token")
    return token


@dataclass(frozen=True, slots=True)
class NatsConfig:
    """A NATS JetStream sink's options (module docstring)."""

    url: str
    bus: BusOptions = field(default_factory=lambda: BusOptions(**_DEFAULT_BUS))
    stream: str = "headwater"
    ordering: str = "table"
    tasks: int = 2
    duplicate_window_s: float = 600.0
    window: int = 1000
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {', '.join(ORDERINGS)}")
        if self.tasks < 1 or self.window < 1:
            raise ValueError("tasks and window must be positive integers")
        self.subjects  # noqa: B018  (checks the templates)

    @property
    def subjects(self) -> list[str]:
        """The stream's subjects: ``<first token>.>`` of each template."""
        return sorted({f"{_token(t)}.>" for t in (self.bus.topic, self.bus.schema_topic)})


def parse(section: SinkSection, context: SinkContext) -> NatsConfig:
    """The options of a ``type: nats`` section."""
    own = {"url", "stream", "ordering", "tasks", "duplicate_window_s", "window", "timeout_s"}
    f = section_fields(section, BUS_FIELDS | own, {"url"})
    bus = bus_options(section, f, **_DEFAULT_BUS)
    try:
        return NatsConfig(bus=bus, **f)
    except (TypeError, ValueError) as e:
        raise section.error(str(e)) from None

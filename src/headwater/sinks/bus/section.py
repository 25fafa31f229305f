"""The fields every bus sink's pipeline-file section shares (:class:`BusOptions`)."""

from __future__ import annotations

from typing import Any

from headwater.sinks.bus.messages import FORMATS, BusOptions
from headwater.sinks.section import SinkSection

__all__ = ["BUS_FIELDS", "bus_options"]

#: The section fields that make a :class:`BusOptions`.
BUS_FIELDS = frozenset({"format", "topic", "schema_topic", "tombstones", "ums_max_rows"})


def bus_options(section: SinkSection, f: dict[str, Any], **defaults: Any) -> BusOptions:
    """The :class:`BusOptions` of a section's fields ``f`` (removed from ``f``);
    ``defaults`` replace BusOptions' own defaults."""
    kw = {**defaults, **{k: f.pop(k) for k in list(f) if k in BUS_FIELDS}}
    if "format" in kw and kw["format"] not in FORMATS:
        raise section.error(f"expected one of {', '.join(FORMATS)}, got {kw['format']!r}", "format")
    for name in ("topic", "schema_topic"):
        if name in kw and not isinstance(kw[name], str):
            raise section.error("must be a string", name)
    if not isinstance(kw.get("tombstones", False), bool):
        raise section.error("must be true or false", "tombstones")
    try:
        return BusOptions(**kw)
    except (TypeError, ValueError) as e:
        raise section.error(str(e)) from None

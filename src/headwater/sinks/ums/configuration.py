"""Options of the UMS file sink: :class:`UmsConfig`, and the parsing of its section.

``path`` is relative to the pipeline file's directory when not absolute; ``max_rows``
caps the changes of one message (a positive integer).
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.sinks.section import SinkContext, SinkSection, section_fields

__all__ = ["UmsConfig", "parse"]


@dataclass(frozen=True, slots=True)
class UmsConfig:
    """Where the batches go (``path``, a directory) and at most ``max_rows`` changes a
    message."""

    path: str
    max_rows: int = 1000


def parse(section: SinkSection, context: SinkContext) -> UmsConfig:
    """The options of a ``type: ums`` section."""
    f = section_fields(section, {"path", "max_rows"}, {"path"})
    max_rows = f.get("max_rows", 1000)
    if not isinstance(max_rows, int) or max_rows < 1:
        raise section.error("must be a positive integer", "max_rows")
    return UmsConfig(str(context.path(f["path"])), max_rows)

"""UMS sink: each micro-batch as DBUS UMS messages in JSON lines files.

``messages`` (the UMS format, :func:`~headwater.sinks.ums.messages.to_ums`),
``configuration`` (options and the pipeline-file section), ``factory`` (capabilities and
the sink class).
"""

from __future__ import annotations

from headwater.sinks.ums.configuration import UmsConfig
from headwater.sinks.ums.factory import CAPABILITIES, UmsFileSink

__all__ = ["CAPABILITIES", "UmsConfig", "UmsFileSink"]

"""The durable change log: CRC-framed transaction records in segment files.

``ChangeLog.open(directory, StoreOptions(...))`` gives the one writer (or, with
``read_only=True``, a reader in another process). Records are appended with a durability
policy, read from any seq, position, time or GTID set, tailed with wake-up, retained by age
and size, and compressed when old. Formats are in ``record.py``, ``segment.py``,
``index.py`` and ``catalog.py``, and in docs/formats.md ("Change log store").
"""

from headwater.store.cursor import EARLIEST, LATEST, AtSeq, AtTime, LogReader, Start, Transaction
from headwater.store.log import ChangeLog, LogInfo
from headwater.store.options import Durability, StoreOptions
from headwater.store.record import FIRST_CHUNK, LAST_CHUNK, WHOLE, Record
from headwater.store.segment import SegmentMeta
from headwater.store.state import ChangeIdInfo, ReaderState

__all__ = [
    "EARLIEST",
    "FIRST_CHUNK",
    "LAST_CHUNK",
    "LATEST",
    "WHOLE",
    "AtSeq",
    "AtTime",
    "ChangeIdInfo",
    "ChangeLog",
    "Durability",
    "LogInfo",
    "LogReader",
    "ReaderState",
    "Record",
    "SegmentMeta",
    "Start",
    "StoreOptions",
    "Transaction",
]

"""What the ingest paths report to the task for each finished transaction.

A leaf value type, with no I/O: both the Python grouper (``headwater.reader.grouping``)
and the compiled path's driver (``headwater.reader.native``) build :class:`Committed`, and
the task (``headwater.reader.task``) advances its resume position and GTID set over them.
A run of transactions the compiled scanner stored is reported as one :class:`Committed`,
the run's last transaction's, with ``transactions`` counting them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headwater.position import MariadbGtid, MysqlGtid, Position

__all__ = ["Committed"]


@dataclass(slots=True)
class Committed:
    """One transaction the grouper finished (stored or dropped by the filters)."""

    position: Position
    gtid: str
    gtid_obj: MariadbGtid | MysqlGtid | None
    ts_us: int
    stored: bool
    last_seq: int
    records: int
    next_file: str
    next_offset: int
    is_ddl: bool
    #: raw (TABLE_MAP, rows event) pairs of the watched table (heartbeats)
    watched: list[tuple[bytes, bytes]] = field(default_factory=list)
    #: the transaction was skipped (``skip`` said it is already stored or before the start)
    skipped: bool = False
    #: transactions this reports: more than 1 for a run of the native scanner, whose
    #: fields are those of its last transaction (all stored, none DDL or watched)
    transactions: int = 1

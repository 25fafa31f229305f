"""The reader service: capture from MySQL/MariaDB sources into per-source change logs.

``ReaderService(load_reader_config(path)).run()`` runs one :class:`ReaderTask` per source.
Modules: ``grouping`` (events -> committed transactions -> records, chunking; the Python
path), ``native`` (the compiled path the grouper drives), ``committed`` (what both report),
``tablemaps`` (table names and row counts of a TABLE_MAP shape), ``filters``,
``task`` (one source: resume, reconnect, failover, state), ``service`` (the process),
``source`` (probing servers, start by time, back-off), ``start`` (where a task starts:
first start, resume, failover), ``status`` (live and persisted status), ``serving`` (the
HTTP API over the tasks), ``heartbeat``, ``schema_link``.
"""

from headwater.reader.committed import Committed
from headwater.reader.filters import TableFilter
from headwater.reader.grouping import Grouper
from headwater.reader.service import ReaderService
from headwater.reader.task import ReaderTask, read_task_status

__all__ = ["Committed", "Grouper", "ReaderService", "ReaderTask", "TableFilter", "read_task_status"]

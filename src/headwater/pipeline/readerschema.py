"""Table definitions for sinks from the reader's HTTP API (``/v1/decoding``), for a
pipeline whose source is a ``server:`` (issue #16).

A sink needs the source's table definition in force at a change's position (to create
and evolve target tables, to type values). With a ``path:`` source it reads the task's
``schema.jsonl``; with a ``server:`` source no executor has that file (a copied one goes
stale at the next DDL), so :class:`ReaderSchema` asks the reader for it.

Never stale: a copy of the history fetched when the log's last acknowledged record was at
``E`` holds every DDL at or before ``E`` (the reader records a DDL in the history before
it acknowledges the record that carries it), so it answers for any position ``<= E``;
for a later position, the history is fetched again first. Each process (driver, Python
worker) keeps its latest copy. The object is small and picklable (server, task, the token
resolved on the driver and never in ``repr``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from headwater.position import Position

if TYPE_CHECKING:
    from headwater.schema.model import TableDef

__all__ = ["ReaderSchema"]

_LOCK = threading.Lock()
#: per process: (server, task) -> (history, position of the log's end when it was fetched)
_CACHE: dict[tuple[str, str], tuple[Any, Position | None]] = {}


@dataclass(frozen=True, slots=True)
class ReaderSchema:
    """The schema history of reader task ``task`` at ``server`` (module docstring)."""

    server: str
    task: str
    token: str | None = field(default=None, repr=False, compare=False)

    def table_at(self, database: str, table: str, position: Position) -> TableDef | None:
        history = self._history(position)
        if history is None:
            return None
        found: TableDef | None = history.table_at(database, table, position)
        return found

    def _history(self, position: Position) -> Any:
        key = (self.server, self.task)
        # Without the lock first: a row's lookup is a dict hit and one comparison (a
        # copy is replaced whole, never changed, so an unlocked read sees a whole one).
        cached = _CACHE.get(key)
        if cached is not None and cached[1] is not None and position <= cached[1]:
            return cached[0]
        with _LOCK:
            cached = _CACHE.get(key)
            if cached is not None and cached[1] is not None and position <= cached[1]:
                return cached[0]
            history, end = self._fetch()
            _CACHE[key] = (history, end)
            return history

    def _fetch(self) -> tuple[Any, Position | None]:
        from headwater.spark.logaccess import HttpLog
        from headwater.spark.offsets import parse_options

        options = parse_options({"server": self.server, "task": self.task})
        if self.token is not None:
            import dataclasses

            options = dataclasses.replace(options, token=self.token)
        log = HttpLog(options, decoding=False)
        try:
            _seq, end = log.end()  # first the end, then the history that covers it
            log.load_decoding()
            return log.schema, end
        finally:
            log.close()


def clear_cache() -> None:
    """Forget this process's copies (tests)."""
    with _LOCK:
        _CACHE.clear()

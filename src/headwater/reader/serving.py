"""The reader process's HTTP API: each :class:`ReaderTask` seen by ``headwater.server``.

:class:`LiveTaskHandle` is the :class:`~headwater.server.TaskHandle` of a task running in
this process. Everything is read from the task at request time, never copied:

* ``change_log()``: the task's own :class:`~headwater.store.ChangeLog` (the writer's; its
  readers see every acknowledged record at once and long-polls wake on appends). While
  the task has no open store (not opened yet, failed to open, or reopening after a broken
  chunked transaction) the directory is opened read-only, as another process would;
* the FORMAT_DESCRIPTION: the one the task's stream carries, else its ``fde.bin``;
* the schema: the task's :class:`~headwater.schema.history.SchemaHistory` (tables logged
  with MINIMAL metadata decode with their names, signedness and charsets);
* the status: :meth:`ReaderTask.status` (positions, GTID set, lag, counters).

:func:`start_server` binds the configured address and writes ``data_dir/server.json``
(``{"url", "pid"}``: the address actually bound, useful with port 0). The token is never
logged.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.binlog.codec import ColumnDef
from headwater.binlog.framing import FormatDescription
from headwater.binlog.tablemap import TableMap
from headwater.config import ReaderConfig
from headwater.position import Position
from headwater.server import ServerOptions, TaskHandle
from headwater.store import ChangeLog
from headwater.store._fs import atomic_write

if TYPE_CHECKING:
    from headwater.reader.task import ReaderTask
    from headwater.server.app import HeadwaterServer

__all__ = ["LiveTaskHandle", "TaskSchema", "start_server"]

log = logging.getLogger(__name__)

SERVER_FILE = "server.json"


class TaskSchema:
    """The task's schema history as a :class:`headwater.changes.SchemaLookup` (unknown,
    hence ``None``, until the task opened its history)."""

    def __init__(self, task: ReaderTask) -> None:
        self._task = task

    @property
    def path(self) -> Path:
        """The history's file: ``/v1/decoding`` serves it and fetch workers read it."""
        return self._task.dir / "schema.jsonl"

    def _history(self) -> Any:
        link = self._task.schema
        return None if link is None else link.history

    def columns_for(self, table_map: TableMap, position: Position) -> Sequence[ColumnDef] | None:
        history = self._history()
        return None if history is None else history.columns_for(table_map, position)

    def primary_key_for(
        self, database: str, table: str, position: Position
    ) -> tuple[str, ...] | None:
        history = self._history()
        return None if history is None else history.primary_key_for(database, table, position)


@dataclass
class LiveTaskHandle(TaskHandle):
    """A :class:`TaskHandle` reading a task of this process (see the module docstring)."""

    task: ReaderTask | None = None
    _fde_file: FormatDescription | None = field(default=None, init=False, repr=False)

    @classmethod
    def of(cls, task: ReaderTask) -> LiveTaskHandle:
        return cls(
            log=task.dir / "changes",
            schema=TaskSchema(task),
            status=task.status,
            source=task.name,
            task=task,
        )

    def change_log(self) -> ChangeLog:
        store = None if self.task is None else self.task.store
        if store is not None and not store.closed:
            return store
        task = self.task
        if (
            self._opened is None
            and task is not None
            and not (task.dir / "changes" / "head").exists()
        ):
            # The task has not created its log yet (it is connecting to its source for the
            # first time): a 503 the clients retry (Retry-After), not a store error.
            from headwater.server.requests import RequestError

            raise RequestError(503, f"task {task.name!r} is starting: no change log yet")
        return super().change_log()

    def format_description(self) -> FormatDescription | None:
        assert self.task is not None
        live = self.task.format_description()
        if live is not None:
            return live
        if self._fde_file is None:
            try:
                data = (self.task.dir / "fde.bin").read_bytes()
            except FileNotFoundError:
                return None
            self._fde_file = FormatDescription.parse(data)
        return self._fde_file


def start_server(config: ReaderConfig, tasks: dict[str, ReaderTask]) -> HeadwaterServer | None:
    """Serve ``tasks`` as configured (``None`` without a ``server`` section)."""
    from headwater.server.app import HeadwaterServer
    from headwater.server.console import Console

    sc = config.server
    if sc is None:
        return None
    options = ServerOptions(
        host=sc.host,
        port=sc.port,
        token=sc.token,
        max_rows=sc.max_rows,
        default_rows=min(1000, sc.max_rows),
        max_bytes=sc.max_bytes,
        default_bytes=min(1 << 20, sc.max_bytes),
        max_wait_s=sc.max_wait_s,
        max_connections=sc.max_connections,
        idle_timeout_s=sc.idle_timeout_s,
        header_timeout_s=sc.header_timeout_s,
        backlog=sc.backlog,
        fetch_workers=sc.fetch_workers,
    )
    if sc.token is None and not _loopback(sc.host):
        log.warning(
            "the HTTP API listens on %s without a token: anyone who can reach it reads every "
            "change; set server.token_file or server.token_env",
            sc.host,
        )
    handles = {name: LiveTaskHandle.of(task) for name, task in tasks.items()}
    console = Console(
        handles,
        sample_s=config.console.sample_interval,
        refresh_s=config.console.refresh_interval,
    )
    for status_file in config.console.status_files():
        console.watch_status_file(status_file)
    server = HeadwaterServer(handles, options, console).start()
    config.data_dir.mkdir(parents=True, exist_ok=True)
    info = {"url": server.url, "pid": os.getpid(), "auth": sc.token is not None}
    atomic_write(str(config.data_dir / SERVER_FILE), json.dumps(info).encode())
    log.info("HTTP API on %s (%s)", server.url, "bearer token" if sc.token else "no auth")
    return server


def _loopback(host: str) -> bool:
    """Whether ``host`` is only reachable from this machine (``0.0.0.0``, ``::`` and
    names other than ``localhost`` are not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def close_handles(server: HeadwaterServer) -> None:
    """Close the server and the read-only logs its handles opened."""
    server.close()
    for handle in server.tasks.values():
        handle.close()

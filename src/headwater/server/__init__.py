"""The HTTP API: ``/v1/info``, ``/v1/subscribe``, ``/v1/fetch``, ``/metrics``, ``/healthz``.

The server reads change logs; it never writes them, and it keeps no subscription state:
a checkpoint token carries the subscription and the next store seq (``requests.py``), so
a restarted server resumes every consumer. The wire formats are in ``encoding.py``,
``headwater.proto`` and docs/formats.md ("HTTP API").

The reader service plugs in through a registry ``{task_name: TaskHandle}`` (any mapping;
it is read on every request, so tasks may be added or removed while serving)::

    from headwater.server import HeadwaterServer, ServerOptions, TaskHandle
    tasks = {"orders": TaskHandle(log="/var/lib/headwater/orders/log",
                                  fde=task.format_description,   # callable or value
                                  schema=task.schema_history,     # SchemaLookup or None
                                  status=task.status)}            # callable or dict
    server = HeadwaterServer(tasks, ServerOptions(port=8080, token=...)).start()
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from headwater.binlog.framing import FormatDescription
from headwater.changes import SchemaLookup
from headwater.store import ChangeLog

if TYPE_CHECKING:
    from headwater.server.app import HeadwaterServer

__all__ = ["STATUS_KEYS", "HeadwaterServer", "ServerOptions", "TaskHandle"]

#: The keys of a task's status dict that the server reads (all optional; the whole dict is
#: also shown as is in ``/v1/info``): counters since the task started, and its lag.
STATUS_KEYS = {
    "events_in": "binlog events received (counter)",
    "bytes_in": "binlog bytes received (counter)",
    "transactions_stored": "transactions appended to the change log (counter)",
    "lag_seconds": "now minus the commit time of the last event read (gauge; alias lag_s)",
    "gtid_set": "GTID set stored so far (text, either flavour)",
    "state": "task state, e.g. running / stopped / failed (text)",
}


@dataclass
class TaskHandle:
    """What the server needs of one reader task.

    ``log``: the task's :class:`ChangeLog`, or its directory (the server then opens it
    read-only on first use, as a reader in another process would, and closes it on
    :meth:`close`). ``fde``: the source's FormatDescription, or a callable returning it
    (the reader persists it; it may be None until the first event was read).
    ``schema``: the task's schema history, for tables logged with MINIMAL metadata.
    ``status``: a dict, or a callable returning one (``ReaderService.status()`` for this
    task; keys in :data:`STATUS_KEYS`). ``source``: the source name in change rows
    (default: the task name).
    """

    log: ChangeLog | str | os.PathLike[str]
    fde: FormatDescription | Callable[[], FormatDescription | None] | None = None
    schema: SchemaLookup | None = None
    status: Mapping[str, Any] | Callable[[], Mapping[str, Any]] = field(default_factory=dict)
    source: str | None = None
    _opened: ChangeLog | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def change_log(self) -> ChangeLog:
        if isinstance(self.log, ChangeLog):
            return self.log
        with self._lock:
            if self._opened is None:
                self._opened = ChangeLog.open(os.fspath(self.log), read_only=True)
            return self._opened

    def format_description(self) -> FormatDescription | None:
        return self.fde() if callable(self.fde) else self.fde

    def status_dict(self) -> dict[str, Any]:
        """The status; ``lag_seconds`` filled from ``lag_s`` (the reader task's name)."""
        status = dict(self.status() if callable(self.status) else self.status)
        if status.get("lag_seconds") is None and status.get("lag_s") is not None:
            status["lag_seconds"] = status["lag_s"]
        return status

    def close(self) -> None:
        """Close the log if this handle opened it (a given ChangeLog stays open)."""
        with self._lock:
            if self._opened is not None:
                self._opened.close()
                self._opened = None


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """The server's one options object. Sizes in bytes, times in seconds.

    ``token``: when set, every endpoint but ``/healthz`` needs ``Authorization: Bearer
    <token>``. ``default_rows``/``default_bytes``: a fetch's limits when the request
    gives none; ``max_rows``/``max_bytes``: the most a request may ask for.
    ``max_wait_s``: the longest long-poll. ``max_scan_bytes``: a fetch returns (with an
    advanced checkpoint) after reading this much of the log, even if filters kept nothing,
    so one request never scans an unbounded stretch. ``max_body_bytes``: request bodies.

    What keeps clients from hurting the process: at most ``max_connections`` open
    connections (one more closes the longest-idle one, or when all are in requests is
    answered 503 and closed at once, its file descriptor freed),
    a connection idle between requests for ``idle_timeout_s`` is closed, a client gets
    ``header_timeout_s`` in all to send a request's headers and body once its request
    line is in (not per read: a slow drip cannot hold a slot), ``backlog`` is the listen
    queue. ``fetch_workers`` processes do the decoding and encoding of fetches (0: threads
    of this process, one fetch at a time), so they cannot take this process's CPU.
    """

    host: str = "127.0.0.1"
    port: int = 0
    token: str | None = field(default=None, repr=False)
    default_rows: int = 1000
    default_bytes: int = 1 << 20
    max_rows: int = 100_000
    max_bytes: int = 64 << 20
    max_wait_s: float = 60.0
    max_scan_bytes: int = 64 << 20
    max_body_bytes: int = 1 << 20
    max_connections: int = 64
    idle_timeout_s: float = 30.0
    header_timeout_s: float = 10.0
    backlog: int = 128
    fetch_workers: int = 2

    def __post_init__(self) -> None:
        if not 0 < self.default_rows <= self.max_rows:
            raise ValueError("ServerOptions: need 0 < default_rows <= max_rows")
        if not 0 < self.default_bytes <= self.max_bytes:
            raise ValueError("ServerOptions: need 0 < default_bytes <= max_bytes")
        if self.max_wait_s < 0 or self.max_scan_bytes <= 0 or self.max_body_bytes <= 0:
            raise ValueError("ServerOptions: max_wait_s >= 0, max_scan/body_bytes > 0")
        if self.max_connections < 1 or self.backlog < 1 or self.fetch_workers < 0:
            raise ValueError("ServerOptions: max_connections, backlog >= 1, fetch_workers >= 0")
        if self.idle_timeout_s <= 0 or self.header_timeout_s <= 0:
            raise ValueError("ServerOptions: idle_timeout_s and header_timeout_s must be > 0")
        if self.token is not None and not self.token:
            raise ValueError("ServerOptions.token must not be empty (use None for no auth)")


def __getattr__(name: str) -> Any:
    if name == "HeadwaterServer":  # lazy: app imports this module for TaskHandle
        from headwater.server.app import HeadwaterServer

        return HeadwaterServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

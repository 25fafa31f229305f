"""The change log as the Spark source reads it: a reader task directory, or the HTTP API.

Both give the same four things: resolve a start point to a store seq, the log's end (the
seq after the last acknowledged record), the records of a seq range in order, and what
decoding needs (the source's FORMAT_DESCRIPTION and the schema history).

* :class:`LocalLog` opens ``TASK_DIR/changes`` read-only (as a reader in another process),
  ``fde.bin`` and ``schema.jsonl``. The history is loaded from a private copy:
  ``SchemaHistory.open`` opens its file for appending and truncates a torn last line, which
  must never happen to the file a running reader is writing.
* :class:`HttpLog` talks to ``/v1/subscribe`` and ``/v1/fetch`` with the ``raw`` format
  (store records with their binlog payload; the server filters whole records by the
  ``tables`` option and always sends DDL), and reads the source's FORMAT_DESCRIPTION and
  schema history from ``/v1/decoding``, so records decode exactly as from the task
  directory (MINIMAL metadata included). It reads from one reader of a list (or of the
  readers ZooKeeper lists for the task) and moves to the next when one refuses, breaks
  or stays silent: seqs, positions and checkpoints mean the same on every member of a
  reader cluster, so a batch in flight when its reader dies goes on at another member
  (which may first have to catch up to the batch's end: the fetch waits for it).

Neither holds a whole transaction: records are chunks, read one at a time.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from headwater.binlog.framing import FormatDescription
from headwater.changes import SchemaLookup
from headwater.errors import ConfigError, HeadwaterError, StoreError
from headwater.httpapi import (
    Answer,
    ApiConnection,
    api_error,
    format_description_of,
    has_host,
    record_of,
    wait_started,
)
from headwater.position import Position
from headwater.spark.offsets import SourceOptions, parse_server, start_request
from headwater.store import LATEST, AtSeq, ChangeLog, Record, Start
from headwater.store.record import RecordHead

if TYPE_CHECKING:
    from headwater.schema.history import SchemaHistory

__all__ = ["HttpLog", "LocalLog", "LogAccess", "discover", "open_log"]

log = logging.getLogger(__name__)

#: Bytes of records one ``/v1/fetch`` may return (the first record is always sent whole).
FETCH_BYTES = 8 << 20
#: Records one ``/v1/fetch`` may return.
FETCH_RECORDS = 10_000
#: :meth:`HttpLog.wait_past`'s poll period when the server refuses long polls.
POLL_S = 0.02
#: How long a request goes round the task's readers while none answers (a failover
#: takes seconds), and how long a fetch waits for a member to reach a batch's end.
FAILOVER_WAIT_S = 30.0
#: How long the readers ZooKeeper lists for a task are reused in a process.
DISCOVERY_TTL_S = 10.0
_discovered: dict[tuple[str, str], tuple[float, list[str]]] = {}


def discover(hosts: str, task: str, *, fresh: bool = False) -> list[str]:
    """The URLs of the readers of ``task`` registered in ZooKeeper at ``hosts``
    (cached for ``DISCOVERY_TTL_S`` unless ``fresh``)."""
    from headwater.coordination.zk import connect, discover_readers

    key = (hosts, task)
    hit = _discovered.get(key)
    if hit is not None and not fresh and time.monotonic() - hit[0] < DISCOVERY_TTL_S:
        return hit[1]
    client = connect(hosts, timeout=10.0)
    try:
        urls = discover_readers(client, task)
    finally:
        client.stop()
        client.close()
    if not urls:
        raise HeadwaterError(f"no reader of task {task} is registered in ZooKeeper at {hosts}")
    _discovered[key] = (time.monotonic(), urls)
    return urls


class LogAccess(Protocol):
    """What the source needs of a change log (see the module docstring)."""

    fde: FormatDescription | None
    schema: SchemaLookup | None

    def resolve(self, start: Start) -> int:
        """The seq of the first record at or after ``start`` (raises
        :class:`PositionNotRetainedError` when retention removed it)."""

    def end(self) -> tuple[int, Position | None]:
        """The seq after the last acknowledged record, and that record's position."""

    def records(self, first: int, end: int) -> Iterator[Record]:
        """Records with ``first <= seq < end`` in order (the HTTP API leaves out records
        whose table list the ``tables`` option rejects)."""

    def heads(self, first: int, end: int) -> Iterator[RecordHead]:
        """The :class:`RecordHead` s of :meth:`records` (header fields and payload size,
        CRC-checked, no payload built): what planning a batch reads."""

    def wait_past(self, end: int, timeout: float) -> None:
        """Wait up to ``timeout`` s for a record at seq ``end`` or later (may return
        earlier, also without one)."""

    def close(self) -> None: ...


def open_log(options: SourceOptions, *, decoding: bool = True) -> LocalLog | HttpLog:
    """The log the options name; ``decoding`` also loads the FDE and schema history."""
    if options.path is not None:
        return LocalLog(options, decoding=decoding)
    return HttpLog(options, decoding=decoding)


def load_history(path: Path) -> SchemaHistory | None:
    """The schema history at ``path`` (None if missing), opened read-only: the reader may
    be appending to it."""
    from headwater.schema.history import SchemaHistory

    if not path.exists():
        return None
    return SchemaHistory.open(path, read_only=True)


class LocalLog:
    """A reader task directory (``changes/``, ``fde.bin``, ``schema.jsonl``)."""

    def __init__(self, options: SourceOptions, *, decoding: bool = True) -> None:
        assert options.path is not None
        base = Path(options.path)
        changes = base / "changes"
        if not changes.is_dir():
            raise ConfigError(f"{base} is not a reader task directory (no changes/)", field="path")
        self.fde: FormatDescription | None = None
        self.schema: SchemaLookup | None = None
        if decoding:
            fde_path = base / "fde.bin"
            if fde_path.exists():
                self.fde = FormatDescription.parse(fde_path.read_bytes(), source=str(fde_path))
            self.schema = load_history(base / "schema.jsonl")
        self._log = ChangeLog.open(str(changes), read_only=True)
        self._end: tuple[int, tuple[int, Position | None]] | None = None  # by acked seq

    def resolve(self, start: Start) -> int:
        with self._log.reader(start) as reader:
            return reader.next_seq

    def end(self) -> tuple[int, Position | None]:
        # An idle stream asks several times a second: the head file says whether the log
        # moved (~2 us), latest() reads its last record (~0.3 ms).
        self._log.read_side.refresh()
        acked = self._log.acked_seq
        if self._end is None or self._end[0] != acked:
            last = self._log.latest()
            end = (self.resolve(LATEST), None) if last is None else (last.seq + 1, last.position)
            self._end = (acked, end)
        return self._end[1]

    def wait_past(self, end: int, timeout: float) -> None:
        """Wait up to ``timeout`` s for a record at seq ``end`` or later to be acknowledged:
        the store's inotify watch of the head file (no polling)."""
        self._log.read_side.wait_for(end, timeout)

    def records(self, first: int, end: int) -> Iterator[Record]:
        with self._log.reader(AtSeq(first)) as reader:
            for seq in range(first, end):
                rec = reader.next(0)
                if rec is None:
                    raise StoreError(f"{self._log.directory}: record {seq} is not readable")
                yield rec

    def heads(self, first: int, end: int) -> Iterator[RecordHead]:
        seq = first
        if first < end:
            with self._log.reader(AtSeq(first)) as reader:
                for head in reader.heads():
                    if head.seq >= end:
                        break
                    seq = head.seq + 1
                    yield head
        if seq < end:
            raise StoreError(f"{self._log.directory}: record {seq} is not readable")

    def close(self) -> None:
        self._log.close()


class HttpLog:
    """A reader task served by ``headwater.server`` (raw records over HTTP/1.1 keep-alive)."""

    def __init__(
        self, options: SourceOptions, *, decoding: bool = True, timeout: float = 120.0
    ) -> None:
        assert options.server is not None
        self.fde: FormatDescription | None = None
        self.schema: SchemaLookup | None = None
        self._options = options
        self._timeout = timeout
        urls, self._zookeeper = parse_server(options.server)
        for u in urls:
            if not has_host(u):
                raise ConfigError(f"no host in {u!r}", field="server")
        self._urls = list(urls) or discover(self._zookeeper or "", options.task)
        self._index = 0
        self._conn: ApiConnection | None = None
        self._long_poll = True  # wait_past: False once the server refused a long poll
        if decoding:
            self.load_decoding()

    def load_decoding(self) -> None:
        """The source's FORMAT_DESCRIPTION and schema history, from ``/v1/decoding``, so
        that records decode here exactly as in the reader (MINIMAL metadata included)."""
        from headwater.schema.history import SchemaHistory

        answer = self._call("POST", "/v1/decoding", {"task": self._options.task})
        self.fde = format_description_of(answer)
        history = answer.get("schema_history")
        if history is not None:
            mariadb = self.fde.is_mariadb if self.fde is not None else True
            self.schema = SchemaHistory.loads(
                base64.b64decode(history),
                mariadb=mariadb,
                name=f"{self._options.server} task {self._options.task} schema history",
            )

    @property
    def url(self) -> str:
        """The reader this log reads from now."""
        return self._urls[self._index]

    def _connection(self) -> ApiConnection:
        if self._conn is None:
            self._conn = ApiConnection(self.url, token=self._options.token, timeout=self._timeout)
        return self._conn

    def _exchange(self, method: str, path: str, body: Any) -> Answer:
        """One request (they are all reads). A keep-alive connection the server closed is
        retried once; a reader that refuses, breaks or stays silent gives way to the next
        one, round the list (discovered again from ZooKeeper after each round) for up to
        ``FAILOVER_WAIT_S``."""
        deadline = time.monotonic() + FAILOVER_WAIT_S
        stale_retried = False
        failures = 0
        while True:
            try:
                return self._connection().send(method, path, body)
            except (OSError, http.client.HTTPException) as e:
                self._conn = None  # closed by send
                stale = isinstance(e, http.client.RemoteDisconnected | BrokenPipeError)
                if stale and not stale_retried:
                    stale_retried = True  # the server closed an idle keep-alive connection
                    continue
                failures += 1
                log.info("reader %s: %r; trying the next of %d", self.url, e, len(self._urls))
                if failures % len(self._urls) == 0:
                    if time.monotonic() > deadline:
                        where = ", ".join(self._urls)
                        raise HeadwaterError(
                            f"no reader of task {self._options.task} answered {path} "
                            f"({where}): {e!r}"
                        ) from None
                    time.sleep(0.1)
                    if self._zookeeper is not None:
                        with contextlib.suppress(HeadwaterError):
                            self._urls = discover(self._zookeeper, self._options.task, fresh=True)
                self._index = (self._index + 1) % len(self._urls)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        answer = wait_started(lambda: self._exchange(method, path, body))
        if answer.status == 200:
            return answer.json()
        raise api_error(answer, f"{self.url}{path}", bad_request_is_config=False)

    def _subscribe(self, start: Start) -> Any:
        body: dict[str, Any] = {
            "task": self._options.task,
            "start": start_request(start),
            "format": "raw",
        }
        if self._options.tables.patterns is not None:
            body["tables"] = list(self._options.tables.patterns)
        return self._call("POST", "/v1/subscribe", body)

    def resolve(self, start: Start) -> int:
        return int(self._subscribe(start)["next"]["seq"])

    def end(self) -> tuple[int, Position | None]:
        answer = self._subscribe(LATEST)
        latest = answer.get("latest")
        pos = None if latest is None else _position(latest["position"])
        return int(answer["next"]["seq"]), pos

    def wait_past(self, end: int, timeout: float) -> None:
        """Wait up to ``timeout`` s for a record at seq ``end`` or later that the ``tables``
        option keeps: one long-poll ``/v1/fetch`` from ``end`` (the server wakes it when
        its writer acknowledges a record; no polling), which may return earlier (its
        ``max_wait``, a filtered stretch scanned). An idle stream used to ask
        ``/v1/subscribe`` every 20 ms, 200 requests per 4 s wait. A server whose
        ``max_wait`` refuses the wait (400) is asked again every ``POLL_S`` instead."""
        if self._long_poll:
            checkpoint = self._subscribe(AtSeq(end))["checkpoint"]
            request = {
                "checkpoint": checkpoint,
                "max_rows": 1,
                "max_bytes": FETCH_BYTES,
                "timeout_ms": max(1, int(timeout * 1000)),
            }
            answer = wait_started(lambda: self._exchange("POST", "/v1/fetch", request))
            if answer.status == 200:
                return
            if answer.status != 400:
                raise api_error(answer, f"{self.url}/v1/fetch", bad_request_is_config=False)
            log.info("%s refuses a %.1f s long poll (its max_wait): polling every %.2f s",
                     self.url, timeout, POLL_S)  # fmt: skip
            self._long_poll = False
        time.sleep(min(timeout, POLL_S))

    def earliest(self) -> int | None:
        """The seq of the log's first retained record (None: the log is empty)."""
        first = self._subscribe(LATEST).get("earliest")
        return None if first is None else int(first["seq"])

    def task_status(self) -> dict[str, Any]:
        """The task's status as ``/v1/info`` serves it (``docs/configuration.md``,
        "Reader status"; ``saved_position`` is what snapshots wait on)."""
        tasks = self._call("GET", "/v1/info").get("tasks") or {}
        found = tasks.get(self._options.task)
        if found is None:
            raise ConfigError(
                f"{self.url}/v1/info: no task named {self._options.task!r}",
                field="task",
            )
        status = found.get("status")
        return dict(status) if isinstance(status, dict) else {}

    def records(self, first: int, end: int) -> Iterator[Record]:
        checkpoint = self._subscribe(AtSeq(first))["checkpoint"]
        seq = first
        waiting_since: float | None = None
        while seq < end:
            request = {
                "checkpoint": checkpoint,
                "max_rows": min(end - seq, FETCH_RECORDS),
                "max_bytes": FETCH_BYTES,
                # a member that has not reached ``end`` yet (a follower, or a new leader
                # re-reading after a failover) is waited for with long polls
                "timeout_ms": 0 if waiting_since is None else 500,
            }
            answer = self._call("POST", "/v1/fetch", request)
            for doc in answer["records"]:
                if doc["seq"] >= end:
                    return
                yield record_of(doc)
            nxt = int(answer["next"]["seq"])
            if nxt <= seq and not answer["records"]:
                now = time.monotonic()
                waiting_since = now if waiting_since is None else waiting_since
                if now - waiting_since > FAILOVER_WAIT_S:
                    raise StoreError(f"{self.url}: no records from seq {seq} (end {end})")
                continue
            waiting_since = None
            seq, checkpoint = nxt, answer["checkpoint"]

    def heads(self, first: int, end: int) -> Iterator[RecordHead]:
        # (the raw format sends whole records: no fetch of headers alone)
        return map(RecordHead.of, self.records(first, end))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _position(doc: Any) -> Position:
    return Position(doc["change_id"], doc["file"], doc["offset"], doc.get("event", 0))

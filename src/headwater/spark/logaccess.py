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
  directory (MINIMAL metadata included).

Neither holds a whole transaction: records are chunks, read one at a time.
"""

from __future__ import annotations

import base64
import http.client
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from headwater.binlog.framing import FormatDescription
from headwater.changes import SchemaLookup
from headwater.errors import ConfigError, HeadwaterError, PositionNotRetainedError, StoreError
from headwater.position import Position
from headwater.spark.offsets import SourceOptions, start_request
from headwater.store import LATEST, AtSeq, ChangeLog, Record, Start

if TYPE_CHECKING:
    from headwater.schema.history import SchemaHistory

__all__ = ["HttpLog", "LocalLog", "LogAccess", "open_log"]

#: Bytes of records one ``/v1/fetch`` may return (the first record is always sent whole).
FETCH_BYTES = 8 << 20
#: Records one ``/v1/fetch`` may return.
FETCH_RECORDS = 10_000
# How long a request waits for a task that is starting (503 with Retry-After).
STARTING_WAIT_S = 30.0


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

    def resolve(self, start: Start) -> int:
        with self._log.reader(start) as reader:
            return reader.next_seq

    def end(self) -> tuple[int, Position | None]:
        last = self._log.latest()
        if last is None:
            return self.resolve(LATEST), None
        return last.seq + 1, last.position

    def records(self, first: int, end: int) -> Iterator[Record]:
        with self._log.reader(AtSeq(first)) as reader:
            for seq in range(first, end):
                rec = reader.next(0)
                if rec is None:
                    raise StoreError(f"{self._log.directory}: record {seq} is not readable")
                yield rec

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
        url = urllib.parse.urlsplit(options.server)
        if not url.hostname:
            raise ConfigError(f"no host in {options.server!r}", field="server")
        self._prefix = url.path.rstrip("/")
        cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        self._conn = cls(url.hostname, url.port, timeout=timeout)
        if decoding:
            self.load_decoding()

    def load_decoding(self) -> None:
        """The source's FORMAT_DESCRIPTION and schema history, from ``/v1/decoding``, so
        that records decode here exactly as in the reader (MINIMAL metadata included)."""
        from headwater.schema.history import SchemaHistory

        answer = self._call("POST", "/v1/decoding", {"task": self._options.task})
        fd = answer.get("format_description")
        if fd is not None:
            self.fde = FormatDescription(
                int(fd["binlog_version"]),
                str(fd["server_version"]),
                int(fd["created"]),
                int(fd["header_len"]),
                base64.b64decode(fd["post_header_len"]),
                int(fd["checksum_alg"]),
            )
        history = answer.get("schema_history")
        if history is not None:
            mariadb = self.fde.is_mariadb if self.fde is not None else True
            self.schema = SchemaHistory.loads(
                base64.b64decode(history),
                mariadb=mariadb,
                name=f"{self._options.server} task {self._options.task} schema history",
            )

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        if self._options.token is not None:
            headers["Authorization"] = f"Bearer {self._options.token}"
        deadline = time.monotonic() + STARTING_WAIT_S
        while True:
            for attempt in (0, 1):
                try:
                    self._conn.request(method, self._prefix + path, body=data, headers=headers)
                    resp = self._conn.getresponse()
                    payload = resp.read()
                    break
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                    self._conn.close()  # a keep-alive connection the server closed: retry once
                    if attempt:
                        raise
            # 503 with Retry-After: the task is starting (no change log yet); wait a while.
            if resp.status != 503 or resp.getheader("Retry-After") is None:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if resp.status == 200:
            return orjson.loads(payload)
        try:
            reason = orjson.loads(payload).get("error", "")
        except (orjson.JSONDecodeError, AttributeError):
            reason = payload[:200].decode("utf-8", "replace")
        where = f"{self._options.server}{path}"
        if resp.status == 410:
            raise PositionNotRetainedError(f"{where}: {reason}")
        if resp.status == 404:
            raise ConfigError(f"{where}: {reason}", field="task")
        if resp.status == 401:
            raise ConfigError(f"{where}: {reason or 'unauthorized'}", field="token")
        raise HeadwaterError(f"{where}: HTTP {resp.status}: {reason}")

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
                f"{self._options.server}/v1/info: no task named {self._options.task!r}",
                field="task",
            )
        status = found.get("status")
        return dict(status) if isinstance(status, dict) else {}

    def records(self, first: int, end: int) -> Iterator[Record]:
        checkpoint = self._subscribe(AtSeq(first))["checkpoint"]
        seq = first
        while seq < end:
            request = {
                "checkpoint": checkpoint,
                "max_rows": min(end - seq, FETCH_RECORDS),
                "max_bytes": FETCH_BYTES,
                "timeout_ms": 0,
            }
            answer = self._call("POST", "/v1/fetch", request)
            for doc in answer["records"]:
                if doc["seq"] >= end:
                    return
                yield _record(doc)
            nxt = int(answer["next"]["seq"])
            if nxt <= seq and not answer["records"]:
                raise StoreError(f"{self._options.server}: no records from seq {seq} (end {end})")
            seq, checkpoint = nxt, answer["checkpoint"]

    def close(self) -> None:
        self._conn.close()


def _position(doc: Any) -> Position:
    return Position(doc["change_id"], doc["file"], doc["offset"], doc.get("event", 0))


def _record(doc: Any) -> Record:
    return Record(
        _position(doc["position"]),
        base64.b64decode(doc["payload"]["base64"]),
        ts_us=doc["ts_us"],
        gtid=doc["gtid"],
        tables=tuple((t["name"], t["rows"]) for t in doc["tables"]),
        schema_version=doc["schema_version"],
        flags=doc["flags"],
        chunk_no=doc["chunk_no"],
        seq=doc["seq"],
    )

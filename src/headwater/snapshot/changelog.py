"""The reader's change log as a snapshot reads it: a task directory, or the HTTP API.

A snapshot (the driver's planning and catch-up, and every chunk task on the executors)
needs six things of the reader task behind the pipeline's source, :class:`SnapshotLog`:

* table definitions from the schema history (``table_def``, ``version_at``);
* the change id of the log's last record (``change_id``);
* the seq of the first record at or after a binlog coordinate (``first_seq_at``);
* the row changes of given tables in a seq range, decoded (``changes``);
* the *processed* position: the larger of the last stored record's position and the
  position saved in the task's ``state.json`` (the start of the last transaction the
  reader processed, stored or filtered out, once the store acknowledged it), which can be
  past the last record when transactions were filtered (``processed``;
  :mod:`headwater.snapshot.watermarks`, "Caught up to high");
* the seq of the log's first retained record (``earliest_seq``, for ``when_needed``).

Two implementations: :class:`DirLog` opens the task directory read-only (``changes/``,
``fde.bin``, ``schema.jsonl``, ``state.json``), as a reader in another process; it works
where the directory is mounted. :class:`ServerLog` asks the reader's HTTP API
(:class:`headwater.spark.logaccess.HttpLog`: ``/v1/subscribe`` resolves positions,
``/v1/fetch`` gives raw records, ``/v1/decoding`` the FORMAT_DESCRIPTION and schema
history, ``/v1/info`` the task's status with ``saved_position``); it works anywhere the
API is reachable, so on a cluster's executors.

:class:`LogRef` names one of the two and is what travels: it is small, picklable and
part of every chunk task; its ``token`` (the API's, resolved on the driver from
``tokenEnv``/``tokenFile``) is carried inside it and is never in its ``repr`` or in
:meth:`LogRef.where`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from headwater.changes import ChangeRow, decode_record
from headwater.errors import ConfigError
from headwater.position import Position

if TYPE_CHECKING:
    from headwater.schema.model import TableDef
    from headwater.snapshot.watermarks import Coordinate
    from headwater.spark.offsets import SourceOptions
    from headwater.store import Record

__all__ = ["DirLog", "LogRef", "ServerLog", "SnapshotLog", "open_snapshot_log"]

#: A position after every schema change: table definitions as they are now.
LATEST_POSITION = Position(1 << 30, 1 << 30, 1 << 60, 0)


@dataclass(frozen=True, slots=True)
class LogRef:
    """Where a snapshot reads the change log: ``task_dir`` (a reader task directory) or
    ``server`` and ``task`` (the reader's HTTP API; ``token`` its bearer token)."""

    task_dir: str | None = None
    server: str | None = None
    task: str | None = None
    token: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if (self.task_dir is None) == (self.server is None):
            raise ConfigError("a snapshot reads a task directory or a server, exactly one")
        if self.server is not None and not self.task:
            raise ConfigError("is required with a server source", field="source.task")

    @classmethod
    def of(cls, options: SourceOptions) -> LogRef:
        """The log of the Spark source's parsed options (token included)."""
        if options.path is not None:
            return cls(task_dir=options.path)
        return cls(server=options.server, task=options.task, token=options.token)

    def where(self) -> str:
        """For messages: the directory, or the task and the server (never the token)."""
        if self.task_dir is not None:
            return self.task_dir
        return f"task {self.task} at {self.server}"

    def open(self) -> DirLog | ServerLog:
        return DirLog(self.task_dir) if self.task_dir is not None else ServerLog(self)


def open_snapshot_log(ref: LogRef | str | Path) -> DirLog | ServerLog:
    """``ref`` opened (a path is a task directory)."""
    return ref.open() if isinstance(ref, LogRef) else DirLog(ref)


class SnapshotLog(Protocol):
    """What a snapshot needs of a reader task (module docstring)."""

    ref: LogRef

    def table_def(
        self, database: str, table: str, at: Position | None = None
    ) -> TableDef | None: ...

    def version_at(self, position: Position) -> int: ...

    def change_id(self) -> int: ...

    def processed(self) -> tuple[int, int] | None: ...

    def first_seq_at(self, change_id: int, coord: Coordinate) -> int: ...

    def earliest_seq(self) -> int | None: ...

    def changes(
        self, first: int, last: int, tables: set[tuple[str, str]], source: str
    ) -> Iterator[ChangeRow]: ...

    def close(self) -> None: ...


class _Decoding:
    """Table definitions and record decoding from ``self.schema`` and ``self.fde``."""

    schema: Any
    fde: Any

    def table_def(self, database: str, table: str, at: Position | None = None) -> TableDef | None:
        if self.schema is None:
            return None
        found: TableDef | None = self.schema.table_at(database, table, at or LATEST_POSITION)
        return found

    def version_at(self, position: Position) -> int:
        version_at = getattr(self.schema, "version_at", None)
        return int(version_at(position)) if version_at is not None else 0

    def _decode(
        self, records: Iterator[Record], tables: set[tuple[str, str]], source: str
    ) -> Iterator[ChangeRow]:
        names = {f"{d}.{t}" for d, t in tables}

        def want(db: str, table: str) -> bool:
            return (db, table) in tables

        for rec in records:
            if not any(name in names for name, _ in rec.tables):
                continue
            for change in decode_record(
                rec, source=source, fde=self.fde, schema=self.schema, want=want
            ):
                if change.op != "ddl":
                    yield change


class DirLog(_Decoding):
    """A reader task directory opened read-only (module docstring)."""

    def __init__(self, task_dir: str | Path) -> None:
        from headwater.binlog.framing import FormatDescription
        from headwater.spark.logaccess import load_history
        from headwater.store import ChangeLog

        self.dir = Path(task_dir)
        self.ref = LogRef(task_dir=str(task_dir))
        fde = self.dir / "fde.bin"
        self.fde = (
            FormatDescription.parse(fde.read_bytes(), source=str(fde)) if fde.exists() else None
        )
        self.schema = load_history(self.dir / "schema.jsonl")
        self.log = ChangeLog.open(str(self.dir / "changes"), read_only=True)

    def change_id(self) -> int:
        latest = self.log.latest()
        return 0 if latest is None else int(latest.position.change_id)

    def processed(self) -> tuple[int, int] | None:
        from headwater.store import ReaderState

        best: tuple[int, int] | None = None
        state = ReaderState.load(str(self.dir / "state.json"))
        if state is not None and state.position is not None:
            best = (state.position.file_num, state.position.offset)
        latest = self.log.latest()
        if latest is not None:
            p = (latest.position.file_num, latest.position.offset)
            best = p if best is None or p > best else best
        return best

    def first_seq_at(self, change_id: int, coord: Coordinate) -> int:
        with self.log.reader(Position(change_id, coord.file_num, coord.offset, 0)) as r:
            return int(r.next_seq)

    def earliest_seq(self) -> int | None:
        first = self.log.earliest()
        return None if first is None else int(first.seq)

    def changes(
        self, first: int, last: int, tables: set[tuple[str, str]], source: str
    ) -> Iterator[ChangeRow]:
        """Row changes (no DDL) of ``tables`` in records ``first .. last`` (inclusive)."""
        if last < first:
            return
        yield from self._decode(self._records(first, last), tables, source)

    def _records(self, first: int, last: int) -> Iterator[Record]:
        from headwater.store import AtSeq

        with self.log.reader(AtSeq(first)) as reader:
            for _ in range(first, last + 1):
                rec = reader.next(0)
                if rec is None:
                    break
                yield rec

    def close(self) -> None:
        self.log.close()


class ServerLog(_Decoding):
    """A reader task behind the HTTP API (module docstring).

    The schema history is fetched when the log is opened, after reading the log's end
    ``E`` (the reader records a DDL in its history before it acknowledges the record that
    carries it, so that copy holds every DDL of records before ``E``), and again before
    decoding records at or past ``E``: a DDL in a chunk's window is never missed."""

    def __init__(self, ref: LogRef) -> None:
        from headwater.spark.logaccess import HttpLog
        from headwater.spark.offsets import SourceOptions

        assert ref.server is not None and ref.task is not None
        self.ref = ref
        options = SourceOptions(task=ref.task, server=ref.server, token=ref.token)
        self.http = HttpLog(options, decoding=False)
        self.fde: Any = None
        self.schema: Any = None
        self._covered = 0  # records with a seq below this decode with self.schema
        self._latest: Position | None = None
        self._load_decoding()

    def _load_decoding(self) -> None:
        self._covered, self._latest = self.http.end()
        self.http.load_decoding()
        self.fde, self.schema = self.http.fde, self.http.schema

    def change_id(self) -> int:
        _, latest = self.http.end()
        return 0 if latest is None else int(latest.change_id)

    def processed(self) -> tuple[int, int] | None:
        _, latest = self.http.end()
        saved = self.http.task_status().get("saved_position")
        best = None if latest is None else (latest.file_num, latest.offset)
        if isinstance(saved, str) and saved:
            p = Position.parse(saved)
            if best is None or (p.file_num, p.offset) > best:
                best = (p.file_num, p.offset)
        return best

    def first_seq_at(self, change_id: int, coord: Coordinate) -> int:
        return self.http.resolve(Position(change_id, coord.file_num, coord.offset, 0))

    def earliest_seq(self) -> int | None:
        return self.http.earliest()

    def changes(
        self, first: int, last: int, tables: set[tuple[str, str]], source: str
    ) -> Iterator[ChangeRow]:
        """Row changes (no DDL) of ``tables`` in records ``first .. last`` (inclusive)."""
        if last < first:
            return
        if last >= self._covered:
            self._load_decoding()
        yield from self._decode(self.http.records(first, last + 1), tables, source)

    def close(self) -> None:
        self.http.close()

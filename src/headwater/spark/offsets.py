"""Options and offsets of the ``headwater`` Spark source (pure: no Spark, no I/O).

Options arrive as strings (Spark's contract); :func:`parse_options` turns them into one
frozen :class:`SourceOptions` or raises :class:`~headwater.errors.ConfigError` whose
``field`` is the option's name. Option names are case-insensitive, as Spark's are.

An offset is a place in the change log: the next change to deliver is change ``row``
(0-based, among ``decode_record(record, want=tables)``) of store record ``seq``; the same
``(seq, row)`` pair as the HTTP API's checkpoint, so a change row's ``sequence`` is
``seq << 24 | row``. As a Spark offset it is the JSON dict::

    {"seq": 43, "row": 0, "last_position": "0:3:1234:0"}

``last_position`` (the :class:`~headwater.position.Position` text of the last record read
before the offset) is for people reading a checkpoint; only ``seq`` and ``row`` count.
Offsets compare by ``(seq, row)``. Invariant: an offset never points beyond the log's
acknowledged end, so every offset Spark journals is reproducible from the log while the
log retains it.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from headwater.changes.schema import CHANGE_COLUMNS
from headwater.changes.sequence import ROW_LIMIT
from headwater.errors import ConfigError
from headwater.position import BinlogCoordinate, Position, binlog_file_number, parse_gtid_set
from headwater.store import EARLIEST, LATEST, AtSeq, AtTime, Start

__all__ = [
    "DEFAULT_BURST_CATCH_UP_MS",
    "DEFAULT_BURST_QUIET_MS",
    "DEFAULT_BURST_WAIT_MS",
    "DEFAULT_DIRECT_MAX_ROWS",
    "DEFAULT_IDLE_ADVANCE_MS",
    "DEFAULT_MIN_PARTITION_BYTES",
    "DEFAULT_PARTITIONS",
    "LogOffset",
    "SourceOptions",
    "TableMatcher",
    "parse_options",
    "parse_server",
    "parse_start",
    "start_request",
]

#: Input partitions per micro-batch (or batch read) when the ``partitions`` option is unset.
DEFAULT_PARTITIONS = 4
#: The least payload a slice is cut for (``minBytesPerPartition``): 1 MiB of records is
#: about 10,000 change rows, ~30 ms of decoding, less than the ~100 ms that a second input
#: partition costs a micro-batch (it makes the SQL sinks shuffle, a second Spark stage).
DEFAULT_MIN_PARTITION_BYTES = 1 << 20
#: ``burstWaitMs``: how long a micro-batch after an idle stream may wait for a burst of
#: new records to finish landing (see :class:`headwater.spark.source.BurstGate`).
DEFAULT_BURST_WAIT_MS = 200
#: ``burstQuietMs``: the burst has landed when the log has not grown for this long. The
#: reader's group commits pause its appends for a disk sync (10-30 ms measured here): with
#: 10 ms, four of seven catch-ups were still cut in two; with 50 ms, none of four.
DEFAULT_BURST_QUIET_MS = 50
#: ``burstCatchUpMs``: how long the burst of a catch-up (its newest record at the first
#: look committed CATCH_UP_LAG_S or more before now: a reader restarted or behind) may take
#: to land before its micro-batch is cut, instead of ``burstWaitMs``
#: (:class:`headwater.spark.source.BurstGate`). A restarted reader stored
#: bench/pipeline.py's 800,000 changes in 0.15-0.22 s, or in 0.30-0.62 s in 11 of 24 rounds,
#: which the 200 ms cap cut into two batches: 2.3-3.5 s rounds instead of about 1.6 s (the
#: second batch's updates and removes of the first one's keys are held-key writes, and each
#: batch pays its fixed cost).
DEFAULT_BURST_CATCH_UP_MS = 1000
#: ``idleAdvanceMs``: how long the stream's offset may stay before new records that the
#: ``tables`` option filters out (another table's changes, the reader's heartbeats) when
#: no wanted record follows them. Moving past them costs an empty micro-batch (~0.3 s of
#: CPU on two cores), so it is done lazily: with the next batch that has rows, or after
#: this long, so that a checkpoint never falls far behind the log's retention.
DEFAULT_IDLE_ADVANCE_MS = 60_000
#: ``driverApplyMaxRows``: a pipeline micro-batch of at most this many change rows is
#: applied in the driver without a Spark job (:mod:`headwater.pipeline.direct`). ``0``:
#: off. The Spark source itself does not read it. Below about 10,000 rows (1 MiB of
#: records, ``minBytesPerPartition``) Spark would apply the batch in one task too; above,
#: in two slices on two cores. Measured at load 12-16 on two cores (bench/latency.py,
#: 10,000 rows/s): the driver applied batches of 7,000-8,400 rows at about 10,000 rows/s,
#: Spark jobs batches of 11,000-24,000 rows at 3,000-7,000 rows/s, so that with the limit
#: at 10,000 the first batch over it fell behind and every later one grew; hence 25,000.
DEFAULT_DIRECT_MAX_ROWS = 25_000

_KNOWN = {
    "netapply",
    "server",
    "task",
    "path",
    "token",
    "tokenfile",
    "tokenenv",
    "tables",
    "ddl",
    "source",
    "startingposition",
    "endingposition",
    "maxrowspertrigger",
    "maxbytespertrigger",
    "partitions",
    "minbytesperpartition",
    "columns",
    "burstwaitms",
    "burstquietms",
    "burstcatchupms",
    "idleadvancems",
    "driverapplymaxrows",
}


@dataclass(frozen=True, slots=True)
class TableMatcher:
    """The ``tables`` option: ``db.table`` and ``db.*`` patterns (None: every table).

    Matching is exact and case-sensitive, as the server's filter is. A record without
    tables always passes :meth:`record_wanted`; its DDL statements are then filtered by
    :meth:`wants_ddl`, by the objects :func:`headwater.schema.ddlscope.ddl_scope` finds in
    them (never by matching the statement's text).
    """

    patterns: tuple[str, ...] | None = None

    def __call__(self, database: str, table: str) -> bool:
        if self.patterns is None:
            return True
        for pattern in self.patterns:
            db, _dot, tbl = pattern.partition(".")
            if db == database and (tbl in ("*", table)):
                return True
        return False

    def wants_ddl(self, sql: str, default_db: str) -> bool:
        """Whether a DDL statement reaches this reader: it is about data and touches a
        wanted table, or a wanted database as a whole (``db.*``: database DDL, routines,
        unparsed statements scoped by their default database) -- a pipeline of
        ``shop.x`` never gets ``DROP DATABASE otherdb`` nor ``CREATE USER``."""
        return _ddl_wanted(self, sql, default_db)

    def record_wanted(self, tables: tuple[tuple[str, int], ...]) -> bool:
        """Whether a store record (by its header's table list) may hold wanted changes."""
        if self.patterns is None or not tables:
            return True
        return any(self(*name.split(".", 1)) for name, _rows in tables if "." in name)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """What the source reads, parsed from the string options (see docs/formats.md).

    Exactly one of ``path`` (a reader task directory) or ``server`` is set; ``server`` is
    one reader's base URL, a comma list of the URLs of a task's readers (a reader
    cluster: any member serves the same seqs), or ``zookeeper://HOST:PORT[,...]`` (the
    task's readers as registered in that ZooKeeper ensemble); :func:`parse_server`;
    ``task`` names the reader task (for ``path`` the directory's name by default).
    ``ending`` is only for batch reads (exclusive: the first record at or after it is not
    read; None: the log's end when the read is planned). ``columns`` (the ``columns``
    option) are the change-row columns the source produces, in the change schema's order
    (None: all of them): a pipeline sets it to what its transforms and sinks read, so
    that the JVM does not convert, project and carry the others (``before`` above all)
    for every row only to drop them.
    """

    task: str
    path: str | None = None
    server: str | None = None
    #: the API token, resolved where the options are parsed (the driver) from ``tokenFile``
    #: or ``tokenEnv`` and carried inside the pickled reader and partitions, so that it
    #: is in no option string (plans, the UI, event logs) and no executor needs the file
    #: or the variable; never in ``repr``
    token: str | None = field(default=None, repr=False)
    tables: TableMatcher = TableMatcher()
    ddl: bool = True
    source: str = ""
    starting: Start = EARLIEST
    ending: Start | None = None
    max_rows: int | None = None
    max_bytes: int | None = None
    partitions: int = DEFAULT_PARTITIONS
    min_partition_bytes: int = DEFAULT_MIN_PARTITION_BYTES
    burst_wait_ms: int = DEFAULT_BURST_WAIT_MS
    burst_quiet_ms: int = DEFAULT_BURST_QUIET_MS
    burst_catch_up_ms: int = DEFAULT_BURST_CATCH_UP_MS
    idle_advance_ms: int = DEFAULT_IDLE_ADVANCE_MS
    direct_max_rows: int = DEFAULT_DIRECT_MAX_ROWS
    columns: tuple[str, ...] | None = None
    #: ``netApply``: a pipeline micro-batch over ``driverApplyMaxRows`` whose tables and
    #: transforms allow it applies each key's last write, read key-first
    #: (:mod:`headwater.pipeline.netapply`); false: never. The source itself ignores it.
    net_apply: bool = True

    @property
    def source_name(self) -> str:
        return self.source or self.task


def _not_negative(options: Mapping[str, str], name: str, default: int) -> int:
    text = options.get(name.lower())
    if text is None:
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ConfigError(f"expected an integer >= 0, got {text!r}", field=name) from None
    if value < 0:
        raise ConfigError(f"expected an integer >= 0, got {text!r}", field=name)
    return value


def _positive(options: Mapping[str, str], name: str) -> int | None:
    text = options.get(name.lower())
    if text is None:
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ConfigError(f"expected a positive integer, got {text!r}", field=name) from None
    if value <= 0:
        raise ConfigError(f"expected a positive integer, got {text!r}", field=name)
    return value


def _tables(text: str | None) -> TableMatcher:
    if text is None:
        return TableMatcher()
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise ConfigError("expected a comma list of 'db.table' or 'db.*'", field="tables")
    for name in names:
        db, dot, tbl = name.partition(".")
        if not dot or not db or not tbl or "." in tbl:
            raise ConfigError(f"expected 'db.table' or 'db.*', got {name!r}", field="tables")
    return TableMatcher(names)


def _columns(text: str | None) -> tuple[str, ...] | None:
    """The ``columns`` option: a comma list of change-row column names, kept in the change
    schema's order (the source's schema lists them so)."""
    if text is None:
        return None
    names = {part.strip() for part in text.split(",") if part.strip()}
    known = [name for name, _kind in CHANGE_COLUMNS]
    unknown = sorted(names - set(known))
    if unknown:
        raise ConfigError(
            f"unknown change column {unknown[0]!r} (known: {', '.join(known)})", field="columns"
        )
    if not names:
        raise ConfigError("expected a comma list of change-row columns", field="columns")
    return tuple(name for name in known if name in names)


def _timestamp_us(text: str, field: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"expected timestamp:<ISO 8601> or timestamp:<microseconds>, got {text!r}",
            field=field,
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    delta = when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _position_json(text: str, field: str) -> Position:
    try:
        doc = orjson.loads(text)
        if not isinstance(doc, dict):
            raise TypeError("not an object")
        extra = set(doc) - {"change_id", "file", "file_num", "offset", "event", "event_index"}
        if extra:
            raise TypeError(f"unknown keys {sorted(extra)}")
        values = (
            doc["change_id"],
            doc.get("file", doc.get("file_num")),
            doc["offset"],
            doc.get("event", doc.get("event_index", 0)),
        )
        ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
        if len(ints) != len(values):
            raise TypeError("change_id, file, offset and event must be integers >= 0")
        return Position(*ints)
    except (orjson.JSONDecodeError, KeyError, TypeError) as e:
        raise ConfigError(
            f'expected a position object {{"change_id", "file", "offset", "event"}}: {e}',
            field=field,
        ) from None


def parse_start(text: str, field: str = "startingPosition") -> Start:
    """A start (or end) point option as a store :data:`~headwater.store.Start`.

    ``earliest``; ``latest``; ``seq:<n>``; ``timestamp:<ISO 8601 or microseconds>`` (naive
    times are UTC); ``gtid:<set>`` (MySQL ``uuid:1-n,...`` or MariaDB
    ``domain-server-seq,...``: the first record whose GTID is not in it);
    ``position:<change_id:file:offset[:event]>`` or a Position JSON object; else
    ``<binlog file>:<offset>`` (``mysql-bin.000003:1234``: the first record at or after
    that coordinate, of change id 0, the first source server).
    """
    value = text.strip()
    low = value.lower()
    if low in (EARLIEST, LATEST):
        return EARLIEST if low == EARLIEST else LATEST
    kind, colon, rest = value.partition(":")
    kind = kind.lower()
    try:
        if colon and kind == "seq":
            seq = int(rest)
            if seq < 1:
                raise ValueError("seq starts at 1")
            return AtSeq(seq)
        if colon and kind == "timestamp":
            return AtTime(_timestamp_us(rest.strip(), field))
        if colon and kind == "gtid":
            return parse_gtid_set(rest)
        if colon and kind == "position":
            return Position.parse(rest.strip())
        if value.startswith("{"):
            return _position_json(value, field)
        if colon:
            coordinate = BinlogCoordinate.parse(value)
            return Position(0, binlog_file_number(coordinate.file), coordinate.offset, 0)
    except ValueError as e:
        raise ConfigError(f"{value!r}: {e}", field=field) from None
    raise ConfigError(
        f"unknown position {value!r} (earliest, latest, seq:N, timestamp:T, gtid:SET, "
        "position:C:F:O[:E], FILE:OFFSET or a position JSON object)",
        field=field,
    )


def start_request(start: Start) -> Any:
    """``start`` as the ``start`` field of the HTTP API's ``/v1/subscribe``."""
    if start in (EARLIEST, LATEST):
        return start
    if isinstance(start, AtSeq):
        return {"seq": start.seq}
    if isinstance(start, AtTime):
        return {"timestamp_us": start.ts_us}
    if isinstance(start, Position):
        return {"position": str(start)}
    return {"gtid_set": str(start)}


ZOOKEEPER_SCHEME = "zookeeper://"


def parse_server(text: str) -> tuple[tuple[str, ...], str | None]:
    """The ``server`` option as ``(reader URLs, None)`` or ``((), ZooKeeper hosts)``.

    ``http(s)://host:port[/prefix]`` or a comma list of them (a reader cluster), or
    ``zookeeper://zk1:2181,zk2:2181`` (discovery). Raises ConfigError (field ``server``)."""
    value = text.strip()
    if value.lower().startswith(ZOOKEEPER_SCHEME):
        hosts = value[len(ZOOKEEPER_SCHEME) :].rstrip("/")
        parts = [h.strip() for h in hosts.split(",")]
        if not hosts or not all(parts) or any("/" in h or " " in h for h in parts):
            raise ConfigError(
                f"expected zookeeper://host:port[,host:port...], got {text!r}", field="server"
            )
        return (), ",".join(parts)
    urls = tuple(u.strip().rstrip("/") for u in value.split(","))
    for url in urls:
        if not url.startswith(("http://", "https://")) or not url.split("//", 1)[1]:
            raise ConfigError(
                "expected an http:// or https:// URL, a comma list of them or "
                f"zookeeper://hosts, got {url or text!r}",
                field="server",
            )
    return urls, None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    low = str(text).strip().lower()
    if low not in ("true", "false"):
        raise ConfigError(f"expected true or false, got {text!r}", field=name)
    return low == "true"


def _token(opts: Mapping[str, str]) -> str | None:
    """The API token: ``tokenFile`` (first line) or ``tokenEnv`` (a variable's name), read
    now; ``token`` (inline: it shows in plans and the UI) is still accepted for direct
    API use. Errors name the option, never the value."""
    given = [k for k in ("token", "tokenfile", "tokenenv") if k in opts]
    if len(given) > 1:
        names = {"token": "token", "tokenfile": "tokenFile", "tokenenv": "tokenEnv"}
        raise ConfigError(
            f"give only one of {', '.join(names[k] for k in given)}", field=names[given[1]]
        )
    if "tokenfile" in opts:
        try:
            with open(opts["tokenfile"], encoding="utf-8") as f:
                token = f.readline().strip()
        except OSError as e:
            raise ConfigError(
                f"cannot read the token file: {e.strerror}", field="tokenFile"
            ) from None
        if not token:
            raise ConfigError("the token file is empty", field="tokenFile")
        return token
    if "tokenenv" in opts:
        value = os.environ.get(opts["tokenenv"], "").strip()
        if not value:
            raise ConfigError(
                f"environment variable {opts['tokenenv']} is not set or empty", field="tokenEnv"
            )
        return value
    return opts.get("token")


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Parse the source's options (keys case-insensitive; see the module docstring)."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    unknown = sorted(set(opts) - _KNOWN)
    if unknown:
        raise ConfigError(f"unknown option (known: {', '.join(sorted(_KNOWN))})", field=unknown[0])
    path = opts.get("path")
    server = opts.get("server")
    task = opts.get("task")
    if (path is None) == (server is None):
        raise ConfigError("give exactly one of 'path' (a task directory) or 'server'", field="path")
    if server is not None:
        urls, zookeeper = parse_server(server)
        if not task:
            raise ConfigError("is required with 'server'", field="task")
        server = ",".join(urls) if zookeeper is None else ZOOKEEPER_SCHEME + zookeeper
    else:
        assert path is not None
        if not path:
            raise ConfigError("is empty", field="path")
        task = task or os.path.basename(os.path.normpath(path))
    assert task is not None
    starting = parse_start(opts.get("startingposition", EARLIEST), "startingPosition")
    ending_text = opts.get("endingposition")
    ending = None
    if ending_text is not None and ending_text.strip().lower() != LATEST:
        ending = parse_start(ending_text, "endingPosition")
    return SourceOptions(
        task=task,
        path=path,
        server=server,
        token=_token(opts),
        tables=_tables(opts.get("tables")),
        ddl=_bool(opts, "ddl", True),
        source=opts.get("source", ""),
        starting=starting,
        ending=ending,
        max_rows=_positive(opts, "maxRowsPerTrigger"),
        max_bytes=_positive(opts, "maxBytesPerTrigger"),
        partitions=_positive(opts, "partitions") or DEFAULT_PARTITIONS,
        min_partition_bytes=_not_negative(
            opts, "minBytesPerPartition", DEFAULT_MIN_PARTITION_BYTES
        ),
        burst_wait_ms=_not_negative(opts, "burstWaitMs", DEFAULT_BURST_WAIT_MS),
        burst_quiet_ms=_positive(opts, "burstQuietMs") or DEFAULT_BURST_QUIET_MS,
        burst_catch_up_ms=_not_negative(opts, "burstCatchUpMs", DEFAULT_BURST_CATCH_UP_MS),
        idle_advance_ms=_not_negative(opts, "idleAdvanceMs", DEFAULT_IDLE_ADVANCE_MS),
        direct_max_rows=_not_negative(opts, "driverApplyMaxRows", DEFAULT_DIRECT_MAX_ROWS),
        columns=_columns(opts.get("columns")),
        net_apply=_bool(opts, "netApply", True),
    )


@dataclass(frozen=True, order=True, slots=True)
class LogOffset:
    """A Spark offset: the next change is change ``row`` of record ``seq`` (module docstring).

    Ordered by ``(seq, row)``; ``last_position`` does not take part in comparisons.
    """

    seq: int
    row: int = 0
    last_position: Position | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.seq < 1 or self.row < 0 or self.row >= ROW_LIMIT:
            raise ValueError(f"bad offset seq={self.seq} row={self.row}")

    def key(self) -> tuple[int, int]:
        return (self.seq, self.row)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seq": self.seq, "row": self.row}
        if self.last_position is not None:
            out["last_position"] = str(self.last_position)
        return out

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> LogOffset:
        """Parse an offset Spark journaled; a bad one raises ConfigError (field ``offset``)."""
        try:
            seq, row = doc["seq"], doc.get("row", 0)
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (seq, row)):
                raise TypeError("seq and row must be integers")
            text = doc.get("last_position")
            last = None if text is None else Position.parse(str(text))
            return cls(seq, row, last)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"not a headwater offset: {doc!r} ({e})", field="offset") from None


@functools.lru_cache(maxsize=1024)
def _ddl_wanted(matcher: TableMatcher, sql: str, default_db: str) -> bool:
    # Cached: a statement is classified once per process (sqlglot costs ~1 ms).
    from headwater.schema.ddlscope import ddl_scope

    scope = ddl_scope(sql, default_db)
    if not scope.about_data:
        return False
    if matcher.patterns is None:
        return True
    return any(matcher(db, "*" if table is None else table) for db, table in scope.objects)

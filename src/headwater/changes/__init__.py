"""Stored transactions and the change rows consumers see.

The reader stores each committed transaction as one store record (``headwater.store``)
whose payload is the transaction's binlog events, checksums verified and stripped
(DESIGN.md, decision 1). Payload format, repeated to the end::

    length  u32 LE   bytes of the event that follows
    event            19-byte common header + body, as the server logged it minus its
                     checksum (the header's event_size still counts the 4 checksum bytes
                     when the source used CRC32; the length prefix is the truth)

A chunk of a large transaction holds a run of its events and repeats, at its start, the
TABLE_MAP events its rows events need, so that every record decodes on its own. Its
``position.event_index`` plus an event's place in the payload is that event's index in
the transaction: for a chunk that repeats ``r`` TABLE_MAPs, the index of its first new
event minus ``r`` (the repeated maps take indexes of earlier events, and yield no rows).

:func:`decode_record` turns a record into :class:`ChangeRow` values: one per changed row,
and one per DDL statement. Decoding needs the source's FORMAT_DESCRIPTION (table id size,
post-header lengths, MariaDB or MySQL) and, for tables logged with MINIMAL metadata, the
column definitions in force at the record's position (a :class:`SchemaLookup`, in practice
``headwater.schema``'s history).

Speed: most records hold only TABLE_MAPs already seen, plain rows events and events no
change comes from; those decode by the plans of their rows events (:func:`_planned_blocks`:
names, key and row decoder derived once per table map, bitmaps and schema version), every
other record by parsing each event (:func:`_general_blocks`, the reference; a test holds
the two equal).

Order: ``ChangeRow.sequence`` is ``record.seq << 24 | n`` where ``n`` counts the record's
changes, so sequences order every change of a source (a record holds far fewer than 2**24
rows: records are bounded in bytes).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from headwater.binlog._frozen import maker
from headwater.binlog.codec import DECODE_ERRORS, ColumnDef, RowDecoder, row_decoder_for
from headwater.binlog.constants import EVENT_HEADER, EVENT_HEADER_SIZE, EventType
from headwater.binlog.events import DecodeContext, QueryEvent, RowsEvent, parse_event
from headwater.binlog.framing import FormatDescription, RawEvent, event_type_name
from headwater.binlog.rows import ROWS_EVENT_TYPES, _cached_layout, rows_event_table_id
from headwater.binlog.tablemap import TableMap
from headwater.changes.sequence import sequence_of
from headwater.errors import BinlogFormatError, TruncatedError
from headwater.position import Position

__all__ = [
    "ChangeBlock",
    "ChangeRow",
    "DdlFilter",
    "RawRows",
    "SchemaLookup",
    "TableFilter",
    "block_changes",
    "decode_blocks",
    "decode_record",
    "encode_events",
    "is_ddl",
    "iter_payload_events",
]

_LEN = struct.Struct("<I")
_unpack_header = EVENT_HEADER.unpack_from
_new_tuple = tuple.__new__

#: Statements in QUERY events that are transaction control, not DDL.
_NOT_DDL = re.compile(
    rb"\s*(?:/\*.*?\*/\s*)*(?:BEGIN|COMMIT|ROLLBACK|XA\s|SAVEPOINT|RELEASE\s+SAVEPOINT|"
    rb"START\s+TRANSACTION)\b",
    re.IGNORECASE | re.DOTALL,
)

#: Parsed TABLE_MAPs by body bytes, shared by the records decoded in this process (each
#: record has its own DecodeContext, and every record of a table repeats its TABLE_MAP):
#: one dict per (table id size, MariaDB), the two things a TABLE_MAP's parse depends on
#: besides its bytes. Bounded by events.py (emptied at TABLE_MAP_CACHE_SIZE entries); the
#: same TableMap object each time also lets the rows header and decoder caches hit.
_TABLE_MAPS: dict[tuple[int, bool], dict[bytes, TableMap]] = {}

#: Position(...) of an event of a record: the record's position (valid) plus an index
#: (non-negative), so its checks cannot fail; a frozen dataclass built at plain cost.
_event_position = maker(Position, trusted=True)

TableFilter = Callable[[str, str], bool]
#: ``(statement, default database) -> keep``: which DDL statements a reader of some
#: tables gets (built on ``headwater.schema.ddlscope`` by the callers).
DdlFilter = Callable[[str, str], bool]


class SchemaLookup(Protocol):
    """Column definitions and keys in force at a position (``headwater.schema``).

    A lookup that also has ``version_at(position) -> int`` (the schema history's version
    number: equal numbers, equal definitions) lets records decode by plan
    (:func:`_planned_blocks`); one without it has every event of every record parsed."""

    def columns_for(self, table_map: TableMap, position: Position) -> Sequence[ColumnDef] | None:
        """The columns of ``table_map``'s table at ``position`` (``None``: unknown)."""

    def primary_key_for(
        self, database: str, table: str, position: Position
    ) -> tuple[str, ...] | None:
        """Names of the primary key columns (``None``: unknown or no key)."""


@dataclass(frozen=True, slots=True)
class ChangeRow:
    """One change of one row, or one DDL statement (``op == "ddl"``).

    ``op`` is ``insert``, ``update``, ``delete``, ``read`` (snapshot) or ``ddl``.
    ``before``/``after`` map column names to values (see docs/formats.md); with a MINIMAL
    row image they hold only the columns the server logged. ``key`` holds the primary key
    values (from ``after``, or ``before`` for deletes and for the key columns an update's
    partial after image lacks), ``None`` when the table's key is
    unknown. ``ts_us`` is the commit timestamp in microseconds; ``txn_id`` the GTID, or
    ``FILE_NUM:OFFSET`` of the transaction where there is none.
    """

    source: str
    database: str
    table: str
    op: str
    ts_us: int
    position: Position
    gtid: str
    txn_id: str
    sequence: int
    key: dict[str, Any] | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    schema_version: int
    sql: str | None = None

    @property
    def table_name(self) -> str:
        """``database.table``."""
        return f"{self.database}.{self.table}"


#: ChangeRow(...) with every field, at the cost of a plain class: one per decoded row
#: (headwater.binlog._frozen; 14 fields: ~3.5 us through the frozen __init__).
_make_change_row = maker(ChangeRow)


def encode_events(events: Iterable[bytes | memoryview]) -> bytes:
    """The payload of a record holding ``events`` (each header + body, no checksum)."""
    parts: list[bytes | memoryview] = []
    for event in events:
        parts.append(_LEN.pack(len(event)))
        parts.append(event)
    return b"".join(parts)


def iter_payload_events(
    payload: bytes | memoryview, *, source: str | None = "<record>"
) -> Iterator[RawEvent]:
    """The events of a record payload, in order. ``offset`` is each event's offset in
    its binlog file, from its header (``log_pos - event_size``; ``None`` where the header
    has no ``log_pos``). Raises :class:`BinlogFormatError` on a malformed payload."""
    view = memoryview(payload)
    end = len(view)
    pos = 0
    while pos < end:
        if end - pos < 4:
            raise TruncatedError("payload ends inside an event length", source=source, offset=pos)
        (size,) = _LEN.unpack_from(view, pos)
        pos += 4
        if size < EVENT_HEADER_SIZE or pos + size > end:
            raise BinlogFormatError(
                f"event length {size} does not fit the payload ({end - pos} bytes left)",
                source=source,
                offset=pos - 4,
            )
        ts, type_code, server_id, event_size, log_pos, flags = _unpack_header(view, pos)
        offset = log_pos - event_size if log_pos >= event_size > 0 else None
        # tuple.__new__: the NamedTuple without its Python-level __new__ (as the framer).
        yield _new_tuple(
            RawEvent, (offset, ts, type_code, server_id, log_pos, flags, view[pos : pos + size])
        )
        pos += size


def is_ddl(query: QueryEvent) -> bool:
    """Whether a QUERY event is a statement other than transaction control."""
    return _NOT_DDL.match(query.query_bytes) is None


@dataclass(frozen=True, slots=True)
class RawRows:
    """The rows of a rows event kept as the event's bytes (:func:`decode_blocks` with
    ``raw=True``): ``body[at:end]``, ``count`` rows whose images are ``first`` (and
    ``second``, for updates) column lists. ``shapes`` (before, after) render their JSON
    straight from the bytes (``headwater._native._imagejson.render_raw``); :meth:`decode`
    gives the value tuples the block would otherwise hold. The bytes were walked once
    (``count_rows``): they frame, so decoding them raises nothing."""

    decoder: RowDecoder
    body: bytes
    at: int
    end: int
    first: tuple[int, ...]
    second: tuple[int, ...]
    update: bool
    count: int
    shapes: tuple[Any, Any]

    def decode(self) -> list[Any]:
        if self.update:
            return self.decoder.decode_row_pairs(
                self.body, self.at, self.end, self.first, self.second
            )
        return self.decoder.decode_rows(self.body, self.at, self.end, self.first)


@dataclass(slots=True)
class ChangeBlock:
    """The changes of one event of a record, undecoded into dicts: one rows event's rows
    (``op`` insert/update/delete) or one DDL statement (``op == "ddl"``, ``sql`` set).

    ``first`` is the index of its first change among the record's changes (its sequence
    is ``record.seq << 24 | first``); ``rows`` are the rows event's value tuples (pairs
    of tuples for updates) whose names are ``before_names`` / ``after_names``;
    ``key_names`` as in :class:`ChangeRow` (``None``: unknown). :func:`decode_record`
    builds :class:`ChangeRow` s from these; the Spark source builds its columns from them
    directly, without a dict per image where it needs only JSON text.

    ``raw`` (only from :func:`decode_blocks` with ``raw=True``): the rows still as the
    event's bytes, ``rows`` empty until :meth:`materialize` decodes them.
    """

    database: str
    table: str
    op: str
    position: Position
    first: int
    rows: list[Any]
    before_names: list[str]
    after_names: list[str]
    key_names: tuple[str, ...] | None
    sql: str | None = None
    raw: RawRows | None = None

    def __len__(self) -> int:
        if self.raw is not None:
            return self.raw.count
        return 1 if self.op == "ddl" else len(self.rows)

    def materialize(self) -> list[Any]:
        """``rows``, decoded from ``raw`` first if the block still holds bytes."""
        if self.raw is not None:
            self.rows = self.raw.decode()
            self.raw = None
        return self.rows

    def images(self) -> Iterator[tuple[dict[str, Any] | None, dict[str, Any] | None]]:
        """``(before, after)`` dicts of each row (``None`` where the event has none)."""
        self.materialize()
        before_names, after_names = self.before_names, self.after_names
        if self.op == "update":
            for b, a in self.rows:
                yield (
                    dict(zip(before_names, b, strict=True)),
                    dict(zip(after_names, a, strict=True)),
                )
        elif self.op == "insert":
            for a in self.rows:
                yield None, dict(zip(after_names, a, strict=True))
        else:
            for b in self.rows:
                yield dict(zip(before_names, b, strict=True)), None


def decode_record(
    record: Any,
    *,
    source: str,
    fde: FormatDescription | None,
    schema: SchemaLookup | None = None,
    want: TableFilter | None = None,
    want_ddl: DdlFilter | None = None,
) -> list[ChangeRow]:
    """The changes of one stored record (a ``headwater.store.Record``).

    ``want(database, table)`` keeps only the tables it accepts; rows events of other
    tables are skipped without decoding their rows. ``want_ddl(statement, default
    database)`` keeps only the DDL statements it accepts (None: every one; callers that
    filter tables pass one built on ``headwater.schema.ddlscope``, which this package may
    not import). Raises
    :class:`~headwater.errors.BinlogFormatError` naming the record's position on bytes
    that do not decode.
    """
    out: list[ChangeRow] = []
    blocks = decode_blocks(
        record, source=source, fde=fde, schema=schema, want=want, want_ddl=want_ddl
    )
    for block in blocks:
        out += block_changes(record, block, source)
    return out


def block_changes(record: Any, block: ChangeBlock, source: str) -> list[ChangeRow]:
    """The :class:`ChangeRow` s of one block of ``record``."""
    gtid: str = record.gtid
    base: Position = record.position
    txn_id = gtid or f"{base.file_num}:{base.offset}"
    ts_us: int = record.ts_us
    version: int = record.schema_version
    database, table, op, position = block.database, block.table, block.op, block.position
    n = sequence_of(record.seq, block.first)
    if op == "ddl":
        return [
            ChangeRow(source, database, "", "ddl", ts_us, position, gtid, txn_id, n,
                      None, None, None, version, block.sql)
        ]  # fmt: skip
    out: list[ChangeRow] = []
    key_names = block.key_names
    make = _make_change_row
    for before, after in block.images():
        if key_names is None:
            key = None
        elif after is not None and before is not None:
            # An update: a key column the after image lacks is the before image's (a
            # MINIMAL after image holds only the columns the statement set, MariaDB
            # sql/table.cc TABLE::mark_columns_per_binlog_row_image; the key then did not
            # change, and the before image holds it).
            key = {k: after[k] if k in after else before.get(k) for k in key_names}
        else:
            image = after if after is not None else before
            key = None if image is None else {k: image.get(k) for k in key_names}
        out.append(
            make(source, database, table, op, ts_us, position, gtid, txn_id, n,
                 key, before, after, version, None)
        )  # fmt: skip
        n += 1
    return out


def decode_blocks(
    record: Any,
    *,
    source: str,
    fde: FormatDescription | None,
    schema: SchemaLookup | None = None,
    want: TableFilter | None = None,
    want_ddl: DdlFilter | None = None,
    raw: bool = False,
) -> list[ChangeBlock]:
    """The change blocks of one stored record, in order (as :func:`decode_record`).

    ``raw``: rows events whose images :class:`RawRows` can render from bytes keep their
    rows as bytes (``block.raw``; counted, not decoded: :meth:`ChangeBlock.materialize`)."""
    try:
        return _decode_blocks(record, source, fde, schema, want, want_ddl, raw)
    except BinlogFormatError as e:
        # Named here, not up front: the name costs a Position rendered per record.
        raise e.located(source=f"{source} record {record.seq} at {record.position}") from None


def _decode_blocks(
    record: Any,
    source: str,
    fde: FormatDescription | None,
    schema: SchemaLookup | None,
    want: TableFilter | None,
    want_ddl: DdlFilter | None,
    raw: bool = False,
) -> list[ChangeBlock]:
    shape = (6, False) if fde is None else (fde.table_id_size, fde.is_mariadb)
    maps = _TABLE_MAPS.get(shape)
    if maps is None:
        maps = _TABLE_MAPS.setdefault(shape, {})
    planned = _planned_blocks(record, shape[0], maps, schema, want, raw)
    if planned is not None:
        return planned
    return _general_blocks(record, fde, maps, schema, want, want_ddl)


def _general_blocks(
    record: Any,
    fde: FormatDescription | None,
    maps: dict[bytes, TableMap],
    schema: SchemaLookup | None,
    want: TableFilter | None,
    want_ddl: DdlFilter | None,
) -> list[ChangeBlock]:
    """The change blocks of any record: every event parsed (``headwater.binlog.events``);
    the reference of :func:`_planned_blocks`."""
    base: Position = record.position
    ctx = DecodeContext(fde=fde, table_map_cache=maps)
    if schema is not None:
        ctx.columns = _record_columns(schema, base)
    change_id, file_num, offset, first_index = (
        base.change_id,
        base.file_num,
        base.offset,
        base.event_index,
    )
    out: list[ChangeBlock] = []
    n = 0
    skip_ids: set[int] = set()
    for index, raw in enumerate(iter_payload_events(record.payload, source=None)):
        type_code = raw.type_code
        if type_code in _NO_CHANGES:
            continue
        if type_code in ROWS_EVENT_TYPES and skip_ids:
            table_id = rows_event_table_id(raw.body, table_id_size=ctx.table_id_size)
            if table_id in skip_ids:
                continue
        try:
            event = parse_event(raw, ctx)
        except BinlogFormatError as e:
            raise e.located(offset=raw.offset, event_type=event_type_name(type_code)) from None
        if isinstance(event, TableMap):
            if want is not None and not want(event.schema, event.table):
                skip_ids.add(event.table_id)
            else:
                skip_ids.discard(event.table_id)
        elif isinstance(event, RowsEvent):
            position = _event_position(change_id, file_num, offset, first_index + index)
            tm = event.table_map
            columns = ctx.columns(tm) if ctx.columns is not None else None
            names = event.column_names(columns)
            block = ChangeBlock(
                tm.schema,
                tm.table,
                event.kind,
                position,
                n,
                event.rows,
                [names[i] for i in event.columns_before],
                [names[i] for i in event.columns_after],
                _key_names(tm, names, schema, position),
            )
            if block.rows:
                out.append(block)
                n += len(block.rows)
        elif isinstance(event, QueryEvent) and is_ddl(event):
            if want_ddl is not None and not want_ddl(event.query, event.schema):
                continue  # another table's DDL, or a statement not about data
            position = Position(
                base.change_id, base.file_num, base.offset, base.event_index + index
            )
            out.append(
                ChangeBlock(event.schema, "", "ddl", position, n, [], [], [], None, event.query)
            )
            n += 1
    return out


#: Events no change comes from and whose parsing sets nothing the later events need (a
#: transaction's GTID and XID, the statement annotations, the session variables of a
#: statement-format event): framed, not parsed (three of the five events of a one-row
#: transaction: a third of its decoding).
_NO_CHANGES = frozenset(
    (
        EventType.XID,
        EventType.GTID,
        EventType.ANONYMOUS_GTID,
        EventType.GTID_TAGGED,
        EventType.MARIADB_GTID,
        EventType.ANNOTATE_ROWS,
        EventType.ROWS_QUERY,
        EventType.INTVAR,
        EventType.RAND,
        EventType.USER_VAR,
    )
)


def _record_columns(
    schema: SchemaLookup, base: Position
) -> Callable[[TableMap], Sequence[ColumnDef] | None]:
    """``schema.columns_for(table_map, base)``, asked once per TableMap object of a record
    (parse_event and decode_blocks both want them for every rows event)."""
    known: dict[int, tuple[TableMap, Sequence[ColumnDef] | None]] = {}

    def columns(table_map: TableMap) -> Sequence[ColumnDef] | None:
        hit = known.get(id(table_map))
        if hit is not None and hit[0] is table_map:
            return hit[1]
        found = schema.columns_for(table_map, base)
        known[id(table_map)] = (table_map, found)
        return found

    return columns


def _key_names(
    tm: TableMap, names: Sequence[str], schema: SchemaLookup | None, position: Position
) -> tuple[str, ...] | None:
    if tm.primary_key:
        return tuple(names[i] for i in tm.primary_key)
    if schema is not None:
        return schema.primary_key_for(tm.schema, tm.table, position)
    return None


# -- rows events decoded by plan ------------------------------------------------------------
#
# Most records are a GTID, TABLE_MAPs, plain rows events and an XID, and every rows event of
# a table repeats the same header (flags, width, column bitmaps) under the same TABLE_MAP
# object (the TABLE_MAPs are shared by body bytes, _TABLE_MAPS). What the general loop of
# _decode_blocks derives per event from those -- the column definitions in force, the
# names of each image's columns, the key's names, the row decoder -- is the same for
# every such event between two schema changes: a _RowsPlan keeps it, and _planned_blocks
# decodes a record with one frame walk, a lookup and the compiled row decoder per rows
# event (a one-row transaction: about a third of the general loop's time).


@dataclass(frozen=True, slots=True)
class _RowsPlan:
    """What decoding a rows event of ``table_map`` with given column bitmaps yields besides
    its rows, at one schema version: the fields of its :class:`ChangeBlock`, and the
    decoder of its row images."""

    table_map: TableMap
    database: str
    table: str
    op: str
    decoder: RowDecoder
    before_names: list[str]
    after_names: list[str]
    key_names: tuple[str, ...] | None
    #: (before, after) ``RowShape`` s rendering the images from bytes (RawRows), or None
    shapes: tuple[Any, Any] | None = None


#: Rows events a plan decodes: uncompressed WRITE/UPDATE/DELETE, v1 and v2 (compressed
#: ones and MySQL's JSON diffs take the general loop).
_PLAIN_ROWS = frozenset(
    (
        EventType.WRITE_ROWS_V1,
        EventType.UPDATE_ROWS_V1,
        EventType.DELETE_ROWS_V1,
        EventType.WRITE_ROWS,
        EventType.UPDATE_ROWS,
        EventType.DELETE_ROWS,
    )
)
_TABLE_MAP_EVENT = EventType.TABLE_MAP
_PlanKey = tuple[int, int, tuple[int, ...], tuple[int, ...], int]
#: ``[(schema lookup, plans)]``: the plans made with one schema lookup object (a batch's
#: log opens its own history), replaced whole when another one decodes (so that threads
#: read a consistent pair). Keyed by the TABLE_MAP object's id (the plan holds it, and is
#: used only for that very object), type code, bitmaps and schema version.
_PLANS: list[tuple[SchemaLookup | None, dict[_PlanKey, _RowsPlan]]] = [(None, {})]
_PLANS_MAX = 4096


def _planned_blocks(
    record: Any,
    id_size: int,
    maps: dict[bytes, TableMap],
    schema: SchemaLookup | None,
    want: TableFilter | None,
    raw: bool = False,
) -> list[ChangeBlock] | None:
    """The change blocks of a record of TABLE_MAPs already parsed in this process, plain
    rows events and events no change comes from (as the general loop gives them), or
    None for anything else: another event (a DDL, a compressed rows event), a TABLE_MAP
    or a schema lookup seen for the first time, bytes that do not decode (the general
    loop then decodes the record, and raises what it raises).

    A plan is valid for one schema version: ``schema.version_at(record.position)`` (the
    number of history entries at or before it: two positions of one number have the same
    definitions in force). A lookup without ``version_at`` takes the general loop. Like
    that loop, the column definitions are looked up at the record's position and the key
    at the event's; no schema change falls inside a transaction with rows (DDL commits)."""
    payload = record.payload
    if type(payload) is not bytes:
        return None
    if schema is None:
        version = -1
    else:
        version_at = getattr(schema, "version_at", None)
        if version_at is None:
            return None
        version = version_at(record.position)
    owner, plans = _PLANS[0]
    if owner is not schema:
        plans = {}
        _PLANS[0] = (schema, plans)
    base: Position = record.position
    out: list[ChangeBlock] = []
    tables: dict[int, TableMap] = {}  # table id -> TableMap, as ctx.table_maps
    skip_ids: set[int] = set()
    events = _change_events(payload, _CHANGE_EVENTS)
    if events is None:
        return None
    n = 0
    try:
        for index, code, start, stop in events:
            if code == _TABLE_MAP_EVENT:
                tm = maps.get(payload[start:stop])
                if tm is None:
                    return None
                tables[tm.table_id] = tm
                if want is not None and not want(tm.schema, tm.table):
                    skip_ids.add(tm.table_id)
                else:
                    skip_ids.discard(tm.table_id)
                continue
            if code not in _PLAIN_ROWS:
                return None
            body = payload[start:stop]
            if len(body) < id_size:
                return None
            table_id = int.from_bytes(body[:id_size], "little")
            if table_id in skip_ids:
                continue
            found = tables.get(table_id)
            if found is None:
                return None
            _k, flags, _x, _w, first, second, _b, at = _cached_layout(code, body, found, id_size)
            position = _event_position(
                base.change_id, base.file_num, base.offset, base.event_index + index
            )
            key = (id(found), code, first, second, version)
            plan = plans.get(key)
            if plan is None or plan.table_map is not found:
                plan = _plan(found, code, first, second, schema, base, position)
                if len(plans) >= _PLANS_MAX:
                    plans.clear()
                plans[key] = plan
            if raw and plan.shapes is not None and at < len(body):
                # Counted (the same walk of the bytes as decoding, without values).
                update = plan.op == "update"
                count = plan.decoder.count_rows(
                    body, at, len(body), first, second if update else None
                )
                if flags & 1:
                    tables.clear()
                lazy = RawRows(plan.decoder, body, at, len(body), first, second, update,
                               count, plan.shapes)  # fmt: skip
                out.append(
                    ChangeBlock(
                        plan.database, plan.table, plan.op, position, n, [],
                        plan.before_names, plan.after_names, plan.key_names, None, lazy,
                    )
                )  # fmt: skip
                n += count
                continue
            if plan.op == "update":
                rows: list[Any] = plan.decoder.decode_row_pairs(body, at, len(body), first, second)
            elif at < len(body):
                rows = plan.decoder.decode_rows(body, at, len(body), first)
            else:
                rows = []
            if flags & 1:  # STMT_END_F: the statement's table maps are done with
                tables.clear()
            if rows:
                out.append(
                    ChangeBlock(
                        plan.database, plan.table, plan.op, position, n, rows,
                        plan.before_names, plan.after_names, plan.key_names,
                    )
                )  # fmt: skip
                n += len(rows)
    except (BinlogFormatError, *DECODE_ERRORS):
        return None
    return out


#: The event types :func:`_planned_blocks` looks at, as a byte per type code (every type
#: but those no change comes from).
_CHANGE_EVENTS = bytes(0 if code in _NO_CHANGES else 1 for code in range(256))


def _events_python(payload: bytes, mask: bytes) -> list[tuple[int, int, int, int]] | None:
    """``headwater._native._ingest.events`` in Python (a build without the extension):
    ``(index, type code, body start, body end)`` of the payload's events whose type's
    byte in ``mask`` is set; None when the payload does not frame."""
    out = []
    pos = index = 0
    end = len(payload)
    while pos < end:
        if end - pos < 4:
            return None
        (size,) = _LEN.unpack_from(payload, pos)
        start, pos = pos + 4 + EVENT_HEADER_SIZE, pos + 4 + size
        if size < EVENT_HEADER_SIZE or pos > end:
            return None
        code = payload[start - EVENT_HEADER_SIZE + 4]
        if mask[code]:
            out.append((index, code, start, pos))
        index += 1
    return out


_change_events: Callable[[bytes, bytes], list[tuple[int, int, int, int]] | None]
try:  # the compiled walk (setup.py builds it with the package)
    from headwater._native._ingest import events as _change_events
except ImportError:  # pragma: no cover - a build without the extension
    _change_events = _events_python


def _plan(
    tm: TableMap,
    code: int,
    first: tuple[int, ...],
    second: tuple[int, ...],
    schema: SchemaLookup | None,
    base: Position,
    position: Position,
) -> _RowsPlan:
    """The plan of rows events of ``tm`` with bitmaps ``first``/``second`` (the general
    loop's derivation, done once)."""
    columns = None if schema is None else schema.columns_for(tm, base)
    op = _ROWS_OPS[code]
    width = tm.column_count
    if tm.column_names is not None:
        names: Sequence[str] = tm.column_names
    elif columns is not None and len(columns) == width:
        names = tuple(c.name for c in columns)
    else:
        names = tuple(f"@{i + 1}" for i in range(width))
    if op == "update":
        before, after = first, second
    else:
        before, after = ((), first) if op == "insert" else (first, ())
    decoder = row_decoder_for(tm, columns)
    shapes: tuple[Any, Any] | None = None
    b_shape = decoder.json_shape(before) if before else None
    a_shape = decoder.json_shape(after) if after else None
    if (op == "update" and b_shape is not None and a_shape is not None) or (
        op != "update" and (a_shape if op == "insert" else b_shape) is not None
    ):
        shapes = (b_shape, a_shape)
    return _RowsPlan(
        tm, tm.schema, tm.table, op, decoder,
        [names[i] for i in before], [names[i] for i in after],
        _key_names(tm, names, schema, position), shapes,
    )  # fmt: skip


_ROWS_OPS: dict[int, str] = {
    EventType.WRITE_ROWS_V1: "insert",
    EventType.UPDATE_ROWS_V1: "update",
    EventType.DELETE_ROWS_V1: "delete",
    EventType.WRITE_ROWS: "insert",
    EventType.UPDATE_ROWS: "update",
    EventType.DELETE_ROWS: "delete",
}

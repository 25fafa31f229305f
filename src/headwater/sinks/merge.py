"""Net effect per key: many changes of one row in a batch become at most one write.

A change touches one or two *keys* (``(source, database, table, primary key values)``):
an insert, snapshot read, update or delete touches its key; an update that changes the
primary key touches the old key (the row leaves it) and the new key (the row arrives).
:func:`explode` turns each change into one :class:`KeyEvent` per key it touches:

=================  ==========================================================
change             key events
=================  ==========================================================
insert             ``put(key, after, created=True)``
read (snapshot)    ``put(key, after)``
update             ``put(key, after)``
update of the key  ``delete(old key)``, ``put(new key, after, created=True)``
delete             ``delete(key)``
=================  ==========================================================

:func:`collapse` orders each key's events by ``sequence`` and keeps the net effect:

* the last event is a delete and the first one created the row (the key did not exist
  before the batch): nothing at all (insert, updates, delete of one key is nothing);
* the last event is a delete: ``delete(key)``;
* the last event is a put: ``upsert(key, image)``, the image merging the after images of
  the puts since the last delete (with MINIMAL row images a later update logs only some
  columns; the merge keeps the others).

Applying the net effects of a batch to a state (in any order: they touch distinct keys)
gives the state that applying every change in order gives (``tests/unit/sinks``).

Routing: all events of one key must land in one shard and keep their order there, and an
update of the key sends the delete of the old key to the old key's shard (the shard that
applied the old key's earlier changes is the one that removes it). :func:`shard_of` hashes
``(database, table, key values)`` with the formula of the HTTP API's sharding
(docs/formats.md, "Sharding"; the Parquet mirror's buckets); the SQL sinks' Spark glue
hashes the key's JSON text in Spark SQL instead (``xxhash64``), which needs no decoding
of the values (headwater.sinks.glue).

Tables without a primary key (``key`` is null in their change rows) are refused with a
:class:`~headwater.errors.SinkError`: without a key there is no net effect to compute and
no row to address.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson
from crc32c import crc32c

from headwater.changes import ChangeRow
from headwater.errors import SinkError
from headwater.position import Position

__all__ = [
    "ROLE_KEY",
    "ROLE_NEW",
    "ROLE_OLD",
    "ChangeColumns",
    "ColumnEffect",
    "KeyEvent",
    "NetEffect",
    "collapse",
    "collapse_column_rows",
    "collapse_columns",
    "column_effect",
    "explode",
    "key_id",
    "route",
    "route_row",
    "shard_of",
    "written",
]

PUT = "put"
DELETE = "delete"
UPSERT = "upsert"

_LEN = struct.Struct("<I")


@dataclass(frozen=True, slots=True)
class KeyEvent:
    """What one change does to one key. ``key_id`` is the key's canonical JSON text."""

    source: str
    database: str
    table: str
    key_id: str
    key: dict[str, Any]
    kind: str  # PUT or DELETE
    created: bool
    image: dict[str, Any] | None
    sequence: int
    position: Position


class NetEffect(NamedTuple):
    """The one write a key needs: ``action`` is ``upsert`` (with ``image``) or ``delete``.

    ``first_sequence``/``last_sequence`` span the key's events in the batch; ``position``
    is the last event's (the schema in force there describes ``image``). A named tuple,
    not a frozen dataclass: a batch makes one per key, and a frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field) cost five times as much.
    """

    source: str
    database: str
    table: str
    key_id: str
    key: dict[str, Any]
    action: str
    image: dict[str, Any] | None
    first_sequence: int
    last_sequence: int
    position: Position

    @property
    def table_name(self) -> str:
        return f"{self.database}.{self.table}"


def key_id(key: dict[str, Any]) -> str:
    """The canonical text of a key: JSON ``[[column, value], ...]`` in key order."""
    return orjson.dumps([[c, v] for c, v in key.items()]).decode()


def explode(change: ChangeRow) -> list[KeyEvent]:
    """The key events of one row change (see the module docstring). Raises
    :class:`SinkError` for DDL and for changes without a key."""
    if change.op == "ddl":
        raise SinkError("a DDL change has no key events", table=change.table_name)
    key = change.key
    if not key:
        raise SinkError(
            "the table has no primary key; headwater sinks refuse keyless tables "
            "(add a primary key at the source, or filter the table out)",
            table=change.table_name,
            resume_sequence=change.sequence,
        )

    def event(
        k: dict[str, Any], kind: str, created: bool, image: dict[str, Any] | None
    ) -> KeyEvent:
        return KeyEvent(
            change.source,
            change.database,
            change.table,
            key_id(k),
            k,
            kind,
            created,
            image,
            change.sequence,
            change.position,
        )

    op = change.op
    if op == "insert":
        return [event(key, PUT, True, change.after)]
    if op == "read":
        return [event(key, PUT, False, change.after)]
    if op == "delete":
        return [event(key, DELETE, False, None)]
    if op == "update":
        new = event(key, PUT, False, change.after)
        before = change.before or {}
        if all(c in before for c in key):
            old_key = {c: before[c] for c in key}
            if key_id(old_key) != new.key_id:
                return [event(old_key, DELETE, False, None), event(key, PUT, True, change.after)]
        return [new]
    raise SinkError(f"unknown operation {op!r}", table=change.table_name, key=key)


def collapse(events: Iterable[KeyEvent]) -> list[NetEffect]:
    """The net effect of each key's events (module docstring), ordered by last sequence."""
    by_key: dict[tuple[str, str, str, str], list[KeyEvent]] = {}
    for ev in events:
        by_key.setdefault((ev.source, ev.database, ev.table, ev.key_id), []).append(ev)
    out: list[NetEffect] = []
    for evs in by_key.values():
        evs.sort(key=lambda e: e.sequence)
        effect = _net(evs)
        if effect is not None:
            out.append(effect)
    out.sort(key=lambda n: n.last_sequence)
    return out


def _net(evs: list[KeyEvent]) -> NetEffect | None:
    first, last = evs[0], evs[-1]
    image: dict[str, Any] | None = None
    if last.kind == DELETE:
        if first.created:
            return None
        action = DELETE
    else:
        action = UPSERT
        merged: dict[str, Any] = {}
        for ev in evs:  # merge the puts since the last delete (MINIMAL images)
            if ev.kind == DELETE:
                merged = {}
            else:
                merged.update(ev.image or {})
        image = merged
    return NetEffect(
        last.source,
        last.database,
        last.table,
        last.key_id,
        last.key,
        action,
        image,
        first.sequence,
        last.sequence,
        last.position,
    )


def _canonical(value: Any) -> bytes:
    if value is None:
        return b"null"
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, int):
        return str(value).encode("ascii")
    if isinstance(value, float):
        return repr(value).encode("ascii")
    if isinstance(value, dict) and len(value) == 1:
        ((tag, payload),) = value.items()
        if tag in ("base64", "undecodable_text_base64"):
            return base64.b64decode(payload)
    text: bytes = orjson.dumps(value)
    return text[1:-1] if text.startswith(b'"') else text


def shard_of(database: str, table: str, key: dict[str, Any] | None, count: int) -> int:
    """``crc32c(part(database) + part(table) + part(v1) ...) % count`` (docs/formats.md)."""
    parts: list[bytes] = []
    values = [] if key is None else [_canonical(v) for v in key.values()]
    for text in (database.encode("utf-8", "surrogateescape"), table.encode("utf-8"), *values):
        parts.append(_LEN.pack(len(text)))
        parts.append(text)
    return int(crc32c(b"".join(parts))) % count


def route(changes: Iterable[ChangeRow], count: int) -> Iterator[tuple[int, KeyEvent]]:
    """``(shard, event)`` for every key event of ``changes`` (DDL changes excluded)."""
    for change in changes:
        if change.op == "ddl":
            continue
        for ev in explode(change):
            yield shard_of(ev.database, ev.table, ev.key, count), ev


# -- the columnar path of the Spark glue ---------------------------------------------------
#
# The Spark glue moves change rows between the JVM and Python as Arrow columns. Building a
# ChangeRow, two to four KeyEvents and a parsed JSON image per row cost more than everything
# else in a micro-batch, so the glue routes (in Spark SQL) and collapses on the columns
# instead, with the same rules as explode() + collapse() above (tests/unit/sinks/
# test_sink_merge.py proves them equal on random histories):
#
# * each routed copy of a row has a *role*: ROLE_KEY (the row's own key), or, for an
#   update that changed the primary key (its ``before_key`` column is set), ROLE_OLD (the
#   delete of the old key, routed and identified by ``before_key``) and ROLE_NEW (the put
#   of the new key, which creates it); route_row() states it, the glue's Spark SQL does it;
# * keys are identified by their JSON text (the source renders ``key`` and ``before_key``
#   of one key identically, and transforms rewrite both the same way);
# * collapse_columns() parses JSON only for the keys and images of the net effects.

ROLE_KEY = 0
ROLE_OLD = 1
ROLE_NEW = 2


#: One key's net effect in :class:`ChangeColumns`: ``(first row, last row, action, image)``
#: (``image`` None for a delete), the rows being indexes into the columns.
ColumnEffect = tuple[int, int, str, dict[str, Any] | None]


def route_row(
    op: str, key_text: str | None, before_key_text: str | None
) -> list[tuple[int, str | None]]:
    """``(role, key text)`` of each copy of a change row (DDL aside): an update whose
    ``before_key`` is set leaves twice (old key: ROLE_OLD; new key: ROLE_NEW)."""
    if op == "update" and before_key_text is not None:
        return [(ROLE_OLD, before_key_text), (ROLE_NEW, key_text)]
    return [(ROLE_KEY, key_text)]


@dataclass(slots=True)
class ChangeColumns:
    """Routed change rows of one shard as parallel lists (the glue's Arrow columns).

    ``key`` holds the canonical key text each row copy is identified by (the old key for
    ROLE_OLD), ``after`` the after image's JSON text."""

    source: list[str]
    database: list[str]
    table: list[str]
    op: list[str]
    sequence: list[int]
    change_id: list[int]
    file_num: list[int]
    offset: list[int]
    event_index: list[int]
    key: list[str | None]
    after: list[str | None]
    role: list[int]

    _positions: dict[tuple[int, int, int, int], Position] = field(default_factory=dict)
    #: The same rows as an Arrow table with ``key``, ``op`` and ``role`` columns (the
    #: glue's), or None: with it, large collapses find each key's rows in Arrow/numpy.
    arrow: Any = None

    def position(self, i: int) -> Position:
        """Row ``i``'s position (rows of one binlog event share one object)."""
        at = (self.change_id[i], self.file_num[i], self.offset[i], self.event_index[i])
        found = self._positions.get(at)
        if found is None:
            found = self._positions[at] = Position(*at)
        return found


def collapse_column_rows(
    cols: ChangeColumns, order: Sequence[int], width: Callable[[int], int | None] | None = None
) -> list[ColumnEffect]:
    """:func:`collapse` of the key events of rows ``order`` (indexes into ``cols``, in
    sequence order), computed on the columns, as :data:`ColumnEffect` tuples ordered by
    last sequence (:func:`column_effect` makes one a :class:`NetEffect`). Raises
    :class:`SinkError` for a keyless row or an unknown operation, like :func:`explode`.

    ``width(i)``: how many columns row ``i``'s table has (None: unknown). A key's last
    after image that holds that many columns is a full image: the key's earlier images
    (which the merge of MINIMAL images would fold in under it) are then not parsed.

    The first and last row of each key are found with C loops (``dict``/``zip``/``map``),
    every row of a key only when its images must be merged; the rest runs once per key.
    When every row is of one table, keys are told apart by their text alone, which saves
    a tuple per row."""
    op, role, after = cols.op, cols.role, cols.after
    _check(cols, order)
    if cols.arrow is not None and len(order) >= _ARROW_ROWS and _one_table(cols):
        return _collapse_arrow(cols, order, width)
    keys = cols.key
    idents: Sequence[Any] = keys
    if not _one_table(cols):
        idents = list(zip(cols.source, cols.database, cols.table, keys, strict=True))
    ids = list(map(idents.__getitem__, order))
    last_of = dict(zip(ids, order, strict=True))  # a key's last row (later rows overwrite)
    first_of = last_of
    if len(last_of) < len(ids):  # some key has several rows: its first one too
        first_of = dict(zip(reversed(ids), reversed(order), strict=True))
    rows_of: dict[Any, list[int]] | None = None  # every key's rows, when a merge needs them
    loads = orjson.loads
    effects: list[tuple[int, int, str, dict[str, Any] | None]] = []
    for ident, last in last_of.items():
        first = first_of[ident]
        if op[last] == "delete" or role[last] == ROLE_OLD:
            if op[first] == "insert" or role[first] == ROLE_NEW:
                continue  # created in this batch and gone again: nothing
            effects.append((first, last, DELETE, None))
            continue
        text = after[last]
        image: dict[str, Any] = {} if text is None else loads(text)
        if first != last:
            full = width(last) if width is not None else None
            if full is None or len(image) < full:
                if rows_of is None:
                    rows_of = {}
                    for key, i in zip(ids, order, strict=True):
                        rows_of.setdefault(key, []).append(i)
                image = {}
                for p in rows_of[ident]:  # merge the puts since the last delete (MINIMAL)
                    if op[p] == "delete" or role[p] == ROLE_OLD:
                        image = {}
                    elif (text := after[p]) is not None:
                        image.update(loads(text))
        effects.append((first, last, UPSERT, image))
    seq = cols.sequence
    effects.sort(key=lambda e: seq[e[1]])
    return effects


#: From this many rows on, :func:`collapse_column_rows` groups keys in Arrow and numpy
#: (a few fixed calls) when the columns come with their Arrow table.
_ARROW_ROWS = 512


def _collapse_arrow(
    cols: ChangeColumns, order: Sequence[int], width: Callable[[int], int | None] | None
) -> list[ColumnEffect]:
    """:func:`collapse_column_rows` of one table's rows with each key's first and last
    row found in C (Arrow's dictionary encoding of the key texts, numpy's ``unique``),
    and the effects ordered by their last row (``order`` is in sequence order); Python
    runs per effect only to parse the image, and per row only for keys whose images
    must be merged."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = np.asarray(order, dtype=np.int64)
    n = len(rows)
    table = cols.arrow
    keys = table.column("key").take(pa.array(rows))
    if isinstance(keys, pa.ChunkedArray):  # one dictionary for all (not one per chunk)
        keys = keys.combine_chunks()
    code = pc.dictionary_encode(keys).indices.to_numpy(zero_copy_only=False)
    # Each key's first position in ``order``, and its last (the first one backwards).
    _, first_at = np.unique(code, return_index=True)
    _, back_at = np.unique(code[::-1], return_index=True)
    last_at = n - 1 - back_at
    by_last = np.argsort(last_at, kind="stable")
    firsts, lasts = rows[first_at[by_last]], rows[last_at[by_last]]
    ops, roles = table.column("op"), table.column("role")
    gone = pc.or_(pc.equal(ops, "delete"), pc.equal(roles, ROLE_OLD)).fill_null(False)
    made = pc.or_(pc.equal(ops, "insert"), pc.equal(roles, ROLE_NEW)).fill_null(False)
    gone_np, made_np = _bools(gone), _bools(made)
    ends_gone = gone_np[lasts]
    keep = ~(ends_gone & made_np[firsts])  # created in this batch and gone again: nothing
    loads, after = orjson.loads, cols.after
    effects: list[ColumnEffect] = [
        (f, last, DELETE, None) if g else (f, last, UPSERT, _image(loads, after[last]))
        for f, last, g in zip(
            firsts[keep].tolist(), lasts[keep].tolist(), ends_gone[keep].tolist(), strict=True
        )
    ]
    # Upserts of keys with several rows: merged unless their last image is a full one.
    merge: dict[int, int] = {}  # effect index -> key code
    several = ((firsts != lasts) & ~ends_gone)[keep]
    if several.any():
        codes_by_effect = code[first_at[by_last]][keep]
        for j in np.flatnonzero(several).tolist():
            _, last, _, put = effects[j]
            full = width(last) if width is not None else None
            if full is None or len(put or ()) < full:
                merge[j] = int(codes_by_effect[j])
    if merge:
        wanted = set(merge.values())
        rows_of: dict[int, list[int]] = {}
        for c, i in zip(code.tolist(), order, strict=True):
            if c in wanted:
                rows_of.setdefault(c, []).append(i)
        for j, c in merge.items():
            image: dict[str, Any] = {}
            for p in rows_of[c]:  # merge the puts since the last delete (MINIMAL)
                if gone_np[p]:
                    image = {}
                elif (text := after[p]) is not None:
                    image.update(loads(text))
            first, last, action, _ = effects[j]
            effects[j] = (first, last, action, image)
    return effects


def _bools(values: Any) -> Any:
    """A boolean Arrow array or chunked array as a numpy array."""
    import pyarrow as pa

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.to_numpy(zero_copy_only=False)


def _image(loads: Callable[[str], Any], text: str | None) -> dict[str, Any]:
    return {} if text is None else loads(text)


def written(effect: NetEffect) -> dict[str, Any]:
    """The column values ``effect`` writes: a delete's key; an upsert's image, with the key
    columns it lacks taken from the key. A MINIMAL after image holds only the columns the
    statement set (MariaDB sql/table.cc, ``TABLE::mark_columns_per_binlog_row_image``), so
    an update that left the key alone logs an image without it; the change row's key then
    holds it (from the before image), and the row it addresses is that key's."""
    if effect.action == DELETE:
        return effect.key
    image = effect.image or {}
    key = effect.key
    if key and not key.keys() <= image.keys():
        return {**key, **image}
    return image


def column_effect(cols: ChangeColumns, effect: ColumnEffect) -> NetEffect:
    """The :class:`NetEffect` of one :data:`ColumnEffect` of ``cols``."""
    first, last, action, image = effect
    key = cols.key[last]
    return NetEffect(
        cols.source[last],
        cols.database[last],
        cols.table[last],
        key,  # type: ignore[arg-type]  # collapse refused keyless rows
        orjson.loads(key),  # type: ignore[arg-type]
        action,
        image,
        cols.sequence[first],
        cols.sequence[last],
        cols.position(last),
    )


def collapse_columns(
    cols: ChangeColumns, order: Sequence[int], width: Callable[[int], int | None] | None = None
) -> list[NetEffect]:
    """:func:`collapse_column_rows` as :class:`NetEffect` values."""
    rows = collapse_column_rows(cols, order, width)
    src, db, tbl, keys, seq, position = (
        cols.source, cols.database, cols.table, cols.key, cols.sequence, cols.position
    )  # fmt: skip
    loads = orjson.loads
    new = tuple.__new__  # NetEffect(...) goes through a Python-level __new__
    return [
        new(
            NetEffect,
            (
                src[last],
                db[last],
                tbl[last],
                keys[last],
                loads(keys[last]),  # type: ignore[arg-type]  # _check refused keyless rows
                action,
                image,
                seq[first],
                seq[last],
                position(last),
            ),
        )
        for first, last, action, image in rows
    ]


def _one_table(cols: ChangeColumns) -> bool:
    """Whether every row is of one ``(source, database, table)`` (C loops, no tuples)."""
    return all(len(set(column)) <= 1 for column in (cols.source, cols.database, cols.table))


def _check(cols: ChangeColumns, order: Sequence[int]) -> None:
    """Refuse the first keyless row or unknown operation of ``order``; the scan only runs
    when the columns hold one (DDL rows, outside ``order``, may be keyless)."""
    if None not in cols.key and set(cols.op) <= _OPS_OR_DDL:
        return
    database, table = cols.database, cols.table
    for i in order:
        if cols.key[i] is None:
            raise SinkError(
                "the table has no primary key; headwater sinks refuse keyless tables "
                "(add a primary key at the source, or filter the table out)",
                table=f"{database[i]}.{table[i]}",
                resume_sequence=cols.sequence[i],
            )
        if cols.op[i] not in _OPS:
            raise SinkError(f"unknown operation {cols.op[i]!r}", table=f"{database[i]}.{table[i]}")


_OPS = frozenset(("insert", "read", "update", "delete"))
_OPS_OR_DDL = _OPS | {"ddl"}

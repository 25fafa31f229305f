"""The Parquet mirror: each table's current state, rewritten per affected partition.

Layout::

    <path>/<database>/<table>/mirror_part=<value>/data.parquet

``value`` is the hash bucket of the primary key (``shard_of(database, table, key,
buckets)``, docs/formats.md "Sharding") or, with ``partition_column``, that column's value
as text (percent-encoded; NULL is ``__HIVE_DEFAULT_PARTITION__``). Readers that discover
partitions (Spark, DuckDB ``hive_partitioning``) also see a ``mirror_part`` column.

Copy-on-write: a batch rewrites only the partitions its changes touch. A change touches
the partition of its before image and that of its after image (a row whose key or
partition column changes moves). Each touched partition is rewritten by one task: the
current file is read, the changes it received are reduced to a net effect per key (a
put whose image belongs elsewhere counts as a delete here: the row left), rows are
written to a temporary file beside it and a rename publishes it atomically (where the
store's rename is: :mod:`headwater.sinks.files.fs`; ``path`` may be a URI, which
executors reach through ``pyarrow.fs``). The
file's key-value metadata ``headwater.max_sequence`` holds the last sequence applied to
it; changes at or below it are skipped, so replaying a batch, or an older one, changes
nothing.

Column types (:func:`arrow_type`): integers ``int64`` (BIGINT UNSIGNED ``decimal(20,0)``),
DECIMAL ``decimal(p,s)`` (p <= 38, else string), FLOAT/DOUBLE ``float32``/``float64``,
DATE ``date32``, DATETIME ``timestamp[us]``, TIMESTAMP ``timestamp[us, UTC]``, TIME as
its text ``[-]HH:MM:SS[.ffffff]``, binary types ``binary``, SET as ``a,b`` text,
everything else ``string``. Zero dates become null.
"""

from __future__ import annotations

import functools
import logging
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import orjson
from crc32c import crc32c

from headwater.changes import ChangeRow
from headwater.schema.model import BINARY_TYPES, Column, TableDef, parse_column_type
from headwater.sinks.base import DdlMode, SinkCapabilities, as_change
from headwater.sinks.failfast import catch_terminal, raise_failed
from headwater.sinks.files.fs import store_for
from headwater.sinks.merge import DELETE, PUT, KeyEvent, collapse, explode, shard_of, written
from headwater.sinks.values import ValueRules, converter

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame

    from headwater.schema.ddlscope import DdlScope
    from headwater.sinks.files.configuration import MirrorConfig

__all__ = ["ParquetMirror", "arrow_type"]

log = logging.getLogger(__name__)

PartKey = tuple[str, str, str]  # database, table, partition value
_META = b"headwater.max_sequence"
_RULES = ValueRules(zero_dates="null", text_bytes=False)
#: A micro-batch with schema changes and at most this many rows is applied on the driver
#: (one Spark job per stretch between statements costs more than the rows).
DRIVER_ROWS = 50_000
#: The database of the routing key that carries a DDL change to every shard (no real
#: database name holds a NUL).
_DDL = "\x00ddl"


def arrow_type(col: Column) -> pyarrow.DataType:
    """The Arrow type of a column in the mirror (module docstring)."""
    import pyarrow as pa

    kind = col.data_type
    if kind == "bigint" and col.unsigned:
        return pa.decimal128(20, 0)
    if kind in ("tinyint", "smallint", "mediumint", "int", "bigint", "bit", "year"):
        return pa.int64()
    if kind == "decimal":
        _, args, _, _ = parse_column_type(col.column_type)
        p, s = (int(args[0]), int(args[1])) if len(args) == 2 else (10, 0)
        return pa.decimal128(p, s) if p <= 38 else pa.string()
    if kind in ("float", "double"):
        return pa.float32() if kind == "float" else pa.float64()
    if kind == "date":
        return pa.date32()
    if kind in ("datetime", "timestamp"):
        return pa.timestamp("us", tz="UTC" if kind == "timestamp" else None)
    if kind in BINARY_TYPES or col.charset == "binary":
        return pa.binary()
    return pa.string()


class ParquetMirror:
    """Sink: tables' current state as Parquet (module docstring)."""

    def __init__(self, config: MirrorConfig) -> None:
        self.config = config

    @property
    def capabilities(self) -> SinkCapabilities:
        from headwater.sinks.files.factory import MIRROR_CAPABILITIES

        return MIRROR_CAPABILITIES

    def table_path(self, database: str, table: str) -> str:
        """The directory of one table's mirror (what readers open)."""
        return store_for(self.config.path).join(self.config.path, database, table)

    # -- routing ----------------------------------------------------------------------------

    def part_of(self, change: ChangeRow, image: dict[str, Any]) -> str:
        column = self.config.partition_column
        if column is None:
            key = {c: image.get(c) for c in change.key or {}}
            return str(shard_of(change.database, change.table, key, self.config.buckets))
        value = image.get(column)
        if value is None:
            return "__HIVE_DEFAULT_PARTITION__"
        text = value if isinstance(value, str) else orjson.dumps(value).decode().strip('"')
        return urllib.parse.quote(text, safe="")

    def route(self, rows: Iterable[Any]) -> Iterator[tuple[PartKey, ChangeRow]]:
        """``(partition, change)`` for each partition a change touches; a DDL change goes
        to every shard (``(_DDL, "", shard)``), unless ``ddl: ignore`` (skipped)."""
        ignore = DdlMode(self.config.ddl) is DdlMode.IGNORE
        for raw in rows:
            change = as_change(raw)
            if change.op == "ddl":
                if not ignore:
                    for shard in range(self.config.shards):
                        yield (_DDL, "", str(shard)), change
                continue
            parts = {self.part_of(change, img) for img in (change.before, change.after) if img}
            for part in sorted(parts):
                yield (change.database, change.table, part), change

    # -- entry points -----------------------------------------------------------------------

    def write_batch(self, df: DataFrame, batch_id: int) -> None:
        """Rewrite the partitions the batch touches, one Spark task per group of them.

        Schema changes apply in order between the rows around them, as the SQL sinks'
        glue does: each task applies its partitions' changes before the batch's first
        schema change and returns that change; the driver applies it
        (:mod:`headwater.sinks.files.evolve`). The rest of the batch then goes on the
        driver (:meth:`apply_changes`) when it holds at most :data:`DRIVER_ROWS` changes,
        else through the same loop again."""
        from pyspark.sql import functions as F

        low: int | None = None
        while True:
            segment = df if low is None else df.filter(F.col("sequence") > low)
            # an error a retry cannot fix comes back as data and is raised here
            # (sinks.failfast), others fail the task (Spark retries it)
            results = raise_failed(
                segment.rdd.mapPartitions(self.route)
                .partitionBy(self.config.shards, _stable_part)
                .mapPartitions(functools.partial(catch_terminal(_apply_partitions), self))
                .collect()
            )
            stops = [r for r in results if isinstance(r, ChangeRow)]
            if not stops:
                return
            stop = min(stops, key=lambda c: c.sequence)
            for change, scope in self._schema_changes([stop], batch_id):
                self._schema_change(change, scope, batch_id)
            low = stop.sequence
            if sum(r for r in results if isinstance(r, int)) <= DRIVER_ROWS:
                rest = df.filter(F.col("sequence") > low).collect()
                self.apply_changes(rest, batch_id)
                return

    def apply_changes(self, rows: Iterable[Any], batch_id: int = 0) -> int:
        """The same without Spark, in order on the driver; returns how many partitions
        were rewritten."""
        changes = [as_change(r) for r in rows]
        done = 0
        pending: list[ChangeRow] = []
        mode = DdlMode(self.config.ddl)
        for change in sorted(changes, key=lambda c: c.sequence):
            if change.op != "ddl" or mode is DdlMode.IGNORE:
                pending.append(change)
                continue
            for _, scope in self._schema_changes([change], batch_id):
                done += _rewrite_all(self, self.route(pending))
                pending = []
                self._schema_change(change, scope, batch_id)
        return done + _rewrite_all(self, self.route(pending))

    def _schema_changes(
        self, ddl: Iterable[ChangeRow], batch_id: int
    ) -> list[tuple[ChangeRow, DdlScope]]:
        """The DDL change rows about data, in sequence order, with their scope."""
        from headwater.sinks.schemachange import scope_of

        found = []
        for change in sorted(ddl, key=lambda c: c.sequence):
            scope = scope_of(change.sql or "", change.database, self.config.schema)
            if scope.about_data:
                found.append((change, scope))
            else:
                log.info("not applied (%s, not about data) at sequence %d", scope.kind,
                         change.sequence)  # fmt: skip
        return found

    def _schema_change(self, change: ChangeRow, scope: DdlScope, batch_id: int) -> None:
        from headwater.errors import SinkError
        from headwater.sinks.files.evolve import apply_schema_change

        if DdlMode(self.config.ddl) is DdlMode.FAIL:
            raise SinkError(
                f"schema change ({scope.kind}) stopped the sink (ddl: fail); set ddl to"
                " lenient or evolve to apply schema changes, or ignore to skip them",
                table=change.table_name if change.table else change.database,
                statement=change.sql,
                batch_id=batch_id,
                resume_sequence=change.sequence,
            )
        apply_schema_change(self, change, scope)

    def rewrite(self, part: PartKey, changes: list[ChangeRow]) -> bool:
        """Apply ``changes`` to one partition file; False when all were applied already."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        database, table, value = part
        store = store_for(self.config.path)  # plain path, or pyarrow.fs for a URI
        folder = store.join(self.table_path(database, table), f"mirror_part={value}")
        path = store.join(folder, "data.parquet")
        filesystem, inner = store.arrow(path)
        rows: dict[tuple[Any, ...], dict[str, Any]] = {}
        done = -1
        exists = store.exists(path)
        if exists:
            current = pq.read_table(inner, filesystem=filesystem)
            done = int((current.schema.metadata or {}).get(_META, b"-1"))
        todo = sorted((c for c in changes if c.sequence > done), key=lambda c: c.sequence)
        if not todo:
            return False
        tdef = self._table_def(todo[-1])
        if exists:
            for record in current.to_pylist():
                rows[tuple(record.get(c) for c in tdef.primary_key)] = record
        events: list[KeyEvent] = []
        for change in todo:
            for ev in explode(change):
                if ev.kind == PUT and self.part_of(change, ev.image or {}) != value:
                    ev = KeyEvent(
                        ev.source,
                        ev.database,
                        ev.table,
                        ev.key_id,
                        ev.key,
                        DELETE,
                        ev.created,
                        None,
                        ev.sequence,
                        ev.position,
                    )
                events.append(ev)
        fields = self._fields(part, tdef, current.schema if exists else None)
        convert = {c.name: _arrow_converter(c, fields[c.name]) for c in tdef.columns}
        for effect in collapse(events):
            typed_key = tuple(convert[c](effect.key[c]) for c in tdef.primary_key)
            if effect.action == DELETE:
                rows.pop(typed_key, None)
                continue
            image = {c: convert[c](v) for c, v in written(effect).items() if c in convert}
            rows[typed_key] = {**rows.get(typed_key, {}), **image}
        schema = pa.schema(list(fields.items())).with_metadata(
            {_META: str(todo[-1].sequence).encode()}
        )
        ordered = [rows[k] for k in sorted(rows)]
        out = pa.Table.from_pylist([{n: r.get(n) for n in fields} for r in ordered], schema=schema)
        store.makedirs(folder)
        tmp = store.join(folder, f".tmp-{uuid.uuid4().hex}.parquet")
        pq.write_table(out, store.arrow(tmp)[1], filesystem=filesystem)
        store.replace(tmp, path)
        return True

    def _fields(self, part: PartKey, tdef: TableDef, have: pyarrow.Schema | None) -> dict[str, Any]:
        """The file's columns: ``tdef``'s with their Arrow types; under ``lenient`` a
        column the file has keeps its type (a narrowing is not applied) and columns
        ``tdef`` lacks (dropped by the source) stay. A new file under ``lenient`` takes
        them from another file of the table, so the table's files agree."""
        fields = {c.name: arrow_type(c) for c in tdef.columns}
        if DdlMode(self.config.ddl) is not DdlMode.LENIENT:
            return fields
        if have is None:
            import pyarrow.parquet as pq

            from headwater.sinks.files.evolve import partition_files

            store = store_for(self.config.path)
            siblings = partition_files(store, self.table_path(part[0], part[1]))
            if siblings:
                filesystem, inner = store.arrow(siblings[0][1])
                have = pq.read_schema(inner, filesystem=filesystem)
        if have is None:
            return fields
        for f in have:
            fields[f.name] = f.type
        return fields

    def _table_def(self, change: ChangeRow) -> TableDef:
        from headwater.errors import SinkError

        tdef = self.config.schema.table_at(change.database, change.table, change.position)
        if tdef is None or not tdef.primary_key:
            raise SinkError(
                "no table definition with a primary key",
                table=change.table_name,
                resume_sequence=change.sequence,
            )
        return tdef


def _arrow_converter(col: Column, stored: pyarrow.DataType | None = None) -> Any:
    """Image value -> the Python value of ``col``'s Arrow type, cast to ``stored`` when
    the file keeps another type for it (``lenient``)."""
    import pyarrow as pa

    base = converter(col, _RULES)
    if col.data_type == "time":
        base = _same
    elif col.data_type == "bigint" and col.unsigned:
        base = _decimal
    elif col.data_type == "decimal" and arrow_type(col).equals(_string()):
        base = _same
    own = arrow_type(col)
    if stored is None or stored.equals(own):
        return base

    def cast(value: Any) -> Any:
        from headwater.errors import SinkError

        v = base(value)
        try:
            return None if v is None else pa.scalar(v, own).cast(stored).as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise SinkError(
                f"column {col.name!r}: a {col.column_type} value does not fit the files'"
                f" {stored} (ddl: lenient applies only type changes that widen); set ddl to"
                " evolve to retype the column"
            ) from None

    return cast


def _same(value: Any) -> Any:
    return value


def _decimal(value: Any) -> Any:
    import decimal

    return None if value is None else decimal.Decimal(value)


@functools.cache
def _string() -> Any:
    import pyarrow as pa

    return pa.string()


def _stable_part(part: PartKey) -> int:
    if part[0] == _DDL:
        return int(part[2])  # the shard itself (route sends DDL to every shard)
    return int(crc32c("\x00".join(part).encode("utf-8", "surrogateescape")))


def _apply_partitions(
    mirror: ParquetMirror, pairs: Iterable[tuple[PartKey, ChangeRow]]
) -> Iterator[int | ChangeRow]:
    """One task: its partitions' changes up to the batch's first schema change (every
    task sees every DDL change), then that change for the driver; also how many
    changes the task holds beyond it (ints: the driver sums them)."""
    groups: dict[PartKey, list[ChangeRow]] = {}
    stop: ChangeRow | None = None
    for part, change in pairs:
        if part[0] != _DDL:
            groups.setdefault(part, []).append(change)
        elif (stop is None or change.sequence < stop.sequence) and mirror._schema_changes(
            [change], 0
        ):
            stop = change
    limit = stop.sequence if stop is not None else None
    later = 0
    for part, changes in groups.items():
        if limit is not None:
            later += sum(1 for c in changes if c.sequence > limit)
            changes = [c for c in changes if c.sequence < limit]
        if changes:
            mirror.rewrite(part, changes)
    yield later
    if stop is not None:
        yield stop


def _rewrite_all(mirror: ParquetMirror, pairs: Iterable[tuple[PartKey, ChangeRow]]) -> int:
    """Apply changes routed by :meth:`ParquetMirror.route` that hold no schema change;
    how many partitions were rewritten."""
    groups: dict[PartKey, list[ChangeRow]] = {}
    for part, change in pairs:
        if part[0] != _DDL:
            groups.setdefault(part, []).append(change)
    return sum(mirror.rewrite(part, changes) for part, changes in groups.items())

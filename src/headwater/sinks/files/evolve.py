"""Schema changes on the Parquet mirror: ``ddl: evolve | lenient`` as file operations.

A DDL change row becomes steps (:func:`headwater.sinks.schemachange.plan_schema_change`,
the SQL sinks' planner: the same modes mean the same thing), and each step becomes an
operation on the table's partition files (:mod:`headwater.sinks.files.mirror`):

==================  ==============================================================
step                Parquet
==================  ==============================================================
create_table        nothing (files appear with the table's first rows)
add_column          nothing: partitions rewritten later carry the column, the others
                    lack it and readers that merge schemas show NULL (schema merge)
drop_column,        every file of the table is rewritten without the column, with the
rename_column,      column renamed, with the column cast to its new Arrow type
modify_column       (:func:`~headwater.sinks.files.mirror.arrow_type`; a change that
                    keeps the Arrow type rewrites nothing)
primary_key         the table is regrouped into the partitions of the new key
truncate,           the table's files are deleted (its directory too when empty)
drop_table,
drop_database
rename_table        the rows move to the new table's partitions (regrouped: the bucket
                    hash covers the table's name)
==================  ==============================================================

``lenient`` plans no ``drop_*`` step: a dropped column stays in the files (rows written
later leave it NULL) and a dropped table stays; a narrowing type change keeps the files'
type (later values are cast to it). Table-level operations run on the driver with pyarrow,
one table at a time (a rename or a key change holds that table in memory).

Idempotence: every file rewritten or moved for a statement is stamped with the statement's
sequence (``headwater.max_sequence``), and an operation only touches files stamped below
it. A replayed batch first re-applies its earlier row changes (files deleted by the
statement come back with those rows only) and then the statement again, which settles
them: the result equals one clean run.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import logging
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from headwater.errors import SinkError
from headwater.schema.model import TableDef
from headwater.sinks.base import DdlMode
from headwater.sinks.files.fs import FileStore, store_for
from headwater.sinks.merge import shard_of
from headwater.sinks.schemachange import plan_schema_change, position_before

if TYPE_CHECKING:
    import pyarrow

    from headwater.changes import ChangeRow
    from headwater.schema.ddlscope import DdlScope
    from headwater.sinks.files.mirror import ParquetMirror

__all__ = ["apply_schema_change", "file_sequence", "partition_files"]

log = logging.getLogger(__name__)

META = b"headwater.max_sequence"
DATA = "data.parquet"


def file_sequence(store: FileStore, path: str) -> int:
    """The last sequence applied to a partition file (its ``headwater.max_sequence``)."""
    import pyarrow.parquet as pq

    filesystem, inner = store.arrow(path)
    return int((pq.read_schema(inner, filesystem=filesystem).metadata or {}).get(META, b"-1"))


def partition_files(store: FileStore, table_dir: str) -> list[tuple[str, str]]:
    """``(partition value, file)`` of every partition file of a table directory."""
    found = []
    for path in sorted(store.glob(store.join(table_dir, "mirror_part=*", DATA))):
        folder = path.rstrip("/").rsplit("/", 2)[-2]
        found.append((folder.split("=", 1)[1], path))
    return found


@dataclass
class _Change:
    """One table's column changes, collected from the steps of one statement."""

    renames: dict[str, str] = field(default_factory=dict)
    drops: set[str] = field(default_factory=set)
    modified: set[str] = field(default_factory=set)
    regroup: bool = False


def apply_schema_change(mirror: ParquetMirror, change: ChangeRow, scope: DdlScope) -> None:
    """Bring the mirror along with one DDL change row (module docstring); ``fail`` and
    ``ignore`` are the caller's."""
    mode = DdlMode(mirror.config.ddl)
    schema = mirror.config.schema
    store = store_for(mirror.config.path)
    before_at, after_at = position_before(change.position), change.position
    seq = change.sequence

    def before(db: str, t: str) -> TableDef | None:
        return schema.table_at(db, t, before_at)

    def after(db: str, t: str) -> TableDef | None:
        return schema.table_at(db, t, after_at)

    def target(db: str, t: str) -> dict[str, tuple[str, bool]] | None:
        return _columns(store, mirror.table_path(db, t), seq)

    steps = plan_schema_change(
        mode, scope, change.sql or "", before, after, target, runs_source_sql=False
    )
    # Column steps first, by table: an ALTER TABLE ... RENAME TO with column changes
    # gives the rename, then the columns' steps under the new name; one rewrite does all.
    changes: dict[tuple[str, str], _Change] = {}
    for step in steps:
        if step.op in ("drop_column", "rename_column", "modify_column", "primary_key"):
            found = changes.setdefault((step.database, step.table), _Change())
            if step.op == "drop_column":
                found.drops.add(step.name)
            elif step.op == "rename_column":
                found.renames[step.name] = step.new_name
            elif step.op == "modify_column" and step.column is not None:
                found.modified.add(step.column.name)
            else:
                found.regroup = True
    for step in steps:
        log.info("schema change at sequence %d: %s %s.%s", seq, step.op, step.database,
                 step.table)  # fmt: skip
        if step.op == "drop_database":
            pattern = store.join(mirror.config.path, step.database, "*", "mirror_part=*", DATA)
            for table_dir in sorted({p.rstrip("/").rsplit("/", 2)[0] for p in store.glob(pattern)}):
                _delete(store, table_dir, seq)
        elif step.op in ("drop_table", "truncate"):
            _delete(store, mirror.table_path(step.database, step.table), seq)
        elif step.op == "rename_table":
            dest = (step.new_database, step.new_table)
            tdef = after(*dest)
            moved = changes.pop(dest, _Change())
            moved.regroup = True
            if tdef is not None:
                _rewrite(mirror, store, change, (step.database, step.table), dest, tdef, moved)
    for key, found in changes.items():
        tdef = after(*key)
        if tdef is not None:
            _rewrite(mirror, store, change, key, key, tdef, found)


def _columns(store: FileStore, table_dir: str, seq: int) -> dict[str, tuple[str, bool]] | None:
    """The columns of a table's files not yet at ``seq`` (None: no such file)."""
    import pyarrow.parquet as pq

    columns: dict[str, tuple[str, bool]] = {}
    found = False
    for _, path in partition_files(store, table_dir):
        filesystem, inner = store.arrow(path)
        file_schema = pq.read_schema(inner, filesystem=filesystem)
        if int((file_schema.metadata or {}).get(META, b"-1")) >= seq:
            continue
        found = True
        for f in file_schema:
            columns.setdefault(f.name, (str(f.type), True))
    return columns if found else None


def _delete(store: FileStore, table_dir: str, seq: int) -> None:
    """Delete a table's files stamped below ``seq``; then empty directories."""
    for _, path in partition_files(store, table_dir):
        if file_sequence(store, path) < seq:
            store.remove(path)
            _prune(store, _parent(path))
    _prune(store, table_dir)


def _parent(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[0]


def _prune(store: FileStore, folder: str) -> None:
    """Remove ``folder`` when no file below it is data (temporary files start with a dot;
    stores without directories list files only)."""
    if store.exists(folder) and all(n.startswith(".") for _, n in store.files(folder)):
        store.rmtree(folder)


def _rewrite(
    mirror: ParquetMirror,
    store: FileStore,
    change: ChangeRow,
    source: tuple[str, str],
    dest: tuple[str, str],
    tdef: TableDef,
    found: _Change,
) -> None:
    """Rewrite the files of ``source`` stamped below the statement into ``dest`` with the
    columns of ``tdef`` (renamed, dropped, cast), regrouped into ``dest``'s partitions
    when ``found.regroup``, and stamp them."""
    import pyarrow as pa

    seq = change.sequence
    lenient = DdlMode(mirror.config.ddl) is DdlMode.LENIENT
    src_dir, dst_dir = mirror.table_path(*source), mirror.table_path(*dest)
    todo = [(v, p) for v, p in partition_files(store, src_dir) if file_sequence(store, p) < seq]
    if not todo:
        return
    tables = [(v, p, _reshape(_read(store, p), tdef, found, lenient, change)) for v, p in todo]
    if found.regroup:
        whole = pa.concat_tables([t for _, _, t in tables], promote_options="permissive")
        groups = _regroup(mirror, dest, tdef, whole)
    else:
        groups = {value: table for value, _, table in tables}
    for value, table in groups.items():
        path = store.join(dst_dir, f"mirror_part={value}", DATA)
        if src_dir != dst_dir and store.exists(path) and file_sequence(store, path) >= seq:
            continue  # moved already (a replay): the rows there are newer
        _write(store, path, table, seq)
    # (by partition value: a store's glob may spell paths otherwise than its join)
    for value, path, _ in tables:
        if src_dir != dst_dir or value not in groups:
            store.remove(path)
            _prune(store, _parent(path))
    _prune(store, src_dir)


def _read(store: FileStore, path: str) -> pyarrow.Table:
    import pyarrow.parquet as pq

    filesystem, inner = store.arrow(path)
    return pq.read_table(inner, filesystem=filesystem)


def _reshape(
    table: pyarrow.Table, tdef: TableDef, found: _Change, lenient: bool, change: ChangeRow
) -> pyarrow.Table:
    """``table`` with ``tdef``'s columns: renamed, dropped, cast to their new Arrow type
    (``found.modified``), missing ones NULL; columns ``tdef`` lacks stay under lenient."""
    import pyarrow as pa

    from headwater.sinks.files.mirror import arrow_type

    where = f"{tdef.database}.{tdef.table}"
    table = table.rename_columns([found.renames.get(n, n) for n in table.column_names])
    present = set(table.column_names)
    arrays: list[Any] = []
    fields: list[Any] = []
    for col in tdef.columns:
        wanted = arrow_type(col)
        if col.name not in present:
            arrays.append(pa.nulls(table.num_rows, wanted))
            fields.append(pa.field(col.name, wanted))
            continue
        values = table.column(col.name)
        if col.name in found.modified and not values.type.equals(wanted):
            values = _cast(values, wanted, col.name, change, where)
        arrays.append(values)
        fields.append(pa.field(col.name, values.type))
    names = {c.name for c in tdef.columns}
    for name in table.column_names:
        if name not in names and name not in found.drops and lenient:
            arrays.append(table.column(name))
            fields.append(table.schema.field(name))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _cast(values: Any, wanted: Any, name: str, change: ChangeRow, where: str) -> Any:
    """``values`` as ``wanted``: Arrow's cast, else through their text (Arrow refuses
    int64 to a decimal of less than 19 digits whatever the values)."""
    import pyarrow as pa

    try:
        return values.cast(wanted)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    try:
        return values.cast(pa.string()).cast(wanted)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SinkError(
            f"column {name!r}: stored values do not convert to {wanted} ({e})",
            table=where,
            statement=change.sql,
            resume_sequence=change.sequence,
        ) from None


def _regroup(
    mirror: ParquetMirror, dest: tuple[str, str], tdef: TableDef, table: pyarrow.Table
) -> dict[str, pyarrow.Table]:
    """``table``'s rows by their partition in ``dest`` (:meth:`ParquetMirror.part_of`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [*tdef.primary_key, *filter(None, [mirror.config.partition_column])]
    values = [_part(mirror, dest, tdef, row) for row in _rows(table, names)]
    groups: dict[str, pyarrow.Table] = {}
    parts = pa.array(values, pa.string())
    for value in sorted(set(values)):
        groups[value] = table.filter(pc.equal(parts, value))
    return groups


def _rows(table: pyarrow.Table, names: list[str]) -> list[dict[str, Any]]:
    """The values of ``names`` (those the table has) per row."""
    present = [n for n in names if n in table.column_names]
    if not present:
        return [{} for _ in range(table.num_rows)]
    rows: list[dict[str, Any]] = table.select(present).to_pylist()
    return rows


def _part(mirror: ParquetMirror, dest: tuple[str, str], tdef: TableDef, row: dict[str, Any]) -> str:
    """The partition of a stored row in ``dest``, as :meth:`ParquetMirror.part_of` gives it
    for the row's image (values turned back to their image form)."""
    import urllib.parse

    column = mirror.config.partition_column
    if column is None:
        key = {c: _image_value(row.get(c)) for c in tdef.primary_key}
        return str(shard_of(dest[0], dest[1], key, mirror.config.buckets))
    value = _image_value(row.get(column))
    if value is None:
        return "__HIVE_DEFAULT_PARTITION__"
    text = value if isinstance(value, str) else orjson.dumps(value).decode().strip('"')
    return urllib.parse.quote(text, safe="")


def _image_value(value: Any) -> Any:
    """A stored value in the form change-row images carry it, so that it hashes to the
    bucket its changes are routed to (``changes.schema.image_json``: orjson, whose
    datetimes are ``isoformat()``'s, ``2024-02-29T13:01:02.500000`` and ``+00:00`` for
    TIMESTAMP; DECIMAL as text, binary as ``{"base64": ...}``: docs/formats.md, Values)."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _write(store: FileStore, path: str, table: pyarrow.Table, seq: int) -> None:
    import pyarrow.parquet as pq

    folder = _parent(path)
    store.makedirs(folder)
    tmp = store.join(folder, f".tmp-{uuid.uuid4().hex}.parquet")
    filesystem, inner = store.arrow(tmp)
    stamped = table.replace_schema_metadata({META: str(seq).encode()})
    pq.write_table(stamped, inner, filesystem=filesystem)
    store.replace(tmp, path)

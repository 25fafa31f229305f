"""The statements of a shard transaction: net effects grouped, converted and run in batches.

:func:`plan_writes` turns the net effects a transaction applies into :class:`Write` groups,
one per table and statement shape (the table's deletes, or its upserts of one column set),
with their values converted for the driver a column at a time
(:func:`~headwater.sinks.values.column_converter`). :func:`run_write` runs one group as
batched statements of the dialect.

Invariants: effects keep their order within a group, so the values of row ``i`` belong to
``effects[i]``; a delete names the key's columns in key order, an upsert the image's
columns in table order. A group of at least the dialect's ``bulk_rows`` rows is written
set-based instead (PostgreSQL: ``COPY`` into a temporary table, then one ``INSERT ...
SELECT ... ON CONFLICT`` or ``DELETE ... USING``), in the same transaction. Every batched
statement, and every bulk write, runs under the savepoint ``hw_batch``: when
the database refuses it for good (the dialect's ``retryable`` says False), the transaction
goes back to that savepoint and the batch is re-run a row at a time, each row under
``hw_row`` and rolled back, to name the first row that fails on its own; the caller then
rolls back the whole transaction. Any other error propagates unchanged, for the caller to
retry or report.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, KeysView, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, NamedTuple, overload

import orjson

from headwater.errors import SinkError
from headwater.schema.model import TableDef
from headwater.sinks.base import SchemaSource, map_database
from headwater.sinks.dialect import SqlDialect, SqlSinkConfig, describe
from headwater.sinks.merge import (
    DELETE,
    ChangeColumns,
    ColumnEffect,
    NetEffect,
    column_effect,
    written,
)
from headwater.sinks.values import ValueRules, column_converter

__all__ = ["ColumnEffects", "Shape", "Write", "plan_column_writes", "plan_writes", "run_write"]


class Shape(NamedTuple):
    """How the net effects of one table definition and column set are written: the
    statement's columns (the key's for a delete, the image's in table order for an upsert)
    and a column converter for each."""

    delete: bool
    columns: tuple[str, ...]
    convert: list[Callable[[list[Any]], list[Any]]]


class ColumnEffects(Sequence[NetEffect]):
    """The net effects of a :class:`Write` planned on columns (:func:`plan_column_writes`):
    kept as :data:`~headwater.sinks.merge.ColumnEffect` tuples, made
    :class:`~headwater.sinks.merge.NetEffect` values only when asked for one (an error
    names its key)."""

    __slots__ = ("cols", "rows")

    def __init__(self, cols: ChangeColumns) -> None:
        self.cols = cols
        self.rows: list[ColumnEffect] = []

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> NetEffect: ...

    @overload
    def __getitem__(self, i: slice) -> list[NetEffect]: ...

    def __getitem__(self, i: int | slice) -> NetEffect | list[NetEffect]:
        if isinstance(i, slice):
            return [column_effect(self.cols, e) for e in self.rows[i]]
        return column_effect(self.cols, self.rows[i])

    def append(self, effect: ColumnEffect) -> None:
        self.rows.append(effect)


@dataclass(slots=True)
class Write:
    """The net effects of one statement shape: a table's deletes, or its upserts of one
    column set. ``sources[i]`` is effect ``i``'s key (a delete) or image (an upsert);
    ``values[j][i]`` is column ``j`` of effect ``i``, converted for the driver a column at
    a time (:func:`~headwater.sinks.values.column_converter`)."""

    table: str  # target reference, quoted
    name: str  # source db.table, for messages
    key: tuple[str, ...]
    columns: tuple[str, ...]
    delete: bool
    effects: list[NetEffect] | ColumnEffects = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)
    #: ``(index of the first effect, shape)``: a new run starts where the table
    #: definition (the converters) changes, so effects keep their order.
    runs: list[tuple[int, Shape]] = field(default_factory=list)
    values: list[list[Any]] = field(default_factory=list)

    def row(self, i: int) -> list[Any]:
        return [column[i] for column in self.values]

    def convert(self) -> None:
        """Fill :attr:`values` (raises what a converter raises)."""
        self.values = [[] for _ in self.columns]
        bounds = [start for start, _ in self.runs[1:]] + [len(self.sources)]
        for (start, shape), stop in zip(self.runs, bounds, strict=True):
            sources = self.sources[start:stop]
            for j, name in enumerate(shape.columns):
                self.values[j].extend(shape.convert[j](list(map(itemgetter(name), sources))))


class _Planner:
    """What both planners share: the definition and statement shape of an effect, and the
    :class:`Write` it goes to (see :func:`plan_writes`)."""

    def __init__(
        self,
        config: SqlSinkConfig,
        dialect: SqlDialect,
        batch_id: int,
        shard: int,
        target_has: Callable[[str, str], frozenset[str] | None] | None,
        effects: Callable[[], list[NetEffect] | ColumnEffects],
    ) -> None:
        self.config, self.dialect, self.batch_id, self.shard = config, dialect, batch_id, shard
        self.target_has = target_has
        self.effects = effects
        self.rules = ValueRules(config.zero_dates, dialect.text_bytes)
        self.groups: dict[tuple[str, str, bool, tuple[str, ...]], Write] = {}
        # Rows of one binlog event share a position object: look each definition up once
        # per position (the effects hold the positions, so ids stay unique meanwhile), and
        # work out each statement shape (columns, converters) once.
        self.tdefs: dict[tuple[str, str, int], TableDef] = {}
        self.shapes: dict[tuple[int, bool, tuple[str, ...]], Shape] = {}
        # Equal definitions as one object, so shapes (keyed by its id) are shared: a schema
        # may build a new object per lookup (the transforms' view does), and single-row
        # transactions give every effect a position of its own.
        self.same: dict[TableDef, TableDef] = {}
        # The same object again (a schema returns one per interval between schema
        # changes): no hash of the whole definition. Holds the object: ids stay unique.
        self.by_id: dict[int, tuple[TableDef, TableDef]] = {}

    def shape_of(self, effect: NetEffect) -> Shape:
        at = (effect.database, effect.table, id(effect.position))
        tdef = self.tdefs.get(at)
        if tdef is None:
            found = _table_def(self.config.schema, effect, self.batch_id, self.shard)
            tdef = self.tdefs[at] = self.canonical(found)
        delete = effect.action == DELETE
        names = tuple(written(effect))
        return self.shape_for(tdef, delete, names, lambda: effect)

    def canonical(self, found: TableDef) -> TableDef:
        """``found``, or the equal definition seen first (shapes are keyed by its id)."""
        seen = self.by_id.get(id(found))
        if seen is None or seen[0] is not found:
            seen = self.by_id[id(found)] = (found, self.same.setdefault(found, found))
        return seen[1]

    def shape_for(
        self,
        tdef: TableDef,
        delete: bool,
        names: tuple[str, ...],
        effect: Callable[[], NetEffect],
    ) -> Shape:
        """The shape of an effect of ``tdef`` (canonical) writing ``names``; ``effect()``
        gives the effect itself, asked only for a shape not seen yet (and its errors)."""
        shape = self.shapes.get((id(tdef), delete, names))
        if shape is None:
            one = effect()
            has = None
            if self.target_has is not None:
                has = self.target_has(one.database, one.table)
            shape = self.shapes[(id(tdef), delete, names)] = _shape(
                one, tdef, delete, names, self.rules, self.batch_id, self.shard, has
            )
        return shape

    def write_for(self, effect: NetEffect) -> Write:
        """The write ``effect`` goes to, a new run started in it when its shape differs."""
        return self.write_of(effect.database, effect.table, self.shape_of(effect), effect.key)

    def write_of(
        self, database: str, table: str, shape: Shape, key: dict[str, Any] | Callable[[], Any]
    ) -> Write:
        """The write of ``shape`` in ``database.table`` (``key``: an effect's key, or a
        function giving it, asked for a new write only), a new run started in it when
        its shape differs from its last one's."""
        gkey = (database, table, shape.delete, shape.columns)
        write = self.groups.get(gkey)
        if write is None:
            target = map_database(self.config.database_map, database)
            write = self.groups[gkey] = Write(
                self.dialect.table_ref(target, table),
                f"{database}.{table}",
                tuple(key() if callable(key) else key),
                shape.columns,
                shape.delete,
                self.effects(),
            )
        if not write.runs or write.runs[-1][1] is not shape:
            write.runs.append((len(write.sources), shape))
        return write

    def converted(self, effects: Callable[[], Iterable[NetEffect]]) -> list[Write]:
        """The writes, values converted (:class:`SinkError` naming the first effect of
        ``effects()`` with a value its converter refuses)."""
        try:
            for write in self.groups.values():
                write.convert()
        except (ValueError, TypeError, ArithmeticError):
            raise _conversion_error(effects(), self.shape_of, self.batch_id, self.shard) from None
        return list(self.groups.values())


def plan_writes(
    effects: list[NetEffect],
    config: SqlSinkConfig,
    dialect: SqlDialect,
    batch_id: int,
    shard: int,
    target_has: Callable[[str, str], frozenset[str] | None] | None = None,
) -> list[Write]:
    """The statements that write ``effects``: one :class:`Write` per table and statement
    shape, in the order of their first effect, values converted (raises :class:`SinkError`
    naming the first effect that cannot be written).

    ``target_has(database, table)`` (``ddl: ignore``): the columns the target table has
    (None: unknown); an upsert then writes only those, the source's other columns are
    left out."""
    planner = _Planner(config, dialect, batch_id, shard, target_has, list)
    # Consecutive effects mostly come from one event and have one column set: they
    # go where the previous one went without the lookups.
    write: Write | None = None
    previous: NetEffect | None = None
    previous_names: KeysView[str] | None = None
    for effect in effects:
        source = written(effect)
        names = source.keys()
        if (
            write is None
            or previous is None
            or effect.position is not previous.position
            or effect.action != previous.action
            or effect.table != previous.table
            or effect.database != previous.database
            or names != previous_names
        ):
            write = planner.write_for(effect)
        write.effects.append(effect)  # type: ignore[arg-type]  # a list here
        write.sources.append(source)
        previous, previous_names = effect, names
    return planner.converted(lambda: effects)


def plan_column_writes(
    cols: ChangeColumns,
    effects: list[ColumnEffect],
    config: SqlSinkConfig,
    dialect: SqlDialect,
    batch_id: int,
    shard: int,
    target_has: Callable[[str, str], frozenset[str] | None] | None = None,
    definitions: Mapping[int, TableDef | None] | None = None,
) -> list[Write]:
    """:func:`plan_writes` of the net effects of
    :func:`~headwater.sinks.merge.collapse_column_rows` on ``cols``, without a
    :class:`NetEffect` per effect: an upsert's values come from its image as they are,
    a delete's key is parsed from its text; effects are made :class:`NetEffect` values
    only where a new statement shape may start and for errors.

    ``definitions`` (:func:`~headwater.sinks.definitions.row_definitions`): the table
    definition at each effect's last row, so that a new shape is looked for only where
    the definition object, action, table or column set changes, not at every position
    (single-row transactions give each effect its own). Without it, at every change of
    position."""
    if definitions is None:
        return _plan_by_position(cols, effects, config, dialect, batch_id, shard, target_has)
    planner = _Planner(config, dialect, batch_id, shard, target_has, lambda: ColumnEffects(cols))
    keys, db, tbl = cols.key, cols.database, cols.table
    loads = orjson.loads
    write: Write | None = None
    last_row = -1
    action_was = ""
    names_were: KeysView[str] | None = None
    found_was: TableDef | None = None
    add_key = False
    for effect in effects:
        _, last, action, image = effect
        source: dict[str, Any] = loads(keys[last]) if action == DELETE else image or {}  # type: ignore[arg-type]
        names = source.keys()
        found = definitions[last]
        new = (
            write is None
            or found is not found_was
            or action != action_was
            or names != names_were
            or tbl[last] != tbl[last_row]
            or db[last] != db[last_row]
        )
        if new:  # an upsert of an image without the key (:func:`~merge.written`)
            key_names = () if found is None or action == DELETE else found.primary_key
            add_key = any(k not in names for k in key_names)
        if add_key:
            source = {**loads(keys[last]), **source}  # type: ignore[arg-type]  # keyed rows
        if new:
            if found is None:  # the error names the effect
                write = planner.write_for(column_effect(cols, effect))
            else:
                shape = planner.shape_for(
                    planner.canonical(found),
                    action == DELETE,
                    tuple(source),
                    functools.partial(column_effect, cols, effect),
                )
                key = functools.partial(loads, keys[last])  # type: ignore[arg-type]  # keyed rows
                write = planner.write_of(db[last], tbl[last], shape, key)
        assert write is not None  # (made above for the first effect: ``new``)
        write.effects.append(effect)  # type: ignore[arg-type]  # ColumnEffects here
        write.sources.append(source)
        last_row, action_was, names_were, found_was = last, action, names, found
    return planner.converted(lambda: (column_effect(cols, e) for e in effects))


def _plan_by_position(
    cols: ChangeColumns,
    effects: list[ColumnEffect],
    config: SqlSinkConfig,
    dialect: SqlDialect,
    batch_id: int,
    shard: int,
    target_has: Callable[[str, str], frozenset[str] | None] | None,
) -> list[Write]:
    """:func:`plan_column_writes` without definitions: a definition looked up at each
    change of position."""
    planner = _Planner(config, dialect, batch_id, shard, target_has, lambda: ColumnEffects(cols))
    keys, db, tbl = cols.key, cols.database, cols.table
    cid, fnum, off, ev = cols.change_id, cols.file_num, cols.offset, cols.event_index
    loads = orjson.loads
    write: Write | None = None
    last_row = -1
    action_was = ""
    names_were: KeysView[str] | None = None
    add_key = False
    for effect in effects:
        _, last, action, image = effect
        source: dict[str, Any] = loads(keys[last]) if action == DELETE else image or {}  # type: ignore[arg-type]
        names = source.keys()
        if (
            write is None
            or off[last] != off[last_row]
            or action != action_was
            or names != names_were
            or ev[last] != ev[last_row]
            or tbl[last] != tbl[last_row]
            or db[last] != db[last_row]
            or fnum[last] != fnum[last_row]
            or cid[last] != cid[last_row]
        ):
            net = column_effect(cols, effect)
            # an upsert of an image without the key (:func:`~merge.written`)
            add_key = action != DELETE and written(net) is not (image or {})
            write = planner.write_for(net)
        if add_key:
            source = {**loads(keys[last]), **source}  # type: ignore[arg-type]  # keyed rows
        write.effects.append(effect)  # type: ignore[arg-type]  # ColumnEffects here
        write.sources.append(source)
        last_row, action_was, names_were = last, action, names
    return planner.converted(lambda: (column_effect(cols, e) for e in effects))


def _shape(
    effect: NetEffect,
    tdef: TableDef,
    delete: bool,
    names: tuple[str, ...],
    rules: ValueRules,
    batch_id: int,
    shard: int,
    has: frozenset[str] | None = None,
) -> Shape:
    # A delete names the key's columns in key order (its statement's ``(k1, k2) IN``
    # lists them so); an upsert writes the image's columns in table order (those the
    # target has, under ``ddl: ignore``).
    known = {c.name for c in tdef.columns}
    columns = names if delete else tuple(c.name for c in tdef.columns if c.name in names)
    if has is not None and not delete:
        columns = tuple(c for c in columns if c in has)
    unknown = set(names) - known
    if unknown:
        raise _effect_error(
            f"columns {sorted(unknown)} are not in the table definition", effect, batch_id, shard
        )
    convert = [column_converter(tdef.column(c), rules) for c in columns]  # type: ignore[arg-type]
    return Shape(delete, columns, convert)


def _effect_error(message: str, effect: NetEffect, batch_id: int, shard: int) -> SinkError:
    """A SinkError naming the effect's table and key, resuming at its first change."""
    return SinkError(
        message,
        table=effect.table_name,
        key=effect.key,
        shard=shard,
        batch_id=batch_id,
        resume_sequence=effect.first_sequence,
    )


def _table_def(schema: SchemaSource, effect: NetEffect, batch_id: int, shard: int) -> TableDef:
    tdef = schema.table_at(effect.database, effect.table, effect.position)
    if tdef is None:
        raise _effect_error(
            f"no table definition at position {effect.position}", effect, batch_id, shard
        )
    return tdef


def _conversion_error(
    effects: Iterable[NetEffect], shape_of: Callable[[NetEffect], Shape], batch_id: int, shard: int
) -> SinkError:
    """The error of the first effect with a value its converter refuses (a whole column
    failed to convert: find the row, value by value)."""
    for effect in effects:
        shape = shape_of(effect)
        source = written(effect)
        for name, convert in zip(shape.columns, shape.convert, strict=True):
            try:
                convert([source[name]])
            except (ValueError, TypeError, ArithmeticError) as exc:
                return _effect_error(f"cannot convert a value: {exc}", effect, batch_id, shard)
    raise AssertionError("a column failed to convert, but none of its values does")


def run_write(
    cur: Any, write: Write, dialect: SqlDialect, batch_rows: int, batch_id: int, shard: int
) -> int:
    """Run ``write`` as statements of at most ``batch_rows`` rows (fewer when the dialect
    binds parameters and the target caps them), or, from the dialect's ``bulk_rows``
    rows on, as one :meth:`~headwater.sinks.dialect.SqlDialect.bulk_write`; each under a
    savepoint so that a failing one can be re-run row by row to name the row; the
    number of effects written."""
    count = len(write.effects)
    if dialect.bulk_rows and count >= dialect.bulk_rows:
        cur.execute("SAVEPOINT hw_batch")
        try:
            dialect.bulk_write(
                cur, write.table, write.columns, write.key, write.delete, write.values
            )
        except Exception as exc:
            if dialect.retryable(exc) is not False:
                raise
            cur.execute("ROLLBACK TO SAVEPOINT hw_batch")
            raise _locate(cur, write, dialect, range(count), exc, batch_id, shard) from exc
        return count
    width = len(write.columns)
    size = max(1, min(batch_rows, dialect.capabilities.max_params // width))
    for start in range(0, count, size):
        rows = range(start, min(count, start + size))
        chunk = [column[start : rows.stop] for column in write.values]
        rendered = dialect.render_columns(cur, chunk)
        params: list[Any] | None = None
        if rendered is None:
            sql = _statement(dialect, write, len(rows))
            params = [v for row in zip(*chunk, strict=True) for v in row]
        elif write.delete:
            sql = dialect.delete_rendered(write.table, write.columns, rendered)
        else:
            sql = dialect.upsert_rendered(write.table, write.columns, write.key, rendered)
        cur.execute("SAVEPOINT hw_batch")
        try:
            cur.execute(sql, params)
        except Exception as exc:
            if dialect.retryable(exc) is not False:
                raise
            cur.execute("ROLLBACK TO SAVEPOINT hw_batch")
            raise _locate(cur, write, dialect, rows, exc, batch_id, shard) from exc
    return count


def _statement(dialect: SqlDialect, write: Write, n: int) -> str:
    if write.delete:
        return dialect.delete_sql(write.table, write.columns, n)
    return dialect.upsert_sql(write.table, write.columns, write.key, n)


def _locate(
    cur: Any,
    write: Write,
    dialect: SqlDialect,
    rows: range,
    exc: BaseException,
    batch_id: int,
    shard: int,
) -> SinkError:
    """The error of the first row of a failed batch that fails on its own."""
    one = _statement(dialect, write, 1)
    culprit, cause = write.effects[rows[0]], exc
    for i in rows:
        cur.execute("SAVEPOINT hw_row")
        try:
            cur.execute(one, write.row(i))
        except Exception as row_exc:
            if dialect.retryable(row_exc) is not False:
                raise
            culprit, cause = write.effects[i], row_exc
            break
        finally:
            cur.execute("ROLLBACK TO SAVEPOINT hw_row")
    return SinkError(
        describe(cause),
        table=write.name,
        key=culprit.key,
        statement=one,
        shard=shard,
        batch_id=batch_id,
        resume_sequence=min(write.effects[i].first_sequence for i in rows),
    )

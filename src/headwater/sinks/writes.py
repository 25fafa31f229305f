"""The statements of a shard transaction: net effects grouped, converted and run in batches.

:func:`plan_writes` turns the net effects a transaction applies into :class:`Write` groups,
one per table and statement shape (the table's deletes, or its upserts of one column set),
with their values converted for the driver a column at a time
(:func:`~headwater.sinks.values.column_converter`). :func:`run_write` runs one group as
batched statements of the dialect.

Invariants: effects keep their order within a group, so the values of row ``i`` belong to
``effects[i]``; a delete names the key's columns in key order, an upsert the image's
columns in table order. Every batched statement runs under the savepoint ``hw_batch``: when
the database refuses it for good (the dialect's ``retryable`` says False), the transaction
goes back to that savepoint and the batch is re-run a row at a time, each row under
``hw_row`` and rolled back, to name the first row that fails on its own; the caller then
rolls back the whole transaction. Any other error propagates unchanged, for the caller to
retry or report.
"""

from __future__ import annotations

from collections.abc import Callable, KeysView
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, NamedTuple

from headwater.errors import SinkError
from headwater.schema.model import TableDef
from headwater.sinks.base import SchemaSource, map_database
from headwater.sinks.dialect import SqlDialect, SqlSinkConfig, describe
from headwater.sinks.merge import DELETE, NetEffect
from headwater.sinks.values import ValueRules, column_converter

__all__ = ["Shape", "Write", "plan_writes", "run_write"]


class Shape(NamedTuple):
    """How the net effects of one table definition and column set are written: the
    statement's columns (the key's for a delete, the image's in table order for an upsert)
    and a column converter for each."""

    delete: bool
    columns: tuple[str, ...]
    convert: list[Callable[[list[Any]], list[Any]]]


@dataclass(slots=True)
class Write:
    """The net effects of one statement shape: a table's deletes, or its upserts of one
    column set. ``values[j][i]`` is column ``j`` of effect ``i``, converted for the driver
    a column at a time (:func:`~headwater.sinks.values.column_converter`)."""

    table: str  # target reference, quoted
    name: str  # source db.table, for messages
    key: tuple[str, ...]
    columns: tuple[str, ...]
    delete: bool
    effects: list[NetEffect] = field(default_factory=list)
    #: ``(index of the first effect, shape)``: a new run starts where the table
    #: definition (the converters) changes, so effects keep their order.
    runs: list[tuple[int, Shape]] = field(default_factory=list)
    values: list[list[Any]] = field(default_factory=list)

    def row(self, i: int) -> list[Any]:
        return [column[i] for column in self.values]

    def convert(self) -> None:
        """Fill :attr:`values` (raises what a converter raises)."""
        self.values = [[] for _ in self.columns]
        bounds = [start for start, _ in self.runs[1:]] + [len(self.effects)]
        for (start, shape), stop in zip(self.runs, bounds, strict=True):
            effects = self.effects[start:stop]
            sources = [e.key if self.delete else e.image or {} for e in effects]
            for j, name in enumerate(shape.columns):
                self.values[j].extend(shape.convert[j](list(map(itemgetter(name), sources))))


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
    rules = ValueRules(config.zero_dates, dialect.text_bytes)
    groups: dict[tuple[str, str, bool, tuple[str, ...]], Write] = {}
    # Rows of one binlog event share a position object: look each definition up once
    # per position (the effects hold the positions, so ids stay unique meanwhile), and
    # work out each statement shape (columns, converters) once.
    tdefs: dict[tuple[str, str, int], TableDef] = {}
    shapes: dict[tuple[int, bool, tuple[str, ...]], Shape] = {}

    def shape_of(effect: NetEffect) -> Shape:
        at = (effect.database, effect.table, id(effect.position))
        tdef = tdefs.get(at)
        if tdef is None:
            tdef = tdefs[at] = _table_def(config.schema, effect, batch_id, shard)
        delete = effect.action == DELETE
        names = tuple(effect.key if delete else effect.image or {})
        shape = shapes.get((id(tdef), delete, names))
        if shape is None:
            has = None if target_has is None else target_has(effect.database, effect.table)
            shape = shapes[(id(tdef), delete, names)] = _shape(
                effect, tdef, delete, names, rules, batch_id, shard, has
            )
        return shape

    # Consecutive effects mostly come from one event and have one column set: they
    # go where the previous one went without the lookups.
    write: Write | None = None
    previous: NetEffect | None = None
    previous_names: KeysView[str] | None = None
    for effect in effects:
        names = (effect.key if effect.action == DELETE else effect.image or {}).keys()
        if (
            write is None
            or previous is None
            or effect.position is not previous.position
            or effect.action != previous.action
            or effect.table != previous.table
            or effect.database != previous.database
            or names != previous_names
        ):
            shape = shape_of(effect)
            gkey = (effect.database, effect.table, shape.delete, shape.columns)
            write = groups.get(gkey)
            if write is None:
                target = map_database(config.database_map, effect.database)
                write = groups[gkey] = Write(
                    dialect.table_ref(target, effect.table),
                    effect.table_name,
                    tuple(effect.key),
                    shape.columns,
                    shape.delete,
                )
            if not write.runs or write.runs[-1][1] is not shape:
                write.runs.append((len(write.effects), shape))
        write.effects.append(effect)
        previous, previous_names = effect, names
    try:
        for write in groups.values():
            write.convert()
    except (ValueError, TypeError):
        raise _conversion_error(effects, shape_of, batch_id, shard) from None
    return list(groups.values())


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
    effects: list[NetEffect], shape_of: Callable[[NetEffect], Shape], batch_id: int, shard: int
) -> SinkError:
    """The error of the first effect with a value its converter refuses (a whole column
    failed to convert: find the row, value by value)."""
    for effect in effects:
        shape = shape_of(effect)
        source = effect.key if shape.delete else effect.image or {}
        for name, convert in zip(shape.columns, shape.convert, strict=True):
            try:
                convert([source[name]])
            except (ValueError, TypeError) as exc:
                return _effect_error(f"cannot convert a value: {exc}", effect, batch_id, shard)
    raise AssertionError("a column failed to convert, but none of its values does")


def run_write(
    cur: Any, write: Write, dialect: SqlDialect, batch_rows: int, batch_id: int, shard: int
) -> int:
    """Run ``write`` as statements of at most ``batch_rows`` rows (fewer when the dialect
    binds parameters and the target caps them), each under a savepoint so that a failing
    one can be re-run row by row to name the row; the number of effects written."""
    count = len(write.effects)
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

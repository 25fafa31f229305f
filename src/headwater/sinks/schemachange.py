"""Schema changes of the source as steps on a target: what ``evolve`` and ``lenient`` do.

:func:`plan_schema_change` is a pure function. It takes the mode, the statement's scope
(:func:`headwater.schema.ddlscope.ddl_scope`: its kind and the tables it touches), the
source's table definitions just before and just after the statement (the reader's schema
history), and what the target holds now, and returns :class:`Step` values. Each SQL
dialect renders steps in its own terms (``render_step``): PostgreSQL never sees MySQL
text, it gets statements derived from the definitions before and after the change.

Invariants:

* Statements not about data (accounts, privileges, servers, ...) give no step, in any mode.
* Steps are idempotent against the target's state: a column already added, a table already
  created or renamed gives no step (a replayed DDL after a crash does nothing twice).
* ``lenient`` never drops data: no ``DROP TABLE``/``DROP COLUMN``; a dropped column is made
  nullable; a type change is applied only when it widens (:func:`widens`). ``TRUNCATE``
  is a data change of the source (all its rows deleted) and is applied; a table the source
  creates anew (there was none before the statement) is emptied if the target still has
  one: its rows are the rows the source dropped, kept they would be stale forever.
* A column rename is told from a drop plus an add by position: the same number of columns
  before and after, and at one position a name that disappears and a name that appears
  (MySQL's ``RENAME COLUMN`` and ``CHANGE`` keep the position).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from headwater.position import Position
from headwater.schema.ddlscope import DdlScope, ddl_scope
from headwater.schema.model import Column, TableDef, parse_column_type
from headwater.sinks.base import DdlMode

__all__ = [
    "FORGETS",
    "Step",
    "TargetColumns",
    "plan_schema_change",
    "position_before",
    "scope_of",
    "widens",
]

log = logging.getLogger(__name__)

#: A target table's columns: name -> (type as the target's catalog spells it, nullable);
#: None when the table does not exist on the target.
TargetColumns = Mapping[str, tuple[str, bool]] | None

Lookup = Callable[[str, str], TableDef | None]

#: Steps after which a table a sink remembered on its target may be gone.
FORGETS = frozenset({"drop_table", "drop_database", "rename_table"})


def scope_of(sql: str, database: str, schema: object) -> DdlScope:
    """The scope of a DDL change row in the names the sink sees: ``database`` is the
    row's (after the pipeline's renames), so unqualified names are resolved in its source
    database, and every object is then renamed as the rows are (``schema`` is the
    sink's view of definitions; a :class:`~headwater.spark.transforms.TransformedSchema`
    maps names both ways, any other keeps them)."""
    to_source = getattr(schema, "source_name", None)
    to_target = getattr(schema, "target_name", None)
    default_db = to_source(database, "")[0] if to_source is not None and database else database
    scope = ddl_scope(sql, default_db)
    if to_target is None:
        return scope
    objects = tuple(
        (to_target(db, t)[0], None) if t is None else to_target(db, t) for db, t in scope.objects
    )
    return DdlScope(scope.kind, objects, scope.reads, scope.credential, scope.parsed)


def position_before(position: Position) -> Position:
    """A position before every event of ``position``'s transaction: the schema history
    records a statement's definitions at its transaction's start (event index 0), so the
    definitions *before* a DDL change are the ones in force here."""
    if position.offset > 0:
        return Position(position.change_id, position.file_num, position.offset - 1, 2**62)
    return Position(position.change_id, max(position.file_num - 1, 0), 2**62, 0)


TargetLookup = Callable[[str, str], TargetColumns]


@dataclass(frozen=True, slots=True)
class Step:
    """One change to make on the target, in source names (the dialect maps databases).

    ``op``: ``create_database``, ``drop_database``, ``create_table`` (``tdef``),
    ``drop_table``, ``truncate``, ``rename_table`` (``new_database``, ``new_table``),
    ``add_column`` / ``modify_column`` (``column``), ``drop_column`` / ``relax_column``
    (``name``; ``type_text`` the target's type), ``rename_column`` (``name`` -> ``new_name``),
    ``primary_key`` (``key``), ``source_sql`` (the statement as written: MySQL targets
    only, for DDL with no table definition such as indexes and views).
    """

    op: str
    database: str
    table: str = ""
    tdef: TableDef | None = None
    column: Column | None = None
    name: str = ""
    new_name: str = ""
    new_database: str = ""
    new_table: str = ""
    type_text: str = ""
    key: tuple[str, ...] = ()
    sql: str = ""


def plan_schema_change(
    mode: DdlMode,
    scope: DdlScope,
    sql: str,
    before: Lookup,
    after: Lookup,
    target: TargetLookup,
    *,
    runs_source_sql: bool,
) -> list[Step]:
    """The steps that bring the target along with one statement (module docstring).

    ``before``/``after``: the source's definition just before/after the statement;
    ``target``: the target table's columns now; ``runs_source_sql``: the target speaks
    MySQL (statements with no definition, such as ``CREATE INDEX``, run as written under
    ``evolve``)."""
    if mode not in (DdlMode.EVOLVE, DdlMode.LENIENT) or not scope.about_data:
        return []
    evolve = mode is DdlMode.EVOLVE
    kind, objects = scope.kind, scope.objects
    tables = [(db, t) for db, t in objects if t is not None]
    if kind == "create_database":
        return [Step("create_database", db) for db, _ in objects[:1]]
    if kind == "drop_database":
        return [Step("drop_database", db) for db, _ in objects[:1]] if evolve else []
    if kind == "create_table":
        return [s for db, t in tables[:1] for s in _create(evolve, db, t, before, after, target)]
    if kind == "drop_table":
        if not evolve:
            return []
        return [Step("drop_table", db, t) for db, t in tables if target(db, t) is not None]
    if kind == "truncate_table":
        return [Step("truncate", db, t) for db, t in tables if target(db, t) is not None]
    if kind == "rename_table":
        steps: list[Step] = []
        for (db, t), (ndb, nt) in zip(tables[::2], tables[1::2], strict=False):
            steps += _rename(db, t, ndb, nt, after, target)
        return steps
    if kind == "alter_table" and tables:
        db, t = tables[0]
        steps = []
        if len(tables) > 1 and after(db, t) is None:  # ALTER TABLE ... RENAME TO
            ndb, nt = tables[1]
            steps += _rename(db, t, ndb, nt, after, target)
            old = before(db, t)
            db, t = ndb, nt
            b = old
        else:
            b = before(db, t)
        if steps and steps[0].op == "create_table":
            return steps  # the renamed table was missing: created with its new shape
        a = after(db, t)
        if a is None:
            log.warning("no definition of %s.%s after %.200s: not applied", db, t, sql)
            return steps
        have = target(db, t)
        if steps:  # the rename is not done yet: the renamed table has the old one's columns
            have = target(*tables[0])
        if have is None:
            return [*steps, Step("create_table", db, t, tdef=a)]
        return steps + _alter(evolve, db, t, b, a, have)
    if evolve and runs_source_sql and tables:
        return [Step("source_sql", tables[0][0], sql=sql)]
    if evolve and runs_source_sql and kind in ("create_view", "alter_view", "drop_view"):
        return [Step("source_sql", objects[0][0], sql=sql)] if objects else []
    log.info("%s not applied (%s; no table definition to derive it from)", kind, mode)
    return []


def _create(
    evolve: bool, db: str, t: str, before: Lookup, after: Lookup, target: TargetLookup
) -> list[Step]:
    a = after(db, t)
    if a is None:
        return []
    have = target(db, t)
    if have is None:
        return [Step("create_table", db, t, tdef=a)]
    if before(db, t) is not None:
        return []  # CREATE TABLE IF NOT EXISTS of a table the source had: nothing changed
    if evolve:
        return [Step("drop_table", db, t), Step("create_table", db, t, tdef=a)]
    # Re-created by the source: its old rows are gone there, so they go here too.
    return [Step("truncate", db, t), *_alter(False, db, t, None, a, have)]


def _rename(db: str, t: str, ndb: str, nt: str, after: Lookup, target: TargetLookup) -> list[Step]:
    if target(ndb, nt) is not None:
        return []  # done already (a replay)
    if target(db, t) is not None:
        return [Step("rename_table", db, t, new_database=ndb, new_table=nt)]
    a = after(ndb, nt)
    return [] if a is None else [Step("create_table", ndb, nt, tdef=a)]


def _renames(b: TableDef | None, a: TableDef) -> dict[str, str]:
    """Column renames by position (module docstring): old name -> new name."""
    if b is None or len(b.columns) != len(a.columns):
        return {}
    old = {c.name for c in b.columns}
    new = {c.name for c in a.columns}
    return {
        x.name: y.name
        for x, y in zip(b.columns, a.columns, strict=True)
        if x.name != y.name and x.name not in new and y.name not in old
    }


def _alter(
    evolve: bool,
    db: str,
    t: str,
    b: TableDef | None,
    a: TableDef,
    have: Mapping[str, tuple[str, bool]],
) -> list[Step]:
    steps: list[Step] = []
    have = dict(have)
    renames = _renames(b, a)
    for old, new in renames.items():
        if old in have and new not in have:
            steps.append(Step("rename_column", db, t, name=old, new_name=new))
            have[new] = have.pop(old)
    previous = {} if b is None else {renames.get(c.name, c.name): c for c in b.columns}
    wanted = {c.name for c in a.columns}
    for name, (type_text, nullable) in have.items():
        if name in wanted:
            continue
        if evolve:
            steps.append(Step("drop_column", db, t, name=name, type_text=type_text))
        elif not nullable:
            steps.append(Step("relax_column", db, t, name=name, type_text=type_text))
    for col in a.columns:
        if col.name not in have:
            # Added nullable under lenient: rows the target kept (a re-created table's
            # columns, say) have no value for it.
            added = col if evolve else replace(col, nullable=True)
            steps.append(Step("add_column", db, t, column=added))
            continue
        old_col = previous.get(col.name)
        if old_col is None or _same(old_col, col):
            continue
        if evolve or widens(old_col, col):
            steps.append(Step("modify_column", db, t, column=col))
        else:
            log.info("%s.%s.%s: %s -> %s narrows: kept (lenient)", db, t, col.name,
                     old_col.column_type, col.column_type)  # fmt: skip
    if evolve and b is not None and tuple(b.primary_key) != tuple(a.primary_key):
        had = "had" if b.primary_key else ""
        steps.append(Step("primary_key", db, t, key=tuple(a.primary_key), type_text=had))
    return steps


def _same(x: Column, y: Column) -> bool:
    return (x.column_type, x.nullable, x.charset) == (y.column_type, y.nullable, y.charset)


_INTS = {"tinyint": 1, "smallint": 2, "mediumint": 3, "int": 4, "bigint": 5}
_TEXTS = {"char": 0, "varchar": 0, "tinytext": 1, "text": 2, "mediumtext": 3, "longtext": 4}
_BLOBS = {"binary": 0, "varbinary": 0, "tinyblob": 1, "blob": 2, "mediumblob": 3, "longblob": 4}
_TIMES = ("datetime", "timestamp", "time")


def widens(old: Column, new: Column) -> bool:
    """Whether ``new`` holds every value ``old`` can (a lenient type change): integers to
    a larger integer (signedness kept, or unsigned to a larger signed), longer strings,
    text or blob kinds of larger capacity, DECIMAL with as many integer digits and
    decimals, FLOAT to DOUBLE, more fractional seconds, ENUM/SET values appended; NOT NULL
    to NULL. A change this does not recognise narrows (it is kept as it was)."""
    if old.nullable and not new.nullable:
        return False
    ob, oargs, ou, _ = parse_column_type(old.column_type)
    nb, nargs, nu, _ = parse_column_type(new.column_type)
    if (ob, oargs, ou) == (nb, nargs, nu):
        return old.charset == new.charset or new.charset in ("utf8mb4", None)
    if ob in _INTS and nb in _INTS:
        if ou == nu:
            return _INTS[nb] >= _INTS[ob]
        return ou and not nu and _INTS[nb] > _INTS[ob]
    for family in (_TEXTS, _BLOBS):
        if ob in family and nb in family:
            if family[nb] != family[ob]:
                return family[nb] > family[ob] or (family[ob] == 0 and _length(old) <= 255)
            return _length(new) >= _length(old)
    if ob == nb == "decimal":
        op, os_ = _decimal(oargs)
        np_, ns = _decimal(nargs)
        return np_ - ns >= op - os_ and ns >= os_ and ou == nu
    if ob == "float" and nb == "double":
        return True
    if ob == nb and ob in _TIMES:
        return _int(nargs, 0) >= _int(oargs, 0)
    if ob == nb and ob in ("enum", "set"):
        return nargs[: len(oargs)] == oargs
    return False


def _length(col: Column) -> int:
    _, args, _, _ = parse_column_type(col.column_type)
    return _int(args, 1)


def _int(args: tuple[str, ...], default: int) -> int:
    return int(args[0]) if args and args[0].isdigit() else default


def _decimal(args: tuple[str, ...]) -> tuple[int, int]:
    precision = int(args[0]) if args else 10
    scale = int(args[1]) if len(args) > 1 else 0
    return precision, scale

"""Transforms of a pipeline: filters, column include/exclude, renames, computed columns,
masking and user rules, applied to a DataFrame of change rows in the configured order.

Every transform is a frozen spec (what the configuration says); :func:`apply_transforms`
turns the list into DataFrame operations and keeps their order exactly. Filters run as
Spark SQL on the JVM; everything that edits row images runs in Python on the executors
(``mapInArrow``, consecutive Python transforms fused into one pass over the rows), with the
same contract as user rules (:mod:`headwater.spark.rules`): a function from one change
(images parsed into dicts) to a change or ``None``.

Addressing image columns in SQL (filters, computed columns): ``after.amount``,
``before.amount`` and ``key.id`` are rewritten to ``get_json_object(after, '$.amount')``
and so on, outside string literals and backquotes (a name that is not a plain identifier
is written in backquotes: ``after.`unit price```). The value is the JSON text of the field
as a STRING (a JSON string without its quotes; NULL when the field is null or absent), so
compare numbers with a cast: ``after.amount::decimal(12,2) > 100`` (Spark runs in ANSI
mode, where ``'150.5' > 100`` is an error, not a comparison). In a computed column
``row.amount`` means the image being computed: the expression is evaluated once over
``after`` (giving the new ``after`` field) and once over ``before``.

Which changes a transform touches: ``tables``, anchored regular expressions over
``db.table`` (as in the reader's filters); empty means every table. DDL changes have no
images; only database and table renames apply to them (their SQL text is left as is).

The ``key`` and ``before_key`` images follow renames and masks (sinks merge and route by
them, so they must name and hold what ``after`` and ``before`` do) but not
include/exclude: excluding a primary key column removes it from the images only.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from headwater.spark.rules import ChangeDict, RowOp, RuleError, RuleScript, position_text

if TYPE_CHECKING:
    import pyarrow
    from pyspark.sql import DataFrame

__all__ = [
    "ComputeSpec",
    "ExcludeSpec",
    "FilterSpec",
    "IncludeSpec",
    "MaskRule",
    "MaskSpec",
    "RenameColumnsSpec",
    "RenameDatabaseSpec",
    "RenameTableSpec",
    "RuleError",
    "RuleSpec",
    "TransformSpec",
    "TransformedSchema",
    "apply_transforms",
    "image_sql",
    "row_op",
]

IMAGES = ("key", "before", "after", "before_key")
_HELPER = "__hw_c"


# --- specs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FilterSpec:
    """Keep a row change of a matching table only where ``where`` (Spark SQL, image
    shorthands allowed) is true; false or NULL drops it. Other tables and DDL pass."""

    where: str
    tables: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IncludeSpec:
    """Keep only ``columns`` in the before/after images of matching tables."""

    columns: tuple[str, ...]
    tables: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ExcludeSpec:
    """Remove ``columns`` from the before/after images of matching tables."""

    columns: tuple[str, ...]
    tables: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RenameDatabaseSpec:
    """Rename databases: ``mapping`` old name -> new name (every table of the database)."""

    mapping: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class RenameTableSpec:
    """Rename tables: ``mapping`` ``db.table`` -> ``table`` (same database) or
    ``db2.table2`` (moved to another database)."""

    mapping: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class RenameColumnsSpec:
    """Rename columns (old -> new) in the key, before and after images."""

    mapping: Mapping[str, str]
    tables: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ComputeSpec:
    """Add (or replace) image fields: ``columns`` name -> Spark SQL expression."""

    columns: Mapping[str, str]
    tables: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MaskRule:
    """How one column is masked (non-NULL values only; the result is a string).

    ``kind``: ``fixed`` (the value becomes ``text``), ``keep_first`` / ``keep_last`` (the
    first/last ``n`` characters stay, every other becomes ``char``), ``hash`` (hex SHA-256
    of ``salt`` + the value's text, as Debezium's ``mask.hash.SHA-256.with.salt``).
    """

    kind: str
    text: str = "***"
    n: int = 0
    char: str = "*"
    salt: bytes = field(default=b"", repr=False)

    def apply(self, value: Any) -> Any:
        if value is None:
            return None
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        if self.kind == "fixed":
            return self.text
        if self.kind == "keep_first":
            return text[: self.n] + self.char * max(0, len(text) - self.n)
        if self.kind == "keep_last":
            kept = text[-self.n :] if self.n else ""
            return self.char * max(0, len(text) - self.n) + kept
        if self.kind == "hash":
            return hashlib.sha256(self.salt + text.encode("utf-8", "surrogatepass")).hexdigest()
        raise ValueError(f"unknown mask kind {self.kind!r}")


@dataclass(frozen=True, slots=True)
class MaskSpec:
    """Mask ``columns`` (name -> rule) in the key, before and after images."""

    columns: Mapping[str, MaskRule]
    tables: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RuleSpec:
    """A user rule script (see :mod:`headwater.spark.rules`), for matching tables."""

    script: RuleScript
    tables: tuple[str, ...] = ()


TransformSpec = (
    FilterSpec
    | IncludeSpec
    | ExcludeSpec
    | RenameDatabaseSpec
    | RenameTableSpec
    | RenameColumnsSpec
    | ComputeSpec
    | MaskSpec
    | RuleSpec
)


# --- SQL over images ----------------------------------------------------------------------

_TOKEN = re.compile(
    r"""'(?:[^'\\]|\\.|'')*'            # a string literal
      | "(?:[^"\\]|\\.)*"               # a double-quoted literal
      | `(?:[^`]|``)*`                  # a quoted identifier
      | (?<![\w.`])(?P<image>key|before|after|row)\.
        (?P<name>[A-Za-z_][A-Za-z0-9_$]*|`(?:[^`]|``)+`)""",
    re.VERBOSE | re.IGNORECASE,
)


def image_sql(expression: str, row_image: str | None = None) -> str:
    """``expression`` with ``after.x`` / ``before.x`` / ``key.x`` (and ``row.x`` when
    ``row_image`` names the image it stands for) rewritten to ``get_json_object`` calls."""

    def replace(m: re.Match[str]) -> str:
        image = m.group("image")
        if image is None:
            return m.group(0)
        image = image.lower()
        if image == "row":
            if row_image is None:
                raise ValueError(f"row.{m.group('name')}: row. is only for computed columns")
            image = row_image
        name = m.group("name")
        if name.startswith("`"):
            name = name[1:-1].replace("``", "`")
        path = "$['" + name.replace("\\", "\\\\").replace("'", "\\'") + "']"
        literal = "'" + path.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return f"get_json_object(`{image}`, {literal})"

    return _TOKEN.sub(replace, expression)


def _tables_sql(patterns: tuple[str, ...]) -> str:
    if not patterns:
        return "true"
    regex = "^(?:" + "|".join(f"(?:{p})" for p in patterns) + ")$"
    literal = "'" + regex.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return f"(concat(`database`, '.', `table`) RLIKE {literal})"


# --- Python row operations ------------------------------------------------------------------


class _Tables:
    """Anchored regexes over ``db.table``, with a per-table answer cache."""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self._regex = re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None
        self._cache: dict[tuple[str, str], bool] = {}

    def __call__(self, change: ChangeDict) -> bool:
        if self._regex is None:
            return True
        db, table = change["database"], change["table"]
        hit = self._cache.get((db, table))
        if hit is None:
            hit = self._cache[(db, table)] = self._regex.fullmatch(f"{db}.{table}") is not None
        return hit


def _per_table(tables: tuple[str, ...], edit: Callable[[ChangeDict], ChangeDict | None]) -> RowOp:
    match = _Tables(tables)

    def op(change: ChangeDict) -> ChangeDict | None:
        if change["op"] == "ddl" or not match(change):
            return change
        return edit(change)

    return op


def _edit_images(images: tuple[str, ...], fn: Callable[[dict[str, Any]], None]) -> RowOp:
    def edit(change: ChangeDict) -> ChangeDict:
        for name in images:
            image = change.get(name)  # before_key may be absent from a rule's dict
            if image is not None:
                fn(image)
        return change

    return edit


def row_op(spec: TransformSpec, index: int = 0) -> RowOp:
    """The Python function applying ``spec`` to one change (not for filters, which run
    in SQL). ``index`` numbers the transform (names its computed helper columns)."""
    if isinstance(spec, IncludeSpec):
        keep = frozenset(spec.columns)

        def include(image: dict[str, Any]) -> None:
            for name in [n for n in image if n not in keep]:
                del image[name]

        return _per_table(spec.tables, _edit_images(("before", "after"), include))
    if isinstance(spec, ExcludeSpec):
        drop = tuple(spec.columns)

        def exclude(image: dict[str, Any]) -> None:
            for name in drop:
                image.pop(name, None)

        return _per_table(spec.tables, _edit_images(("before", "after"), exclude))
    if isinstance(spec, RenameColumnsSpec):
        mapping = dict(spec.mapping)

        def rename(image: dict[str, Any]) -> None:
            if any(n in mapping for n in image):
                renamed = {mapping.get(n, n): v for n, v in image.items()}
                image.clear()
                image.update(renamed)

        return _per_table(spec.tables, _edit_images(IMAGES, rename))
    if isinstance(spec, MaskSpec):
        masks = dict(spec.columns)

        def mask(image: dict[str, Any]) -> None:
            for name, rule in masks.items():
                if name in image:
                    image[name] = rule.apply(image[name])

        return _per_table(spec.tables, _edit_images(IMAGES, mask))
    if isinstance(spec, RenameDatabaseSpec):
        databases = dict(spec.mapping)

        def rename_db(change: ChangeDict) -> ChangeDict:
            new = databases.get(change["database"])
            if new is not None:
                change["database"] = new
            return change

        return rename_db
    if isinstance(spec, RenameTableSpec):
        tables = {tuple(k.split(".", 1)): v for k, v in spec.mapping.items()}

        def rename_table(change: ChangeDict) -> ChangeDict:
            new = tables.get((change["database"], change["table"]))
            if new is not None:
                db, _, table = new.rpartition(".")
                if db:
                    change["database"] = db
                change["table"] = table
            return change

        return rename_table
    if isinstance(spec, ComputeSpec):
        return _compute_merge(index, tuple(spec.columns), _Tables(spec.tables))
    if isinstance(spec, RuleSpec):
        return _per_table(spec.tables, spec.script.load())
    raise TypeError(f"no row operation for {type(spec).__name__}")


def _helper(index: int, column: int, image: str) -> str:
    return f"{_HELPER}{index}_{column}_{image}"


def _compute_merge(index: int, names: tuple[str, ...], match: _Tables) -> RowOp:
    """Moves the helper columns of a computed-column transform into the images (helpers
    are dropped from every change, merged only into matching tables' row changes)."""

    def merge(change: ChangeDict) -> ChangeDict:
        applies = change["op"] != "ddl" and match(change)
        for image in ("before", "after"):
            values = change[image]
            for i, name in enumerate(names):
                raw = change.pop(_helper(index, i, image), None)
                if applies and values is not None:
                    values[name] = orjson.loads(raw).get("v") if raw is not None else None
        return change

    return merge


# --- applying to a DataFrame ------------------------------------------------------------------


def apply_transforms(
    df: DataFrame, specs: list[TransformSpec] | tuple[TransformSpec, ...]
) -> DataFrame:
    """``df`` (change rows) with ``specs`` applied in order; same schema as ``df``.

    Lazy, like any DataFrame operation; works on batch and streaming DataFrames. Errors in
    rules and transforms surface when the query runs, as :class:`RuleError` text.
    """
    from pyspark.sql import functions as F

    columns = list(df.columns)
    pending: list[tuple[int, TransformSpec]] = []
    for index, spec in enumerate(specs):
        if isinstance(spec, FilterSpec):
            df = _python_pass(df, pending, columns)
            pending = []
            predicate = image_sql(spec.where)
            df = df.where(
                f"`op` = 'ddl' OR NOT {_tables_sql(spec.tables)} OR coalesce(({predicate}), false)"
            )
            continue
        if isinstance(spec, (RenameDatabaseSpec, RenameTableSpec)):
            # Plain column rewrites: SQL, so a pipeline that only renames never leaves the JVM.
            df = _python_pass(df, pending, columns)
            pending = []
            df = _rename_sql(df, spec)
            continue
        if isinstance(spec, ComputeSpec):
            df = _python_pass(df, pending, columns)
            pending = []
            for i, expression in enumerate(spec.columns.values()):
                for image in ("before", "after"):
                    value = image_sql(expression, row_image=image)
                    df = df.withColumn(
                        _helper(index, i, image),
                        F.expr(
                            f"CASE WHEN `{image}` IS NULL THEN NULL "
                            f"ELSE to_json(named_struct('v', {value})) END"
                        ),
                    )
        pending.append((index, spec))
    return _python_pass(df, pending, columns)


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _rename_sql(df: DataFrame, spec: RenameDatabaseSpec | RenameTableSpec) -> DataFrame:
    from pyspark.sql import functions as F

    if isinstance(spec, RenameDatabaseSpec):
        if not spec.mapping:
            return df
        cases = " ".join(
            f"WHEN `database` = {_sql_string(old)} THEN {_sql_string(new)}"
            for old, new in spec.mapping.items()
        )
        return df.withColumn("database", F.expr(f"CASE {cases} ELSE `database` END"))
    db_cases, table_cases = [], []
    for old, new in spec.mapping.items():
        old_db, _, old_table = old.partition(".")
        new_db, _, new_table = new.rpartition(".")
        match = f"`database` = {_sql_string(old_db)} AND `table` = {_sql_string(old_table)}"
        table_cases.append(f"WHEN {match} THEN {_sql_string(new_table)}")
        if new_db:
            db_cases.append(f"WHEN {match} THEN {_sql_string(new_db)}")
    if not table_cases:
        return df
    table = F.expr(f"CASE {' '.join(table_cases)} ELSE `table` END")
    if db_cases:
        database = F.expr(f"CASE {' '.join(db_cases)} ELSE `database` END")
        # Both computed from the old names (one select), then put back in place.
        return df.select(
            *[
                database.alias(c) if c == "database" else table.alias(c) if c == "table" else c
                for c in df.columns
            ]
        )
    return df.withColumn("table", table)


def _python_pass(
    df: DataFrame, pending: list[tuple[int, TransformSpec]], columns: list[str]
) -> DataFrame:
    if not pending:
        return df
    from pyspark.sql.types import StructType

    out_schema = StructType([f for f in df.schema.fields if f.name in columns])
    with warnings.catch_warnings():
        # PySpark 4.3 warns that pandas 3 is "not fully supported" even for mapInArrow,
        # which does not use pandas.
        warnings.simplefilter("ignore", FutureWarning)
        return df.mapInArrow(_RowPass(tuple(pending), tuple(columns)), out_schema)


class _RowPass:
    """The ``mapInArrow`` function of a run of Python transforms (picklable; the row
    operations are built on the executor, once per task)."""

    def __init__(self, specs: tuple[tuple[int, TransformSpec], ...], columns: tuple[str, ...]):
        self.specs = specs
        self.columns = columns

    def __call__(self, batches: Iterator[pyarrow.RecordBatch]) -> Iterator[pyarrow.RecordBatch]:
        import pyarrow as pa

        ops = [row_op(spec, index) for index, spec in self.specs]
        schema: pa.Schema | None = None
        for batch in batches:
            if schema is None:
                schema = pa.schema([batch.schema.field(name) for name in self.columns])
            out = []
            for row in batch.to_pylist():
                change = _run(ops, _parse(row))
                if change is not None:
                    out.append(_dump(change))
            yield pa.RecordBatch.from_pylist(out, schema=schema)


def _parse(row: dict[str, Any]) -> ChangeDict:
    for name in IMAGES:
        text = row.get(name)
        if text is not None:
            row[name] = orjson.loads(text)
    return row


def _dump(change: ChangeDict) -> ChangeDict:
    for name in IMAGES:
        image = change.get(name)
        if image is not None:
            change[name] = orjson.dumps(image).decode()
    return change


def _run(ops: list[RowOp], change: ChangeDict) -> ChangeDict | None:
    current: ChangeDict | None = change
    for op in ops:
        try:
            current = op(current)  # type: ignore[arg-type]
        except RuleError:
            raise
        except Exception as e:
            raise RuleError(
                f"transform failed on {position_text(change)}: {type(e).__name__}: {e}"
            ) from e
        if current is None:
            return None
    return current


# --- table definitions after the transforms -------------------------------------------------

#: Most edited definitions one :class:`TransformedSchema` keeps (then it starts afresh).
_BUILT_MAX = 4096


@dataclass(frozen=True, slots=True)
class TransformedSchema:
    """Table definitions as the transforms leave them, for sinks that look tables up by
    name (``table_at(database, table, position)``, like ``SchemaHistory``).

    A name after renames is mapped back to the source table (renames of databases and
    tables, undone in reverse order), whose definition at ``position`` is then edited as
    the transforms edit images: columns renamed, included/excluded (primary key columns
    always stay), computed columns added as ``longtext``, masked non-character columns
    turned into ``varchar(255)`` (a mask yields text). User rules are opaque: a rule that
    renames tables or adds columns is not reflected here.

    Each edited definition is built once per definition of the base
    (:class:`~headwater.sinks.base.SchemaSource` returns one object for all the positions
    between two schema changes of a table, so that object's identity stands for the
    interval): a lookup costs the base's lookup and a dict hit, and a schema change (a new
    base object, or a history read again) builds anew. The cache is per object and is
    not pickled.
    """

    base: Any
    specs: tuple[TransformSpec, ...]
    _built: dict[tuple[str, str, int], tuple[Any, Any]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _names: dict[tuple[str, str], tuple[str, str]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __reduce__(self) -> tuple[Any, ...]:
        return (TransformedSchema, (self.base, self.specs))

    def table_at(self, database: str, table: str, position: Any) -> Any:
        source = self._names.get((database, table))
        if source is None:
            source = self._names[(database, table)] = self._source_name(database, table)
        tdef = self.base.table_at(source[0], source[1], position)
        if tdef is None:
            return None
        key = (database, table, id(tdef))
        hit = self._built.get(key)
        if hit is not None and hit[0] is tdef:  # the base object is kept: ids stay unique
            return hit[1]
        if len(self._built) >= _BUILT_MAX:  # definitions of histories read before
            self._built.clear()
        built = self._build(tdef, source)
        self._built[key] = (tdef, built)
        return built

    def _build(self, tdef: Any, source: tuple[str, str]) -> Any:
        from dataclasses import replace

        name = source
        columns = list(tdef.columns)
        key = list(tdef.primary_key)
        for spec in self.specs:
            if isinstance(spec, RenameDatabaseSpec):
                name = (spec.mapping.get(name[0], name[0]), name[1])
                continue
            if isinstance(spec, RenameTableSpec):
                new = spec.mapping.get(f"{name[0]}.{name[1]}")
                if new is not None:
                    db, _, tbl = new.rpartition(".")
                    name = (db or name[0], tbl)
                continue
            if isinstance(spec, (FilterSpec, RuleSpec)):
                continue
            if spec.tables and not _Tables(spec.tables)({"database": name[0], "table": name[1]}):
                continue
            columns, key = _edit_columns(spec, columns, key)
        return replace(
            tdef,
            database=name[0],
            table=name[1],
            columns=tuple(columns),
            primary_key=tuple(key),
            unique_keys=(),
        )

    def source_name(self, database: str, table: str) -> tuple[str, str]:
        """The source's name of a table named ``(database, table)`` after the renames."""
        return self._source_name(database, table)

    def target_name(self, database: str, table: str) -> tuple[str, str]:
        """The name after the renames of the source's table ``(database, table)`` (sinks
        apply schema changes by these names: DDL text keeps the source's)."""
        name = (database, table)
        for spec in self.specs:
            if isinstance(spec, RenameDatabaseSpec):
                name = (spec.mapping.get(name[0], name[0]), name[1])
            elif isinstance(spec, RenameTableSpec):
                new = spec.mapping.get(f"{name[0]}.{name[1]}")
                if new is not None:
                    db, _, tbl = new.rpartition(".")
                    name = (db or name[0], tbl)
        return name

    def _source_name(self, database: str, table: str) -> tuple[str, str]:
        name = (database, table)
        for spec in reversed(self.specs):
            if isinstance(spec, RenameDatabaseSpec):
                for old, new in spec.mapping.items():
                    if new == name[0]:
                        name = (old, name[1])
                        break
            elif isinstance(spec, RenameTableSpec):
                for old, new in spec.mapping.items():
                    db, _, tbl = new.rpartition(".")
                    old_db, _, old_table = old.partition(".")
                    if (db or old_db, tbl) == name:
                        name = (old_db, old_table)
                        break
        return name


def _edit_columns(
    spec: TransformSpec, columns: list[Any], key: list[str]
) -> tuple[list[Any], list[str]]:
    from dataclasses import replace

    from headwater.schema.model import Column

    if isinstance(spec, IncludeSpec):
        return [c for c in columns if c.name in spec.columns or c.name in key], key
    if isinstance(spec, ExcludeSpec):
        return [c for c in columns if c.name not in spec.columns or c.name in key], key
    if isinstance(spec, RenameColumnsSpec):
        m = spec.mapping
        return [replace(c, name=m.get(c.name, c.name)) for c in columns], [m.get(k, k) for k in key]
    if isinstance(spec, ComputeSpec):
        kept = [c for c in columns if c.name not in spec.columns]
        added = [Column(name, "longtext", "longtext") for name in spec.columns]
        return kept + added, key
    if isinstance(spec, MaskSpec):
        return [
            c
            if c.name not in spec.columns or c.is_character
            else replace(c, data_type="varchar", column_type="varchar(255)", unsigned=False)
            for c in columns
        ], key
    return columns, key

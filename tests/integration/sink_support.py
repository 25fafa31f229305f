"""Helpers of the sink tests: change-row dicts, table definitions, sink configurations."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headwater.changes.schema import image_json
from headwater.position import Position
from headwater.schema.model import Column, TableDef

SOURCE = "src"


def col(name: str, data_type: str, column_type: str | None = None, **kw: Any) -> Column:
    charset = kw.pop("charset", None)
    if charset is None and data_type in ("varchar", "char", "text", "enum", "set"):
        charset = "utf8mb4"
    return Column(name, data_type, column_type or data_type, charset=charset, **kw)


def items_table(db: str, table: str = "items") -> TableDef:
    """``id INT PRIMARY KEY, name VARCHAR(20), price DECIMAL(10,2), qty INT``."""
    return TableDef(
        db,
        table,
        (
            col("id", "int", nullable=False),
            col("name", "varchar", "varchar(20)"),
            col("price", "decimal", "decimal(10,2)"),
            col("qty", "int"),
        ),
        primary_key=("id",),
    )


def pair_table(db: str, table: str = "pairs") -> TableDef:
    """A two-column key: ``a INT, b VARCHAR(10), v VARCHAR(10), PRIMARY KEY (a, b)``."""
    return TableDef(
        db,
        table,
        (
            col("a", "int", nullable=False),
            col("b", "varchar", "varchar(10)", nullable=False),
            col("v", "varchar", "varchar(10)"),
        ),
        primary_key=("a", "b"),
    )


def row(
    op: str,
    seq: int,
    db: str,
    table: str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    *,
    pk: tuple[str, ...] = ("id",),
    sql: str | None = None,
    ts_us: int = 1_714_000_000_000_000,
) -> dict[str, Any]:
    """A change row as the pipeline carries it (JSON text images), sequence ``seq``."""
    image = after if after is not None else before
    key = None if image is None or op == "ddl" else {c: image[c] for c in pk if c in image}
    if key is not None and len(key) < len(pk) and before is not None:
        # an update's MINIMAL after image lacks the key it left alone: the before image's
        key = {c: image[c] if c in image else before[c] for c in pk}
    old = None
    if op == "update" and before is not None and key is not None:
        old = {c: before[c] for c in pk}
        old = None if old == key else old
    return {
        "source": SOURCE,
        "database": db,
        "table": table,
        "op": op,
        "ts_us": ts_us,
        "change_id": 0,
        "file_num": 1,
        "offset": 4 + seq,
        "event_index": 0,
        "gtid": "",
        "txn_id": f"1:{4 + seq}",
        "sequence": seq,
        "key": image_json(key),
        "before": image_json(before),
        "after": image_json(after),
        "schema_version": 1,
        "sql": sql,
        "before_key": image_json(old),
    }


@dataclass(frozen=True)
class VersionedSchema:
    """Definitions that change at a sequence (a DDL in the batch): ``before`` until the
    change's binlog offset reaches ``4 + at``, then ``after``."""

    before: tuple[TableDef, ...]
    after: tuple[TableDef, ...]
    at: int

    def table_at(self, database: str, table: str, position: Position) -> TableDef | None:
        defs = self.after if position.offset >= 4 + self.at else self.before
        return next((t for t in defs if (t.database, t.table) == (database, table)), None)


class FaultyConnection:
    """A real connection whose cursor runs ``fault()`` after ``after`` statements."""

    def __init__(self, conn: Any, after: int, fault: Any) -> None:
        self._conn = conn
        self.after = after
        self.fault = fault
        self.executed: list[str] = []

    def cursor(self) -> Any:
        return _FaultyCursor(self, self._conn.cursor())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _FaultyCursor:
    def __init__(self, owner: FaultyConnection, cur: Any) -> None:
        self.owner = owner
        self.cur = cur

    def execute(self, sql: str, params: Any = None) -> Any:
        if len(self.owner.executed) == self.owner.after:
            self.owner.fault()
        self.owner.executed.append(sql)
        return self.cur.execute(sql, params)

    def __enter__(self) -> _FaultyCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cur.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cur, name)

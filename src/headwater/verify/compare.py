"""Chunked comparison of one table on two servers, like pt-table-checksum.

The source table is walked in primary key order, ``chunk_size`` rows at a time (keyset
pagination: ``WHERE (k) > (last) ORDER BY k LIMIT n``). The chunks partition the key
space: chunk i covers ``(upper(i-1), upper(i)]``, the first has no lower bound and the
last no upper bound, so every target row, including rows beyond the source's first and
last keys, falls into exactly one chunk. For each chunk both sides' rows are read,
rendered canonically (:mod:`headwater.verify.canonical`) and checksummed (row count and
XOR of 64-bit row digests). Equal checksums: the chunk is equal. Otherwise the chunk's
rows are compared key by key: a key only in the source is *missing* in the target, only
in the target *extra*, in both with other values *different* (with the columns).

Across products (MariaDB to PostgreSQL) text key columns are compared and ordered in
code point order on both sides so the chunks agree; as a safety net a key reported
missing in one chunk and extra in another with the same values is not a difference.
Memory is bounded by the chunk (plus the keys of differing rows). The comparison reads
each side with plain SELECTs: run it on quiesced or caught-up tables, not on a moving
source (it does not lock anything).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from headwater.verify.canonical import Canonical, canonical_row, column_kind, row_digest
from headwater.verify.endpoints import Column, Connection, VerifyError

__all__ = ["Difference", "TableResult", "compare_table"]


@dataclass(frozen=True, slots=True)
class Difference:
    """One differing key: ``kind`` is ``missing`` (in the target), ``extra`` (only in the
    target) or ``different`` (``columns`` lists the columns whose values differ)."""

    kind: str
    key: tuple[str | None, ...]
    columns: tuple[str, ...] = ()


@dataclass(slots=True)
class TableResult:
    """The outcome for one table. ``problem`` is a table-level mismatch (missing table or
    columns in the target); ``mismatches`` counts it as one plus one per differing key."""

    source: str
    target: str
    key_columns: tuple[str, ...] = ()
    rows: int = 0
    target_rows: int = 0
    chunks: int = 0
    differences: list[Difference] = field(default_factory=list)
    problem: str | None = None

    @property
    def mismatches(self) -> int:
        return len(self.differences) + (1 if self.problem else 0)

    def key_text(self, key: tuple[str | None, ...]) -> str:
        """``id=5`` or ``order_id=3,line=7`` (NULL as ``NULL``)."""
        return ",".join(
            f"{c}={'NULL' if v is None else v}" for c, v in zip(self.key_columns, key, strict=True)
        )


@dataclass(slots=True)
class _Plan:
    columns: list[str]
    kinds: list[str]
    key_idx: list[int]
    src_select: str
    src_key: str
    dst_select: str
    dst_key: str


def _plan(
    src: Connection,
    dst: Connection,
    db: str,
    table: str,
    target_db: str,
    src_cols: list[Column],
    dst_cols: list[Column],
    key: list[str],
) -> _Plan:
    by_name = {c.name: c for c in dst_cols}
    names = [c.name for c in src_cols]
    text_keys = {c.name for c in src_cols if c.is_text}
    binary = src.kind != dst.kind

    def keys(conn: Connection) -> str:
        return ", ".join(conn.key_expr(k, binary_text=binary and k in text_keys) for k in key)

    return _Plan(
        columns=names,
        kinds=[
            column_kind(
                c.data_type,
                by_name[c.name].data_type,
                is_json=c.is_json or by_name[c.name].is_json,
                cross=binary,
            )
            for c in src_cols
        ],
        key_idx=[names.index(k) for k in key],
        src_select=f"SELECT {', '.join(map(src.quote, names))} FROM {src.table_ref(db, table)}",
        src_key=keys(src),
        dst_select=(
            f"SELECT {', '.join(map(dst.quote, names))} FROM {dst.table_ref(target_db, table)}"
        ),
        dst_key=keys(dst),
    )


def _bounds(key_sql: str, n: int, lower: bool, upper: bool) -> str:
    marks = ", ".join(["%s"] * n)
    conds = []
    if lower:
        conds.append(f"({key_sql}) > ({marks})")
    if upper:
        conds.append(f"({key_sql}) <= ({marks})")
    return f" WHERE {' AND '.join(conds)}" if conds else ""


def _checksum(rows: Iterable[Canonical]) -> tuple[int, int]:
    count = acc = 0
    for row in rows:
        count += 1
        acc ^= row_digest(row)
    return count, acc


def compare_table(
    src: Connection,
    dst: Connection,
    db: str,
    table: str,
    *,
    target_db: str | None = None,
    chunk_size: int = 1000,
) -> TableResult:
    """Compare ``db.table`` on ``src`` with ``target_db.table`` on ``dst`` (see the module
    docstring). Raises VerifyError when the source table is missing or has no primary
    key; a missing target table or column is a mismatch, reported in ``problem``."""
    target_db = target_db or db
    result = TableResult(f"{db}.{table}", f"{target_db}.{table}")
    src_cols = src.columns(db, table)
    if not src_cols:
        raise VerifyError(f"{db}.{table}: no such table on the source {src.endpoint}")
    key = src.primary_key(db, table)
    if not key:
        raise VerifyError(f"{db}.{table}: no primary key, so no chunks to compare by")
    result.key_columns = tuple(key)
    dst_cols = dst.columns(target_db, table)
    if not dst_cols:
        result.problem = "table missing in the target"
        result.rows = int(src.rows(f"SELECT COUNT(*) FROM {src.table_ref(db, table)}")[0][0])
        return result
    absent = [c.name for c in src_cols if c.name not in {d.name for d in dst_cols}]
    if absent:
        result.problem = f"columns missing in the target: {', '.join(absent)}"
        return result
    plan = _plan(src, dst, db, table, target_db, src_cols, dst_cols, key)
    missing: dict[tuple[str | None, ...], Canonical] = {}
    extra: dict[tuple[str | None, ...], Canonical] = {}
    lower: tuple[Any, ...] | None = None
    while True:
        where = _bounds(plan.src_key, len(key), lower is not None, False)
        raw = src.rows(
            f"{plan.src_select}{where} ORDER BY {plan.src_key} LIMIT {int(chunk_size)}",
            lower or (),
        )
        last = len(raw) < chunk_size
        upper = None if last else tuple(raw[-1][i] for i in plan.key_idx)
        where = _bounds(plan.dst_key, len(key), lower is not None, upper is not None)
        params = (*(lower or ()), *(upper or ()))
        src_rows = [canonical_row(r, plan.kinds) for r in raw]
        dst_rows = [
            canonical_row(r, plan.kinds) for r in dst.stream(plan.dst_select + where, params)
        ]
        result.chunks += 1
        result.rows += len(src_rows)
        result.target_rows += len(dst_rows)
        if _checksum(src_rows) != _checksum(dst_rows):
            _drill(plan, result, src_rows, dst_rows, missing, extra)
        if last:
            break
        lower = upper
    for k in sorted(missing.keys() & extra.keys(), key=repr):
        # Both servers hold this key, but ordered it into different chunks.
        a, b = missing.pop(k), extra.pop(k)
        if a != b:
            result.differences.append(Difference("different", k, _diff_columns(plan, a, b)))
    result.differences += [Difference("missing", k) for k in missing]
    result.differences += [Difference("extra", k) for k in extra]
    return result


def _diff_columns(plan: _Plan, a: Canonical, b: Canonical) -> tuple[str, ...]:
    return tuple(c for c, x, y in zip(plan.columns, a, b, strict=True) if x != y)


def _drill(
    plan: _Plan,
    result: TableResult,
    src_rows: list[Canonical],
    dst_rows: list[Canonical],
    missing: dict[tuple[str | None, ...], Canonical],
    extra: dict[tuple[str | None, ...], Canonical],
) -> None:
    def keyed(rows: list[Canonical]) -> dict[tuple[str | None, ...], Canonical]:
        return {tuple(r[i] for i in plan.key_idx): r for r in rows}

    a, b = keyed(src_rows), keyed(dst_rows)
    for k, row in a.items():
        other = b.get(k)
        if other is None:
            missing[k] = row
        elif other != row:
            result.differences.append(Difference("different", k, _diff_columns(plan, row, other)))
    for k, row in b.items():
        if k not in a:
            extra[k] = row

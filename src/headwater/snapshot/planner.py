"""Planning a snapshot on the driver: tables -> chunk key -> chunk boundaries -> state.

The table definitions come from the reader task's schema history (what the sinks will
use), the key columns' charsets and collations from the source's information_schema
(what the server orders by), the boundaries from :func:`~headwater.snapshot.chunking.
plan_boundaries` over the live table.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from headwater.errors import ConfigError
from headwater.snapshot.changelog import SnapshotLog
from headwater.snapshot.chunking import SqlKeySpace, plan_boundaries
from headwater.snapshot.keys import KeyColumn, KeyOrder, choose_key, encode_key
from headwater.snapshot.state import SnapshotState

__all__ = ["key_order", "parse_tables", "plan_state"]

log = logging.getLogger(__name__)


def parse_tables(text: str | Sequence[str]) -> list[tuple[str, str]]:
    """``db.t1,db.t2`` (or a list) as ``[(db, t1), (db, t2)]``; ConfigError otherwise."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[tuple[str, str]] = []
    for item in (i.strip() for i in items):
        db, dot, table = item.partition(".")
        if not dot or not db or not table:
            raise ConfigError(f"expected db.table, got {item!r}", field="tables")
        if (db, table) not in out:
            out.append((db, table))
    if not out:
        raise ConfigError("no tables to snapshot", field="tables")
    return out


def key_order(doc: Sequence[Mapping[str, Any]]) -> KeyOrder:
    return KeyOrder(
        tuple(
            KeyColumn(d["name"], d["data_type"], d.get("charset"), d.get("collation")) for d in doc
        )
    )


def _key_columns(
    conn: Any, db: str, table: str, names: Sequence[str], types: Mapping[str, str]
) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT COLUMN_NAME, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (db, table),
        )
        found = {str(r[0]): (r[1], r[2]) for r in cur.fetchall()}
    out = []
    for n in names:
        charset, collation = found.get(n, (None, None))
        if types[n] in ("enum", "set"):
            raise ConfigError(
                f"{db}.{table}: {types[n].upper()} column {n!r} cannot be a chunk key"
            )
        out.append({"name": n, "data_type": types[n], "charset": charset, "collation": collation})
    return out


def plan_state(
    conn: Any,
    tlog: SnapshotLog,
    *,
    source: str,
    tables: Sequence[tuple[str, str]],
    chunk_rows: int,
    keys: Mapping[str, Sequence[str]] | None = None,
) -> SnapshotState:
    """A fresh state: every table's chunk key and chunk boundaries (module docstring)."""
    planned: dict[str, dict[str, Any]] = {}
    for db, table in tables:
        name = f"{db}.{table}"
        tdef = tlog.table_def(db, table)
        if tdef is None:
            raise ConfigError(
                f"{name} is not in the reader's schema history (is it captured by the reader?)",
                field="tables",
            )
        key = choose_key(tdef, (keys or {}).get(name))
        types = {c.name: c.data_type for c in tdef.columns}
        key_doc = _key_columns(conn, db, table, key, types)
        order = key_order(key_doc)
        space = SqlKeySpace(conn, db, table, key, order.python_exact)
        method, bounds = plan_boundaries(space, chunk_rows)
        edges: list[Any] = [None, *bounds, None]
        chunks = [
            {"id": f"{name}#{i}", "lo": encode_key(edges[i]), "hi": encode_key(edges[i + 1])}
            for i in range(len(edges) - 1)
        ]
        planned[name] = {"key": key_doc, "method": method, "chunks": chunks}
        log.info("snapshot plan: %s: %d chunks by %s on %s", name, len(chunks), method, key)
    ref = tlog.ref
    return SnapshotState(
        uuid.uuid4().hex[:12], source, ref.task_dir, planned, server=ref.server, task=ref.task
    )

"""Table definitions and their history over the log (DESIGN.md, decision 2).

* :mod:`.model`: :class:`TableDef` and :class:`Column`, the canonical definitions both
  sources produce;
* :mod:`.introspect`: definitions read from ``information_schema``;
* :mod:`.ddl`: DDL statements of the log applied to definitions (sqlglot, MySQL dialect);
* :mod:`.history`: :class:`SchemaHistory`, definitions keyed by position, persisted beside
  the change log, cross-checked against TABLE_MAP metadata.
"""

from __future__ import annotations

from headwater.schema.ddl import Catalog, DdlKind, DdlResult, apply_ddl
from headwater.schema.history import SchemaHistory, definition_from_table_map
from headwater.schema.introspect import read_database_charsets, read_server_charset, read_tables
from headwater.schema.model import Column, TableDef, TableKey

__all__ = [
    "Catalog",
    "Column",
    "DdlKind",
    "DdlResult",
    "SchemaHistory",
    "TableDef",
    "TableKey",
    "apply_ddl",
    "definition_from_table_map",
    "read_database_charsets",
    "read_server_charset",
    "read_tables",
]

"""``headwater verify``: does every target table equal its source?

Compares tables on two servers (MySQL/MariaDB or PostgreSQL, in any pairing) by chunked
checksums over primary key ranges and reports the exact differing keys: missing in the
target, extra in the target, or different values (with the columns). Usable on its own,
like pt-table-checksum, and used by ``headwater demo``::

    source = parse_endpoint("mysql://root@127.0.0.1:3306/shop", role="source")
    target = parse_endpoint("postgresql://hw@pg:5432/warehouse", role="target")
    report = verify(source, target, VerifyOptions(database_map=(("shop", "shop"),)))
    report.mismatches            # 0 when every table is equal

Values are compared by a canonical text that is the same across products
(:mod:`headwater.verify.canonical`); the chunk walk is in :mod:`headwater.verify.compare`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headwater.errors import ConfigError
from headwater.verify.compare import Difference, TableResult, compare_table
from headwater.verify.endpoints import (
    Connection,
    Endpoint,
    VerifyError,
    connect,
    parse_endpoint,
)

__all__ = [
    "Difference",
    "Endpoint",
    "TableResult",
    "VerifyError",
    "VerifyOptions",
    "VerifyReport",
    "compare_table",
    "parse_endpoint",
    "verify",
]


@dataclass(frozen=True, slots=True)
class VerifyOptions:
    """What to compare. ``tables``: ``db.table`` names (default: every base table of the
    source URL's database); ``database_map``: source database -> target database
    (PostgreSQL: schema), others keep their name; ``chunk_size``: rows per chunk."""

    tables: tuple[str, ...] = ()
    database_map: tuple[tuple[str, str], ...] = ()
    chunk_size: int = 1000


@dataclass(slots=True)
class VerifyReport:
    """Every table's result, in the order compared."""

    tables: list[TableResult] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """Source rows compared."""
        return sum(t.rows for t in self.tables)

    @property
    def mismatches(self) -> int:
        return sum(t.mismatches for t in self.tables)


def verify(
    source: Endpoint, target: Endpoint, options: VerifyOptions | None = None
) -> VerifyReport:
    """Compare the tables (see the module docstring). Raises VerifyError when a server
    cannot be reached, no tables are named or found, or a source table has no primary key;
    ConfigError for a malformed table name."""
    options = options or VerifyOptions()
    if options.chunk_size < 1:
        raise VerifyError("the chunk size must be at least 1")
    mapping = dict(options.database_map)
    report = VerifyReport()
    with connect(source) as src, connect(target) as dst:
        for db, table in _tables(src, options):
            target_db = mapping.get(db, db)
            result = compare_table(
                src, dst, db, table, target_db=target_db, chunk_size=options.chunk_size
            )
            report.tables.append(result)
    return report


def _tables(src: Connection, options: VerifyOptions) -> list[tuple[str, str]]:
    if options.tables:
        out = []
        for name in options.tables:
            db, dot, table = name.partition(".")
            if not dot or not db or not table:
                raise ConfigError(f"expected DB.TABLE, got {name!r}", field="tables")
            out.append((db, table))
        return out
    db_name = src.endpoint.database
    if not db_name:
        raise VerifyError("name the tables (--tables db.t1,db.t2) or a database in the source URL")
    found = [(db_name, t) for t in src.tables(db_name)]
    if not found:
        raise VerifyError(f"the source database {db_name} has no tables")
    return found

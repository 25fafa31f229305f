"""The ``source: logs:`` section of a pipeline file, and the stream it configures.

The pipeline configuration (:mod:`headwater.pipeline.config`) hands this module the
section as plain values, as sink folders parse their own sections; errors are
:class:`~headwater.errors.ConfigError` naming the dotted field (the pipeline adds the file
and line). Fields::

    source:
      logs:
        name: app                 # source name (change rows' source; UMS namespace)
        path: /var/log/app        # directory (relative: to the pipeline file)
        files: "app.log*"         # glob of the files (rotated ones included)
        database: logs            # the database of the output tables
        record_start: '^\\d{4}-'  # optional: multi-line records (stack traces)
        idle_ms: 2000             # the newest record of a quiet file is complete after
        chunk_bytes: 8388608      # bytes of a file per Spark partition
        unknown_table: unknown
        heartbeat: {regex: 'HEARTBEAT (?P<ts>.+)', format: 'yyyy-MM-dd HH:mm:ss', table: heartbeat}
        groups: [...]             # headwater.logs.groups

Sinks need table definitions: :func:`write_schema` writes the output tables (UMS columns,
``ums_id_`` the primary key) as a schema history file, which the pipeline gives its sinks
as the source's ``schema.jsonl``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.errors import ConfigError
from headwater.logs.groups import LogRules, parse_rules

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from headwater.schema.model import TableDef

__all__ = ["LogSourceConfig", "log_changes", "parse_logs_section", "table_defs", "write_schema"]

_FIELDS = {
    "name",
    "path",
    "files",
    "database",
    "record_start",
    "idle_ms",
    "chunk_bytes",
    "unknown_table",
    "heartbeat",
    "groups",
}
#: Column types of the output tables in the SQL sinks (MariaDB terms; every sink maps them).
_SQL_TYPES = {
    "string": ("text", "text"),
    "int": ("int", "int(11)"),
    "bigint": ("bigint", "bigint(20)"),
    "double": ("double", "double"),
    "boolean": ("tinyint", "tinyint(1)"),
    "timestamp": ("datetime", "datetime(6)"),
}


@dataclass(frozen=True, slots=True)
class LogSourceConfig:
    name: str
    directory: Path
    files: str
    database: str
    rules: LogRules
    record_start: str | None = None
    idle_ms: int = 2000
    chunk_bytes: int = 8 << 20

    def options(self) -> dict[str, str]:
        """The ``headwater_logs`` data source's options."""
        out = {
            "path": str(self.directory),
            "files": self.files,
            "idleMs": str(self.idle_ms),
            "chunkBytes": str(self.chunk_bytes),
        }
        if self.record_start:
            out["recordStart"] = self.record_start
        return out


def _int(value: Any, path: str, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ConfigError(f"must be an integer from {lo} to {hi}", field=path)
    return value


def parse_logs_section(value: Any, *, base: Path, path: str = "source.logs") -> LogSourceConfig:
    """The section's values checked (module docstring)."""
    if not isinstance(value, dict):
        raise ConfigError("must be a mapping", field=path)
    for key in value:
        if key not in _FIELDS:
            expected = ", ".join(sorted(_FIELDS))
            raise ConfigError(f"unknown field; expected one of {expected}", field=f"{path}.{key}")
    for key in ("name", "path", "groups"):
        if key not in value:
            raise ConfigError("missing (required)", field=f"{path}.{key}")
    name = value["name"]
    if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", name):
        raise ConfigError("must be 1-64 letters, digits, '_', '.' or '-'", field=f"{path}.name")
    database = value.get("database", "logs")
    if not isinstance(database, str) or not re.match(r"^[A-Za-z0-9_]{1,64}$", database):
        raise ConfigError("must be a plain identifier", field=f"{path}.database")
    directory = Path(str(value["path"])).expanduser()
    directory = directory if directory.is_absolute() else base / directory
    record_start = value.get("record_start")
    if record_start is not None:
        if not isinstance(record_start, str) or not record_start:
            raise ConfigError("must be a regular expression", field=f"{path}.record_start")
        try:
            re.compile(record_start)
        except re.error as e:
            message = f"bad regular expression {record_start!r}: {e}"
            raise ConfigError(message, field=f"{path}.record_start") from None
    files = value.get("files", "*.log*")
    if not isinstance(files, str) or not files or "/" in files:
        raise ConfigError("must be a file name pattern (no /)", field=f"{path}.files")
    rules = parse_rules(
        value["groups"],
        unknown_table=value.get("unknown_table", "unknown"),
        heartbeat=value.get("heartbeat"),
        path=path,
    )
    return LogSourceConfig(
        name=name,
        directory=directory,
        files=files,
        database=database,
        rules=rules,
        record_start=record_start,
        idle_ms=_int(value.get("idle_ms", 2000), f"{path}.idle_ms", 0, 3_600_000),
        chunk_bytes=_int(value.get("chunk_bytes", 8 << 20), f"{path}.chunk_bytes", 1024, 1 << 34),
    )


def table_defs(config: LogSourceConfig) -> tuple[TableDef, ...]:
    """The output tables as table definitions (``ums_id_`` the primary key)."""
    from headwater.schema.model import Column, TableDef

    out = []
    for table, columns in config.rules.tables().items():
        cols = tuple(
            Column(
                name,
                _SQL_TYPES[kind][0],
                _SQL_TYPES[kind][1],
                nullable=name != "ums_id_",
                charset="utf8mb4" if kind == "string" else None,
            )
            for name, kind in columns
        )
        out.append(TableDef(config.database, table, cols, ("ums_id_",), charset="utf8mb4"))
    return tuple(out)


def write_schema(config: LogSourceConfig, path: Path) -> None:
    """The output tables as a schema history file at ``path`` (rewritten each start)."""
    from headwater.position import Position
    from headwater.schema.history import SchemaHistory

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    history = SchemaHistory.open(tmp)
    try:
        history.bootstrap({t.key: t for t in table_defs(config)}, Position(0, 0, 0))
    finally:
        history.close()
    tmp.replace(path)


def log_changes(spark: SparkSession, config: LogSourceConfig) -> DataFrame:
    """The streaming change rows of a log source (registers the data source)."""
    from headwater.logs.plan import structure
    from headwater.logs.source import LogFilesDataSource

    spark.dataSource.register(LogFilesDataSource)
    reader = spark.readStream.format("headwater_logs")
    # a backlog is cut into as many chunks as the session has cores (at least)
    options = {**config.options(), "partitions": str(spark.sparkContext.defaultParallelism)}
    for key, value in options.items():
        reader = reader.option(key, value)
    return structure(reader.load(), config.rules, source=config.name, database=config.database)

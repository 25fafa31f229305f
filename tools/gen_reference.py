"""Generate docs/reference.md from the configuration models.

    .venv/bin/python tools/gen_reference.py            # rewrite docs/reference.md
    .venv/bin/python tools/gen_reference.py --check    # exit 1 if it is out of date

The models are the frozen dataclasses of :mod:`headwater.config` (reader file),
:mod:`headwater.pipeline.config` (pipeline file), the sinks' configuration classes
the pipeline runner builds from ``sinks[i]`` entries, and
:class:`headwater.store.StoreOptions`. Types and defaults come from the dataclass fields;
descriptions from ``#:`` comments on a field, else the sentences of the class docstring
that name the field (````name````), else the short text in :data:`SECTIONS` below. The YAML
spelling of a field is not always its attribute name (``retention_age`` sets
``retention_age_s``; ``listen`` sets ``host`` and ``port``): each section maps them.

Every field of every model must appear in its section (or in its ``hidden`` set): a new
field without documentation makes this script fail, and ``tests/unit/test_docs.py`` fails
when docs/reference.md differs from what this script writes.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "reference.md"
KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


@dataclass(frozen=True)
class Row:
    """One YAML field: ``attr`` is the model attribute it sets (None: not a model field)."""

    yaml: str
    attr: str | None = None
    type: str | None = None
    default: str | None = None
    doc: str = ""
    size: bool = False


@dataclass(frozen=True)
class Section:
    """One YAML mapping (``path``) backed by ``model``; rows in the order shown."""

    path: str
    model: str
    rows: tuple[Row, ...]
    hidden: frozenset[str] = frozenset()
    intro: str = ""


def _import(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    obj = getattr(__import__(module, fromlist=[name]), name)
    assert isinstance(obj, type)
    return obj


# --- the sections --------------------------------------------------------------------------


READER: tuple[Section, ...] = (
    Section(
        "(top level)",
        "headwater.config.ReaderConfig",
        (
            Row("data_dir", "data_dir", doc="Directory holding one directory per task."),
            Row("sources", "sources", type="list of source", doc="At least one; see `sources[]`."),
            Row("server", "server", type="mapping", doc="The HTTP API; none without it."),
            Row(
                "console",
                "console",
                type="mapping",
                default="no local pipelines, 5 s",
                doc="The console the HTTP API serves (needs `server`); see `console`.",
            ),
        ),
        hidden=frozenset({"file"}),
    ),
    Section(
        "sources[]",
        "headwater.config.SourceConfig",
        (
            Row(
                "name", "name", doc="Task name: 1-64 letters, digits, `_ . -`; names its directory."
            ),
            Row("host", None, "string", "—", "The server (or give `hosts`)."),
            Row("port", None, "integer", "3306", "The server's port, with `host`."),
            Row(
                "hosts",
                "hosts",
                type="list of HOST:PORT",
                default="—",
                doc="Servers tried in order (failover); instead of `host`/`port`.",
            ),
            Row("user", "user", doc="Replication user."),
            Row(
                "password_file",
                "password",
                "path",
                "none (empty)",
                "File whose first line is the password; an inline `password` is refused.",
            ),
            Row("password_env", None, "string", "—", "Environment variable holding the password."),
            Row(
                "server_id", "server_id", doc="Replica id to register with, 1..4294967295; unique."
            ),
            Row("start", "start", "string or mapping", "latest", "First start only; see `start`."),
            Row("filters", "filters", "mapping", "all tables, all events", "See `filters`."),
            Row("heartbeat", "heartbeat", "mapping", "none", "See `heartbeat`."),
            Row(
                "chunk_bytes",
                "chunk_bytes",
                size=True,
                doc="Large transactions are stored in chunks of about this size (64KiB..64MiB).",
            ),
            Row(
                "heartbeat_period",
                "heartbeat_period",
                doc="Seconds between replication heartbeats; a server silent ~2x this is lost.",
            ),
            Row("reconnect", "reconnect", "mapping", None, "See `reconnect`."),
            Row("store", "store", "mapping", None, "See `store`."),
            Row(
                "state_interval",
                "state_interval",
                doc="Seconds between persisted resume points.",
            ),
            Row("tls", "tls", "mapping", "mode preferred", "TLS to the source; see `tls`."),
        ),
    ),
    Section(
        "sources[].tls",
        "headwater.config.TlsConfig",
        (
            Row(
                "mode",
                "mode",
                doc="As MySQL's `--ssl-mode`: `disabled`, `preferred` (TLS when offered, "
                "unverified), `required` (TLS or no connection), `verify_ca` (and the "
                "certificate checked against `ca`), `verify_identity` (and its host name).",
            ),
            Row("ca", "ca", "path", "system CAs", "CA file (`verify_ca`, `verify_identity`)."),
            Row("cert", "cert", "path", "none", "Client certificate (`required` and up)."),
            Row("key", "key", "path", "none", "The client certificate's key."),
        ),
    ),
    Section(
        "sources[].start",
        "headwater.config.StartConfig",
        (
            Row(
                "earliest, latest",
                "kind",
                "string",
                "latest",
                "As a plain string: the oldest binlog on the server, or its current end.",
            ),
            Row("file", "coordinate", "string", "—", "Binlog file name (with `offset`)."),
            Row("offset", None, "integer", "4", "Byte offset in `file`."),
            Row("gtid", "gtid_set", "GTID set", "—", "Start after these GTIDs."),
            Row(
                "timestamp",
                "ts_us",
                "ISO 8601 time or epoch seconds",
                "—",
                "First transaction committed at or after it (no zone: UTC).",
            ),
        ),
        intro="A plain string, or a mapping with exactly one of `file`, `gtid`, `timestamp`.",
    ),
    Section(
        "sources[].filters",
        "headwater.config.FilterConfig",
        (
            Row("include", "include", doc="Anchored regexes over `db.table`; empty keeps all."),
            Row("exclude", "exclude", doc="Anchored regexes over `db.table`."),
            Row("events", "events", doc="Any of `insert`, `update`, `delete`, `ddl`."),
        ),
    ),
    Section(
        "sources[].heartbeat",
        "headwater.config.HeartbeatConfig",
        (
            Row("table", "table", doc="`db.table` on the source."),
            Row("interval", "interval", doc="Seconds between heartbeat rows."),
            Row("create", "create", doc="Create the table when missing."),
        ),
    ),
    Section(
        "sources[].reconnect",
        "headwater.config.BackoffConfig",
        (
            Row("initial", "initial", doc="First delay, seconds."),
            Row("max", "max", doc="Longest delay, seconds."),
            Row("max_attempts", "max_attempts", doc="0: retry forever."),
        ),
    ),
    Section(
        "sources[].store",
        "headwater.config.StoreConfig",
        (
            Row("durability", "durability", doc="`fsync`, `group` or `none` (`StoreOptions`)."),
            Row("segment_bytes", "segment_bytes", size=True, doc="Segment roll size."),
            Row("retention_age", "retention_age_s", doc="Seconds; see `StoreOptions`."),
            Row("retention_bytes", "retention_bytes", size=True, doc="See `StoreOptions`."),
        ),
    ),
    Section(
        "server",
        "headwater.config.ServerConfig",
        (
            Row("listen", "host", "HOST:PORT", "127.0.0.1:8484", "Port 0: any free port."),
            Row("token_file", "token", "path", "none", "File whose first line is the token."),
            Row("token_env", None, "string", "none", "Environment variable holding the token."),
            Row("max_rows", "max_rows", doc="The most rows a fetch may ask for."),
            Row("max_bytes", "max_bytes", size=True, doc="The most bytes a fetch may ask for."),
            Row("max_wait", "max_wait_s", doc="Longest long-poll, seconds."),
            Row(
                "max_connections",
                "max_connections",
                doc="Open connections at most; one more closes the longest-idle one, "
                "or gets 503 when all are in requests.",
            ),
            Row(
                "idle_timeout",
                "idle_timeout_s",
                doc="Seconds a connection may stay idle between requests.",
            ),
            Row(
                "header_timeout",
                "header_timeout_s",
                doc="Seconds per read while a client sends a request.",
            ),
            Row("backlog", "backlog", doc="Listen queue length."),
            Row(
                "fetch_workers",
                "fetch_workers",
                doc="Processes that build fetch responses (0: the reader's own threads).",
            ),
        ),
        hidden=frozenset({"port"}),
    ),
    Section(
        "console",
        "headwater.config.ConsoleConfig",
        (
            Row(
                "pipelines",
                "pipelines",
                type="list of paths",
                default="[]",
                doc="Local pipelines to show: a checkpoint directory (its `status.json`) or "
                "the status file itself.",
            ),
            Row(
                "sample_interval",
                "sample_interval",
                doc="Seconds between samples of each task (lag, ingest) and points of a "
                "pipeline's lag chart (0.1..3600).",
            ),
            Row("refresh_interval", "refresh_interval", doc="Seconds between page reloads."),
        ),
    ),
)

_CONNECTION = (
    Row("host", "host", doc="Target server."),
    Row("port", "port", doc="Give 5432 for PostgreSQL (the default is MySQL's)."),
    Row("user", "user", doc="Target user."),
    Row("password_file", "password_file", doc="First line is the password (read at connect)."),
    Row("password_env", "password_env", doc="Environment variable holding the password."),
    Row("database", "database", doc="Database to connect to (PostgreSQL: required in practice)."),
    Row("connect_timeout_s", "connect_timeout_s", doc="Seconds."),
    Row("session", "session", "mapping", "{}"),
)

_SQL_SINK = (
    Row("create_tables", "create_tables", doc="Create missing target tables from the schema."),
    Row(
        "ddl",
        "ddl",
        doc="Schema changes of the source: `evolve`, `lenient`, `ignore`, `fail`"
        " (older `apply` = evolve, `skip` = ignore); see configuration.md, Schema changes.",
    ),
    Row("database_map", "database_map", "mapping", "{}"),
    Row("shards", "shards"),
    Row("batch_rows", "batch_rows"),
    Row("checkpoint_database", "checkpoint_database", doc="Where `headwater_checkpoint` lives."),
    Row("zero_dates", "zero_dates"),
    Row("retry", "retry", "mapping", None, "See `retry`."),
    Row("schema_file", None, "path", "the task's schema.jsonl", "Required with a `server` source."),
)

PIPELINE: tuple[Section, ...] = (
    Section(
        "(top level)",
        "headwater.pipeline.config.PipelineConfig",
        (
            Row("name", "name", doc="Spark app and query name; key of the checkpoint table rows."),
            Row("source", "source", "mapping", doc="See `source`."),
            Row("checkpoint", "checkpoint", doc="Spark checkpoint location (a directory)."),
            Row("transforms", "transforms", "list", "[]", "See docs/configuration.md."),
            Row("sinks", "sinks", "list of sinks", doc="At least one; see the sink sections."),
            Row("spark.master", "master", doc="Spark master URL."),
            Row("spark.conf", "spark_conf", "mapping", "{}", "Spark configuration."),
            Row(
                "trigger", "trigger_s", doc="Seconds between micro-batches; 0 as fast as possible."
            ),
            Row("progress", "progress_s", doc="Seconds between progress lines on stderr."),
            Row("snapshot", "snapshot", "mapping", "none", "See `snapshot`."),
            Row("monitoring", "monitoring", "mapping", "defaults", "See `monitoring`."),
        ),
        hidden=frozenset({"file"}),
    ),
    Section(
        "monitoring",
        "headwater.pipeline.config.MonitoringSettings",
        (
            Row(
                "lag_warning_s",
                "lag_warning_s",
                doc="Lag over this: a WARNING, red in the console.",
            ),
            Row(
                "metrics_file",
                "metrics_file",
                "path",
                "<checkpoint>/metrics.prom",
                "Prometheus text.",
            ),
            Row("report", "report", doc="POST the status to a `server` source's /v1/pipelines."),
        ),
        intro="Status file, metrics and console reports (docs/operations.md).",
    ),
    Section(
        "snapshot",
        "headwater.pipeline.config.SnapshotSettings",
        (
            Row("host", None, "string", doc="The source server snapshots read (required)."),
            Row("port", None, "integer", "3306", "Its port."),
            Row("user", None, "string", "root", "User (needs SELECT on the tables)."),
            Row("password_file", None, "path", "none", "File whose first line is the password."),
            Row("password_env", None, "string", "none", "Environment variable with the password."),
            Row("connect_timeout_s", None, "number", "10", "Connect timeout, seconds."),
            Row("signal_table", "signal_table", doc="Watched for snapshot signals."),
            Row("chunk_rows", "chunk_rows", doc="Rows per snapshot chunk."),
        ),
        hidden=frozenset({"connection"}),
        intro="A running pipeline re-snapshots the tables a signal names (docs/operations.md).",
    ),
    Section(
        "source",
        "headwater.spark.offsets.SourceOptions",
        (
            Row("path", "path", doc="A reader task directory (or give `server`)."),
            Row(
                "server",
                "server",
                "string or list",
                doc="Base URL of a reader's HTTP API; a list of a reader cluster's URLs, "
                "or `zookeeper://HOST:PORT,...` to find the task's readers there "
                "(docs/operations.md).",
            ),
            Row(
                "task",
                "task",
                "string",
                "the directory's name",
                "Task name; required with `server`.",
            ),
            Row("tables", "tables", "list of db.table or db.*", "all", "Tables to read."),
            Row(
                "starting_position",
                "starting",
                "string",
                "earliest",
                "First start only: `earliest`, `latest`, `seq:N`, `timestamp:T`, `gtid:SET`, "
                "`FILE:OFFSET`.",
            ),
            Row("max_rows_per_trigger", "max_rows", doc="Rows per micro-batch."),
            Row("partitions", "partitions", doc="Input partitions per micro-batch."),
            Row(
                "token_file",
                None,
                "path",
                "none",
                "With `server`: file whose first line is the API token (read on the driver; "
                "only the path is a Spark option).",
            ),
            Row(
                "token_env",
                None,
                "string",
                "none",
                "With `server`: environment variable holding the API token (the driver's). "
                "An inline `token` is refused.",
            ),
            Row(
                "options",
                None,
                "mapping",
                "{}",
                "Other source options as strings: `ddl`, `source`, `endingPosition`, "
                "`maxBytesPerTrigger`, `minBytesPerPartition` (bytes a slice holds at least, "
                "1 MiB by default), `burstWaitMs` (after an idle stream, how long a burst may "
                "take to land before its micro-batch is cut; 200 by default), `burstQuietMs` "
                "(50), `burstCatchUpMs` (how long a catch-up's burst may land, its newest "
                "record committed 2 s or more ago; 1000), "
                "`idleAdvanceMs` (how long an end offset that only passes records the pipeline "
                "does not read is held back; see docs/configuration.md), `driverApplyMaxRows` "
                "(a micro-batch of at most this many rows is applied in the driver, without a "
                "Spark job; 25000 by default, 0: never; docs/operations.md), `netApply` (a "
                "larger micro-batch is applied as each key's last write, read key-first; true "
                "by default; docs/architecture.md), `columns` (the "
                "change-row columns the source builds; a pipeline sets it to what its plan "
                "reads; docs/formats.md).",
            ),
        ),
        hidden=frozenset(
            {
                "token",
                "ddl",
                "source",
                "ending",
                "max_bytes",
                "min_partition_bytes",
                "burst_wait_ms",
                "burst_quiet_ms",
                "burst_catch_up_ms",
                "idle_advance_ms",
                "direct_max_rows",
                "net_apply",
                "columns",
            }
        ),
    ),
    Section(
        "sinks[] type: mysql",
        "headwater.sinks.mysql.configuration.MysqlSinkConfig",
        _SQL_SINK,
        hidden=frozenset({"pipeline", "connection", "schema"}),
        intro="MySQL and MariaDB targets; also every field of the connection table below.",
    ),
    Section(
        "sinks[] type: postgres",
        "headwater.sinks.postgres.configuration.PostgresSinkConfig",
        _SQL_SINK,
        hidden=frozenset({"pipeline", "connection", "schema"}),
        intro="PostgreSQL targets; also every field of the connection table below.",
    ),
    Section(
        "sinks[] (mysql, postgres): connection",
        "headwater.connections.TargetConnection",
        _CONNECTION,
        # the password read on the driver, carried to executors in the pickled task
        hidden=frozenset({"_password"}),
    ),
    Section(
        "sinks[] (mysql, postgres): retry",
        "headwater.sinks.base.RetryPolicy",
        (
            Row("attempts", "attempts"),
            Row("base_delay_s", "base_delay_s"),
            Row("max_delay_s", "max_delay_s"),
        ),
    ),
    Section(
        "sinks[] type: parquet_log",
        "headwater.sinks.files.configuration.ParquetLogConfig",
        (
            Row("path", "path"),
            Row(
                "ddl",
                "ddl",
                doc="`fail` stops at the first schema change; the other modes write DDL rows"
                " as rows (formats.md, Parquet change log).",
            ),
        ),
    ),
    Section(
        "sinks[] type: parquet_mirror",
        "headwater.sinks.files.configuration.MirrorConfig",
        (
            Row("path", "path"),
            Row("buckets", "buckets"),
            Row("partition_column", "partition_column"),
            Row("shards", "shards"),
            Row(
                "ddl",
                "ddl",
                doc="Schema changes of the source: `evolve`, `lenient`, `ignore`, `fail` (older"
                " `apply`, `skip`); formats.md, Parquet mirror.",
            ),
            Row(
                "schema_file",
                None,
                "path",
                "the task's schema.jsonl",
                "Required with a `server` source.",
            ),
        ),
        hidden=frozenset({"schema"}),
    ),
    Section(
        "sinks[] type: ums",
        "headwater.sinks.ums.configuration.UmsConfig",
        (
            Row("path", "path", doc="Directory of the batches (relative to the file)."),
            Row("max_rows", "max_rows", doc="Changes per UMS message."),
        ),
    ),
    Section(
        "sinks[] type: kafka",
        "headwater.sinks.kafka.configuration.KafkaConfig",
        (
            Row("bootstrap_servers", "bootstrap_servers"),
            Row("partitioning", "partitioning", doc="`key` or `single`."),
            Row("delivery", "delivery", doc="`at_least_once` or `exactly_once`."),
            Row("tasks", "tasks", doc="Spark tasks writing (`partitioning: key`); 1: no shuffle."),
            Row("create_topics", "create_topics"),
            Row("partitions", "partitions", doc="Partitions of the topics it creates."),
            Row("positions_topic", "positions_topic", doc="`exactly_once`: batch positions."),
            Row("producer", "producer", "map", "{}", "librdkafka settings (no secrets)."),
            Row("timeout_s", "timeout_s"),
            Row("format, topic, ...", "bus", "fields", "—", "The bus fields below."),
        ),
        hidden=frozenset({"pipeline"}),
        intro="Kafka topics ([sinks-bus.md](sinks-bus.md)).",
    ),
    Section(
        "sinks[] type: nats",
        "headwater.sinks.nats.configuration.NatsConfig",
        (
            Row("url", "url"),
            Row("stream", "stream"),
            Row("ordering", "ordering", doc="`table` or `global`."),
            Row("tasks", "tasks"),
            Row("duplicate_window_s", "duplicate_window_s"),
            Row("window", "window", doc="Publishes awaiting their acknowledgement at once."),
            Row("timeout_s", "timeout_s"),
            Row("format, topic, ...", "bus", "fields", "—", "The bus fields below (subjects)."),
        ),
        intro="NATS JetStream subjects ([sinks-bus.md](sinks-bus.md)).",
    ),
    Section(
        "sinks[] type: redis",
        "headwater.sinks.redis.configuration.RedisConfig",
        (
            Row("host", "host"),
            Row("port", "port"),
            Row("db", "db"),
            Row("password_env", "password_env"),
            Row("password_file", "password_file"),
            Row("ordering", "ordering", doc="`table` or `global`."),
            Row("tasks", "tasks"),
            Row("timeout_s", "timeout_s"),
            Row("format, topic, ...", "bus", "fields", "—", "The bus fields below (stream keys)."),
        ),
        hidden=frozenset({"_password"}),  # resolved on the driver, carried to executors
        intro="Redis Streams ([sinks-bus.md](sinks-bus.md)).",
    ),
    Section(
        "sinks[] (kafka, nats, redis): bus fields",
        "headwater.sinks.bus.messages.BusOptions",
        (
            Row("format", "format", doc="`change_row`, `debezium` or `ums`."),
            Row("topic", "topic", doc="Template: `{source}`, `{database}`, `{table}`."),
            Row("schema_topic", "schema_topic", doc="Where DDL messages go (a template)."),
            Row("tombstones", "tombstones"),
            Row("ums_max_rows", "ums_max_rows"),
        ),
        intro="Defaults shown are Kafka's; NATS and Redis have their own `topic` and "
        "`schema_topic` defaults ([sinks-bus.md](sinks-bus.md)).",
    ),
)

STORE: tuple[Section, ...] = (
    Section(
        "StoreOptions (Python API)",
        "headwater.store.options.StoreOptions",
        (
            Row("segment_bytes", "segment_bytes", size=True),
            Row("roll_interval_s", "roll_interval_s"),
            Row("durability", "durability", doc="When an append is acknowledged; `Durability`."),
            Row("group_commit_ms", "group_commit_ms", doc="`group`: longest time between syncs."),
            Row(
                "group_commit_bytes",
                "group_commit_bytes",
                size=True,
                doc="`group`: sync as soon as this much is unsynced.",
            ),
            Row(
                "max_pending_bytes",
                "max_pending_bytes",
                size=True,
                doc="Appends wait for a sync beyond this much unsynced data.",
            ),
            Row(
                "memory_tail_bytes",
                "memory_tail_bytes",
                size=True,
                doc="Recent records kept in memory for tailing readers.",
            ),
            *(
                Row(name, name, size=name.endswith("_bytes"))
                for name in (
                    "index_interval_bytes",
                    "retention_age_s",
                    "retention_bytes",
                    "compress_after_s",
                    "maintenance_interval_s",
                )
            ),
            Row("compress_level", "compress_level", doc="zstd level."),
            Row("compress_block_bytes", "compress_block_bytes", size=True, doc="zstd block size."),
            Row("max_record_bytes", "max_record_bytes", size=True, doc="Largest record accepted."),
        ),
        intro=(
            "`headwater.store.StoreOptions` tunes one change log. A reader task builds it from "
            "its `store` section (`durability`, `segment_bytes`, `retention_age`, "
            "`retention_bytes`), sets `max_record_bytes` to the larger of 16MiB and twice "
            "`chunk_bytes`, and leaves the rest at these defaults."
        ),
    ),
)


# --- rendering -----------------------------------------------------------------------------


def _size(n: int) -> str:
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{name}"
    return str(n)


def _default(f: dataclasses.Field[Any], size: bool) -> str:
    if f.default is not dataclasses.MISSING:
        value: Any = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            return "(defaults below)"
    else:
        return "required"
    if value is None:
        return "none"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and size:
        return _size(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"' if value == "" else value
    return repr(value) if not isinstance(value, float) else f"{value:g}"


_TYPES = (
    (r"^tuple\[str, \.\.\.\]$", "list of string"),
    (r"^tuple\[tuple\[str, str\], \.\.\.\]$", "mapping"),
    (r"^str \| None$", "string"),
    (r"^int \| None$", "integer or none"),
    (r"^float \| None$", "number or none"),
    (r"^str$", "string"),
    (r"^int$", "integer"),
    (r"^float$", "number"),
    (r"^bool$", "boolean"),
    (r"^Path$", "path"),
    (r"^DdlMode$", "evolve, lenient, ignore or fail"),
    (r"^Durability$", "fsync, group or none"),
)


def _type(f: dataclasses.Field[Any], size: bool) -> str:
    text = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    if size:
        return "size" + (" or none" if "None" in text else "")
    for pattern, name in _TYPES:
        if re.match(pattern, text):
            return name
    return text


def _field_docs(model: type) -> tuple[dict[str, str], dict[str, str]]:
    """Docstring sentences naming ````field````, and ``#:`` comments above fields."""
    out: dict[str, str] = {}
    comments: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not dataclasses.is_dataclass(cls):
            continue
        try:
            lines = inspect.getsource(cls).splitlines()
        except (OSError, TypeError):
            continue
        pending: list[str] = []
        for line in lines:
            s = line.strip()
            if s.startswith("#:"):
                pending.append(s[2:].strip())
                continue
            m = re.match(r"^([a-z_][a-z0-9_]*)\s*:", s)
            if m and pending:
                comments[m.group(1)] = " ".join(pending)
            pending = []
        doc = inspect.cleandoc(cls.__doc__ or "")
        sentences = re.split(r"(?<=[.;])\s+(?=[A-Z`(])", " ".join(doc.split()))
        for f in dataclasses.fields(cls):
            hits = [s for s in sentences if f"``{f.name}``" in s]
            if hits:
                out[f.name] = " ".join(hits)

    def clean(d: dict[str, str]) -> dict[str, str]:
        return {k: v.replace("``", "`").replace("|", "\\|") for k, v in d.items()}

    return clean(out), clean(comments)


def _section(sec: Section, level: str) -> list[str]:
    model = _import(sec.model)
    fields = {f.name: f for f in dataclasses.fields(model)}  # type: ignore[arg-type]
    covered = {r.attr for r in sec.rows if r.attr} | sec.hidden
    missing = sorted(set(fields) - covered)
    if missing:
        raise SystemExit(f"{sec.model}: fields not in the reference: {', '.join(missing)}")
    unknown = sorted(r.attr for r in sec.rows if r.attr and r.attr not in fields)
    if unknown:
        raise SystemExit(f"{sec.model}: no such fields: {', '.join(unknown)}")
    docs, comments = _field_docs(model)
    out = [f"{level} `{sec.path}`", "", f"Model: `{sec.model}`."]
    summary = (inspect.getdoc(model) or "").split("\n\n")[0]
    if summary:
        out[-1] += " " + " ".join(summary.split()).replace("``", "`").replace(":class:", "")
    if sec.intro:
        out += ["", sec.intro]
    out += ["", "| field | type | default | description |", "|---|---|---|---|"]
    for row in sec.rows:
        f = fields.get(row.attr) if row.attr else None
        typ = row.type or (_type(f, row.size) if f else "")
        default = row.default or (_default(f, row.size) if f else "—")
        doc = row.doc or docs.get(row.attr or "", "")
        comment = comments.get(row.attr or "")
        if comment and comment not in doc:
            doc = f"{doc} {comment}".strip()
        doc = doc.replace(":class:", "")
        out.append(f"| `{row.yaml}` | {typ} | {default} | {doc} |".replace("*)", "\\*)"))
    return [*out, ""]


HEADER = """\
# Configuration reference

<!-- GENERATED by tools/gen_reference.py from the configuration models; do not edit.
     tests/unit/test_docs.py fails when this file is out of date. -->

Every field of the reader file (`headwater reader run --config`), the pipeline file
(`headwater pipeline run --config`, `headwater snapshot --config`) and the change log
options, with its type and default. Explanations and complete examples are in
[configuration.md](configuration.md) and `examples/`. Sizes accept `B`, `KiB`, `MiB`,
`GiB` (and `KB`, `MB`, `GB`) where the type says `size`; `—` means no default (optional,
or one of alternatives). Unknown fields are errors in both files.
"""


def render() -> str:
    lines = [HEADER, "## Reader file", ""]
    for sec in READER:
        lines += _section(sec, "###")
    lines += ["## Pipeline file", ""]
    for sec in PIPELINE:
        lines += _section(sec, "###")
    lines += ["## Change log store", ""]
    for sec in STORE:
        lines += _section(sec, "###")
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is out of date: run tools/gen_reference.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Configuration of a Spark pipeline: one YAML file, loaded into frozen dataclasses.

Parsed with the reader configuration's helpers (:mod:`headwater.config`): every value keeps
the line it was written on, and every problem raises
:class:`~headwater.errors.ConfigError` naming the file, that line and the dotted field
(``transforms[2].mask.email.keep_last``). Unknown fields are errors. Relative paths
(``checkpoint``, ``source.path``, rule files, salt files) are relative to the directory of
the configuration file. Salts are read here and never appear in a message or ``repr``.

The format is documented in docs/configuration.md ("Pipeline").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from headwater.configfile import (
    YamlContext as _Ctx,
    boolean as _bool,
    compose,
    integer as _int,
    mapping as _mapping,
    number as _float,
    path_value as _path,
    read_config,
    string as _str,
    string_list as _str_list,
)
from headwater.connections import SourceConnection
from headwater.errors import ConfigError
from headwater.logs.config import LogSourceConfig, parse_logs_section
from headwater.sinks.section import SinkSection
from headwater.spark.rules import RuleError, load_rule_script
from headwater.spark.transforms import (
    ComputeSpec,
    ExcludeSpec,
    FilterSpec,
    IncludeSpec,
    MaskRule,
    MaskSpec,
    RenameColumnsSpec,
    RenameDatabaseSpec,
    RenameTableSpec,
    RuleSpec,
    TransformSpec,
    image_sql,
)

__all__ = [
    "ChangeStreamConfig",
    "MonitoringSettings",
    "PipelineConfig",
    "SinkSection",
    "SnapshotSettings",
    "load_pipeline_config",
    "parse_pipeline_config",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_IDENT = re.compile(r"^[A-Za-z0-9_$]+$")
_KINDS = (
    "filter",
    "include",
    "exclude",
    "rename_database",
    "rename_table",
    "rename_columns",
    "compute",
    "mask",
    "rule",
)


@dataclass(frozen=True, slots=True)
class ChangeStreamConfig:
    """The change stream: a reader task directory (``path``) or a server and task name,
    plus the Spark source options (strings, as Spark passes them)."""

    options: tuple[tuple[str, str], ...]
    schema_file: Path | None = None
    #: a log-file source (``source.logs``, headwater.logs.config) instead of a change log
    logs: LogSourceConfig | None = None

    def option_map(self) -> dict[str, str]:
        return dict(self.options)


@dataclass(frozen=True, slots=True)
class SnapshotSettings:
    """Snapshots a running pipeline starts itself: the source server they read
    (``connection``), the ``signal_table`` watched in the change stream (a snapshot signal
    there re-snapshots the tables it names; see :mod:`headwater.snapshot.signals`), and
    ``chunk_rows`` rows per chunk."""

    connection: SourceConnection
    signal_table: str = "headwater.signal"
    chunk_rows: int = 50_000


@dataclass(frozen=True, slots=True)
class MonitoringSettings:
    """The ``monitoring`` section (headwater.pipeline.status): ``lag_warning_s`` logs a
    WARNING and turns the pipeline red in the console when the lag passes it (None: no
    threshold); ``metrics_file`` for the Prometheus text (default
    ``<checkpoint>/metrics.prom``); ``report``: POST the status to a ``server:`` source."""

    lag_warning_s: float | None = None
    metrics_file: Path | None = None
    report: bool = True


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """A whole pipeline: source, transforms in order, sinks, checkpoint, Spark settings."""

    name: str
    source: ChangeStreamConfig
    checkpoint: Path
    # each sink's section, parsed by its folder when the pipeline builds it
    # (headwater.pipeline.sinks)
    sinks: tuple[SinkSection, ...]
    transforms: tuple[TransformSpec, ...] = ()
    master: str = "local[2]"
    spark_conf: tuple[tuple[str, str], ...] = ()
    trigger_s: float = 0.0
    progress_s: float = 10.0
    #: re-snapshots on signal (``snapshot`` section); None: signals are not watched
    snapshot: SnapshotSettings | None = None
    monitoring: MonitoringSettings = MonitoringSettings()
    file: str = "<config>"


def load_pipeline_config(
    path: str | os.PathLike[str], env: dict[str, str] | None = None
) -> PipelineConfig:
    """Load and validate a pipeline configuration file (see the module docstring)."""
    text, file, base = read_config(path)
    return parse_pipeline_config(text, file=file, base=base, env=env)


_TOP = {
    "name",
    "source",
    "checkpoint",
    "transforms",
    "sinks",
    "spark",
    "trigger",
    "progress",
    "snapshot",
    "monitoring",
}


def parse_pipeline_config(
    text: str,
    *,
    file: str = "<config>",
    base: Path | None = None,
    env: dict[str, str] | None = None,
) -> PipelineConfig:
    """Validate configuration text; ``base`` anchors relative paths (default: cwd)."""
    ctx = _Ctx(file, base or Path.cwd(), dict(os.environ) if env is None else env)
    root = compose(text, file)
    f = _mapping(ctx, root, "", _TOP, required={"name", "source", "checkpoint", "sinks"})
    name = _str(ctx, f["name"], "name")
    if not _NAME.match(name):
        raise ctx.error(f["name"], "name", "must be 1-64 letters, digits, '_', '.' or '-'")
    kw: dict[str, Any] = {}
    if "transforms" in f:
        kw["transforms"] = _transforms(ctx, f["transforms"], "transforms")
    if "spark" in f:
        sf = _mapping(ctx, f["spark"], "spark", {"master", "conf"})
        if "master" in sf:
            kw["master"] = _str(ctx, sf["master"], "spark.master")
        if "conf" in sf:
            kw["spark_conf"] = tuple(_string_map(ctx, sf["conf"], "spark.conf").items())
    if "trigger" in f:
        kw["trigger_s"] = _float(ctx, f["trigger"], "trigger", 0, 86400)
    if "progress" in f:
        kw["progress_s"] = _float(ctx, f["progress"], "progress", 0.1, 86400)
    if "snapshot" in f:
        kw["snapshot"] = _snapshot(ctx, f["snapshot"], "snapshot")
    if "monitoring" in f:
        kw["monitoring"] = _monitoring(ctx, f["monitoring"], "monitoring")
    sinks_node = f["sinks"]
    if not isinstance(sinks_node, yaml.SequenceNode) or not sinks_node.value:
        raise ctx.error(sinks_node, "sinks", "must be a non-empty list of sinks")
    sinks = tuple(_sink(ctx, n, f"sinks[{i}]") for i, n in enumerate(sinks_node.value))
    checkpoint = _path(ctx, f["checkpoint"], "checkpoint")
    source = _source(ctx, f["source"], "source")
    if source.logs is not None:  # its sinks see the output tables (headwater.logs.config)
        source = ChangeStreamConfig((), checkpoint / "logs-schema.jsonl", source.logs)
    return PipelineConfig(
        name=name,
        source=source,
        checkpoint=checkpoint,
        sinks=sinks,
        file=file,
        **kw,
    )


_SNAPSHOT = {
    "host",
    "port",
    "user",
    "password_file",
    "password_env",
    "connect_timeout_s",
    "signal_table",
    "chunk_rows",
}


def _snapshot(ctx: _Ctx, node: yaml.Node, path: str) -> SnapshotSettings:
    f = _mapping(ctx, node, path, _SNAPSHOT, required={"host"})
    conn: dict[str, Any] = {"host": _str(ctx, f["host"], f"{path}.host")}
    if "port" in f:
        conn["port"] = _int(ctx, f["port"], f"{path}.port", 1, 65535)
    if "user" in f:
        conn["user"] = _str(ctx, f["user"], f"{path}.user")
    if "password_file" in f:
        conn["password_file"] = str(_path(ctx, f["password_file"], f"{path}.password_file"))
    if "password_env" in f:
        conn["password_env"] = _str(ctx, f["password_env"], f"{path}.password_env")
    if "connect_timeout_s" in f:
        conn["connect_timeout_s"] = _float(
            ctx, f["connect_timeout_s"], f"{path}.connect_timeout_s", 0.1, 3600
        )
    kw: dict[str, Any] = {}
    if "signal_table" in f:
        table = _str(ctx, f["signal_table"], f"{path}.signal_table")
        db, dot, name = table.partition(".")
        if not dot or not _IDENT.match(db) or not _IDENT.match(name):
            raise ctx.error(f["signal_table"], f"{path}.signal_table", "expected db.table")
        kw["signal_table"] = table
    if "chunk_rows" in f:
        kw["chunk_rows"] = _int(ctx, f["chunk_rows"], f"{path}.chunk_rows", 1, 2**31)
    return SnapshotSettings(SourceConnection(**conn), **kw)


def _monitoring(ctx: _Ctx, node: yaml.Node, path: str) -> MonitoringSettings:
    f = _mapping(ctx, node, path, {"lag_warning_s", "metrics_file", "report"})
    kw: dict[str, Any] = {}
    if "lag_warning_s" in f:
        kw["lag_warning_s"] = _float(ctx, f["lag_warning_s"], f"{path}.lag_warning_s", 0, 1e7)
    if "metrics_file" in f:
        kw["metrics_file"] = _path(ctx, f["metrics_file"], f"{path}.metrics_file")
    if "report" in f:
        kw["report"] = _bool(ctx, f["report"], f"{path}.report")
    return MonitoringSettings(**kw)


# --- source and sinks -----------------------------------------------------------------------

_SOURCE = {
    "path",
    "server",
    "task",
    "tables",
    "starting_position",
    "max_rows_per_trigger",
    "partitions",
    "options",
    "logs",
    "token",
    "token_file",
    "token_env",
}


def _source(ctx: _Ctx, node: yaml.Node, path: str) -> ChangeStreamConfig:
    f = _mapping(ctx, node, path, _SOURCE)
    if "logs" in f:
        if len(f) > 1:
            raise ctx.error(node, path, "logs is the whole source: no other field beside it")
        try:
            logs = parse_logs_section(_plain(ctx, f["logs"], f"{path}.logs"), base=ctx.base)
        except ConfigError as e:
            message = str(e).split(": ", 1)[-1]
            raise ctx.error(f["logs"], e.field or f"{path}.logs", message) from None
        return ChangeStreamConfig((), None, logs)
    if ("path" in f) == ("server" in f):
        raise ctx.error(node, path, "give either path (a reader task directory) or server + task")
    options: dict[str, str] = {}
    lines: dict[str, yaml.Node] = {}
    schema_file = None
    if "path" in f:
        task_dir = _path(ctx, f["path"], f"{path}.path")
        options["path"] = str(task_dir)
        schema_file = task_dir / "schema.jsonl"
        lines["path"] = f["path"]
    else:
        if "task" not in f:
            raise ctx.error(node, f"{path}.task", "missing: server needs the task's name")
        if isinstance(f["server"], yaml.SequenceNode):  # the readers of a reader cluster
            servers = _str_list(ctx, f["server"], f"{path}.server")
            options["server"] = ",".join(url for url, _node in servers)
        else:
            options["server"] = _str(ctx, f["server"], f"{path}.server")
        lines["server"] = f["server"]
    if "task" in f:
        options["task"] = _str(ctx, f["task"], f"{path}.task")
        lines["task"] = f["task"]
    if "tables" in f:
        options["tables"] = ",".join(t for t, _ in _str_list(ctx, f["tables"], f"{path}.tables"))
        lines["tables"] = f["tables"]
    if "starting_position" in f:
        options["startingPosition"] = _str(ctx, f["starting_position"], f"{path}.starting_position")
        lines["startingPosition"] = f["starting_position"]
    if "max_rows_per_trigger" in f:
        n = _int(ctx, f["max_rows_per_trigger"], f"{path}.max_rows_per_trigger", 1, 2**31)
        options["maxRowsPerTrigger"] = str(n)
        lines["maxRowsPerTrigger"] = f["max_rows_per_trigger"]
    if "partitions" in f:
        options["partitions"] = str(_int(ctx, f["partitions"], f"{path}.partitions", 1, 4096))
        lines["partitions"] = f["partitions"]
    _source_token(ctx, f, path, options, lines)
    if "options" in f:
        for key, value in _string_map(ctx, f["options"], f"{path}.options").items():
            if key.lower() == "token":
                raise ctx.error(
                    f["options"],
                    f"{path}.options.{key}",
                    "a token is not accepted inline (it would show in Spark's plans and UI):"
                    f" use {path}.token_file or {path}.token_env",
                )
            options[key] = value
            lines[key] = f["options"]
    _check_source_options(ctx, options, lines, node, path)
    return ChangeStreamConfig(tuple(options.items()), schema_file)


def _source_token(
    ctx: _Ctx,
    f: dict[str, yaml.Node],
    path: str,
    options: dict[str, str],
    lines: dict[str, yaml.Node],
) -> None:
    """``token_file`` / ``token_env`` become the source's ``tokenFile`` / ``tokenEnv``
    options: only the file's path or the variable's name is in the options (which show in
    Spark's plans and UI); the token itself is read on the driver when the source parses
    them and travels inside the tasks (headwater.spark.offsets). An inline ``token`` is
    refused, as in the reader's configuration."""
    if "token" in f:
        raise ctx.error(
            f["token"],
            f"{path}.token",
            "a token is not accepted inline: put it in a file (token_file) or an environment"
            " variable (token_env)",
        )
    given = [k for k in ("token_file", "token_env") if k in f]
    if len(given) > 1:
        raise ctx.error(f[given[1]], f"{path}.{given[1]}", "give only one of token_file, token_env")
    if given and "server" not in f:
        raise ctx.error(f[given[0]], f"{path}.{given[0]}", "only for a server: source")
    if "token_file" in f:
        token_path = _path(ctx, f["token_file"], f"{path}.token_file")
        try:
            with open(token_path, encoding="utf-8") as fh:
                if not fh.readline().strip():
                    raise ctx.error(f["token_file"], f"{path}.token_file", "the token is empty")
        except OSError as e:
            raise ctx.error(
                f["token_file"], f"{path}.token_file", f"cannot read {token_path}: {e.strerror}"
            ) from None
        options["tokenFile"] = str(token_path)
        lines["tokenFile"] = f["token_file"]
    elif "token_env" in f:
        var = _str(ctx, f["token_env"], f"{path}.token_env")
        if var not in ctx.env:
            raise ctx.error(
                f["token_env"], f"{path}.token_env", f"environment variable {var} is not set"
            )
        options["tokenEnv"] = var
        lines["tokenEnv"] = f["token_env"]


def _check_source_options(
    ctx: _Ctx, options: dict[str, str], lines: dict[str, yaml.Node], node: yaml.Node, path: str
) -> None:
    """Validate with the source's own option parser, so errors point at this file."""
    from headwater.spark.offsets import parse_options

    try:
        # the token's file or variable was checked above, against this file's environment
        parse_options({k: v for k, v in options.items() if k not in ("tokenFile", "tokenEnv")})
    except ConfigError as e:
        name = (e.field or "").lower()
        where = next((n for k, n in lines.items() if k.lower() == name), node)
        message = str(e).split(": ", 1)[-1] if e.field else str(e)
        raise ctx.error(where, f"{path} ({e.field})" if e.field else path, message) from None


def _sink(ctx: _Ctx, node: yaml.Node, path: str) -> SinkSection:
    if not isinstance(node, yaml.MappingNode):
        raise ctx.error(node, path, "must be a mapping with type: and the sink's fields")
    fields: dict[str, Any] = {}
    kind = None
    for key_node, value_node in node.value:
        key = str(key_node.value)
        if key in fields or (key == "type" and kind is not None):
            raise ctx.error(key_node, f"{path}.{key}", "given twice")
        if key == "type":
            kind = _str(ctx, value_node, f"{path}.type")
            continue
        fields[key] = _plain(ctx, value_node, f"{path}.{key}")
    if kind is None:
        raise ctx.error(node, f"{path}.type", "missing (required)")
    return SinkSection(kind, tuple(fields.items()), node.start_mark.line + 1, path)


def _plain(ctx: _Ctx, node: yaml.Node, path: str) -> Any:
    """A YAML node as plain Python values (sink fields; types checked by the sink)."""
    if isinstance(node, yaml.ScalarNode):
        return yaml.safe_load(yaml.serialize(node))
    if isinstance(node, yaml.SequenceNode):
        return [_plain(ctx, n, f"{path}[{i}]") for i, n in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        return {str(k.value): _plain(ctx, v, f"{path}.{k.value}") for k, v in node.value}
    raise ctx.error(node, path, "unsupported value")


def _string_map(ctx: _Ctx, node: yaml.Node, path: str) -> dict[str, str]:
    if not isinstance(node, yaml.MappingNode):
        raise ctx.error(node, path, "must be a mapping of name: value")
    out: dict[str, str] = {}
    for key_node, value_node in node.value:
        key = str(key_node.value)
        if not isinstance(value_node, yaml.ScalarNode) or value_node.value == "":
            raise ctx.error(value_node, f"{path}.{key}", "must be a non-empty scalar")
        out[key] = str(value_node.value)
    return out


# --- transforms -----------------------------------------------------------------------------


def _transforms(ctx: _Ctx, node: yaml.Node, path: str) -> tuple[TransformSpec, ...]:
    if not isinstance(node, yaml.SequenceNode):
        raise ctx.error(node, path, "must be a list of transforms")
    return tuple(_transform(ctx, n, f"{path}[{i}]") for i, n in enumerate(node.value))


def _transform(ctx: _Ctx, node: yaml.Node, path: str) -> TransformSpec:
    f = _mapping(ctx, node, path, {"tables", *_KINDS})
    kinds = [k for k in _KINDS if k in f]
    if len(kinds) != 1:
        raise ctx.error(
            node, path, f"give exactly one of {', '.join(_KINDS)} (and optionally tables)"
        )
    kind = kinds[0]
    value, where = f[kind], f"{path}.{kind}"
    tables = _tables(ctx, f["tables"], f"{path}.tables") if "tables" in f else ()
    if kind in ("rename_database", "rename_table") and "tables" in f:
        raise ctx.error(f["tables"], f"{path}.tables", f"{kind} names its tables itself")
    if kind == "filter":
        where_sql = _str(ctx, value, where)
        _check_sql(ctx, value, where, where_sql, None)
        return FilterSpec(where_sql, tables)
    if kind in ("include", "exclude"):
        columns = tuple(c for c, _ in _str_list(ctx, value, where))
        if not columns:
            raise ctx.error(value, where, "must list at least one column")
        return (IncludeSpec if kind == "include" else ExcludeSpec)(columns, tables)
    if kind == "rename_database":
        mapping = _string_map(ctx, value, where)
        for old, new in mapping.items():
            if not (_IDENT.match(old) and _IDENT.match(new)):
                raise ctx.error(value, f"{where}.{old}", "database names are plain identifiers")
        return RenameDatabaseSpec(mapping)
    if kind == "rename_table":
        mapping = _string_map(ctx, value, where)
        for old, new in mapping.items():
            if old.count(".") != 1 or new.count(".") > 1:
                raise ctx.error(
                    value, f"{where}.{old}", "expected db.table: table (or db.table: db2.table2)"
                )
        return RenameTableSpec(mapping)
    if kind == "rename_columns":
        return RenameColumnsSpec(_string_map(ctx, value, where), tables)
    if kind == "compute":
        computed = _string_map(ctx, value, where)
        for name, expression in computed.items():
            _check_sql(ctx, value, f"{where}.{name}", expression, "after")
        return ComputeSpec(computed, tables)
    if kind == "mask":
        return _mask(ctx, value, where, tables)
    script_path = _path(ctx, value, where)
    try:
        script = load_rule_script(script_path)
    except OSError as e:
        raise ctx.error(value, where, f"cannot read {script_path}: {e.strerror}") from None
    except RuleError as e:
        raise ctx.error(value, where, str(e)) from None
    return RuleSpec(script, tables)


def _tables(ctx: _Ctx, node: yaml.Node, path: str) -> tuple[str, ...]:
    out = []
    for i, (text, item) in enumerate(_str_list(ctx, node, path)):
        try:
            re.compile(text)
        except re.error as e:
            raise ctx.error(item, f"{path}[{i}]", f"bad regular expression {text!r}: {e}") from None
        out.append(text)
    return tuple(out)


def _check_sql(
    ctx: _Ctx, node: yaml.Node, path: str, expression: str, row_image: str | None
) -> None:
    """Syntax only (Spark checks names when the query is planned)."""
    try:
        image_sql(expression, row_image)
    except ValueError as e:
        raise ctx.error(node, path, str(e)) from None


_MASK_KINDS = ("fixed", "keep_first", "keep_last", "hash")


def _mask(ctx: _Ctx, node: yaml.Node, path: str, tables: tuple[str, ...]) -> MaskSpec:
    if not isinstance(node, yaml.MappingNode) or not node.value:
        raise ctx.error(node, path, "must map column names to mask rules")
    rules: dict[str, MaskRule] = {}
    for key_node, value_node in node.value:
        column = str(key_node.value)
        where = f"{path}.{column}"
        f = _mapping(ctx, value_node, where, {*_MASK_KINDS, "char", "salt_file", "salt_env"})
        kinds = [k for k in _MASK_KINDS if k in f]
        if len(kinds) != 1:
            raise ctx.error(value_node, where, f"give exactly one of {', '.join(_MASK_KINDS)}")
        kind = kinds[0]
        extra = [k for k in ("salt_file", "salt_env") if k in f]
        if extra and kind != "hash":
            raise ctx.error(f[extra[0]], f"{where}.{extra[0]}", "only for hash")
        if "char" in f and kind not in ("keep_first", "keep_last"):
            raise ctx.error(f["char"], f"{where}.char", "only for keep_first and keep_last")
        if kind == "fixed":
            rules[column] = MaskRule("fixed", text=str(f["fixed"].value))
        elif kind == "hash":
            algorithm = _str(ctx, f["hash"], f"{where}.hash")
            if algorithm.lower() not in ("sha256", "sha-256"):
                raise ctx.error(f["hash"], f"{where}.hash", "only sha256 is supported")
            rules[column] = MaskRule("hash", salt=_salt(ctx, f, where))
        else:
            n = _int(ctx, f[kind], f"{where}.{kind}", 0, 1 << 20)
            char = str(f["char"].value) if "char" in f else "*"
            if len(char) != 1:
                raise ctx.error(f["char"], f"{where}.char", "must be one character")
            rules[column] = MaskRule(kind, n=n, char=char)
    return MaskSpec(rules, tables)


def _salt(ctx: _Ctx, f: dict[str, yaml.Node], path: str) -> bytes:
    if "salt_file" in f and "salt_env" in f:
        raise ctx.error(f["salt_env"], f"{path}.salt_env", "give salt_file or salt_env, not both")
    if "salt_file" in f:
        p = _path(ctx, f["salt_file"], f"{path}.salt_file")
        try:
            return p.read_bytes().rstrip(b"\r\n")
        except OSError as e:
            raise ctx.error(
                f["salt_file"], f"{path}.salt_file", f"cannot read {p}: {e.strerror}"
            ) from None
    if "salt_env" in f:
        var = _str(ctx, f["salt_env"], f"{path}.salt_env")
        if var not in ctx.env:
            raise ctx.error(
                f["salt_env"], f"{path}.salt_env", f"environment variable {var} is not set"
            )
        return ctx.env[var].encode()
    return b""

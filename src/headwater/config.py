"""Configuration of the reader service: frozen dataclasses loaded from one YAML file.

The file is parsed with ``yaml.compose`` so every value keeps the line it was written on;
every problem raises :class:`~headwater.errors.ConfigError` naming the file, that line and
the dotted field (``sources[1].filters.include[0]``). Unknown fields are errors (a typo must
not silently fall back to a default). Passwords and tokens are read here, only from a file
(``*_file``) or an environment variable (``*_env``): a secret written inline in the file is
refused, and none is ever part of a message or a ``repr``.

The format is documented in docs/configuration.md ("Reader"). Relative paths (``data_dir``,
``password_file``, ``tls.ca``) are relative to the directory of the configuration file.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from headwater.configfile import (
    YamlContext,
    boolean,
    compose,
    integer,
    mapping,
    number,
    path_value,
    read_config,
    size,
    string,
    string_list,
)
from headwater.position import (
    BinlogCoordinate,
    GtidSet,
    parse_gtid_set,
)

__all__ = [
    "EVENT_KINDS",
    "BackoffConfig",
    "ConsoleConfig",
    "FilterConfig",
    "HeartbeatConfig",
    "HostConfig",
    "ReaderConfig",
    "ServerConfig",
    "SourceConfig",
    "StartConfig",
    "StoreConfig",
    "TlsConfig",
    "load_reader_config",
    "parse_reader_config",
]

#: TLS modes to the source, weakest first, as MySQL's ``--ssl-mode`` (the same tuple as
#: ``headwater.binlog.client.SSL_MODES``, which says what each one checks).
SSL_MODES = ("disabled", "preferred", "required", "verify_ca", "verify_identity")
#: The default TLS mode, MySQL's: encrypted when the server offers TLS, nothing verified.
DEFAULT_SSL_MODE = "preferred"

#: The event types a filter can keep (rows events by kind, and DDL statements).
EVENT_KINDS = ("insert", "update", "delete", "ddl")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_QUALIFIED = re.compile(r"^[A-Za-z0-9_$]+\.[A-Za-z0-9_$]+$")
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class HostConfig:
    """One server of a source (a source may list several: the first that answers wins)."""

    host: str
    port: int = 3306

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class StartConfig:
    """Where a task starts the first time (later starts resume from what is stored).

    ``kind`` is ``earliest`` (the oldest binlog on the server), ``latest`` (the current end),
    ``file`` (``coordinate``), ``gtid`` (``gtid_set``: start after these GTIDs) or
    ``timestamp`` (``ts_us``: the first transaction committed at or after it).
    """

    kind: str = "latest"
    coordinate: BinlogCoordinate | None = None
    gtid_set: GtidSet | None = None
    ts_us: int | None = None

    def __str__(self) -> str:
        if self.kind == "file":
            return f"file {self.coordinate}"
        if self.kind == "gtid":
            return f"gtid {self.gtid_set}"
        if self.kind == "timestamp":
            return f"timestamp {self.ts_us} us"
        return self.kind


@dataclass(frozen=True, slots=True)
class FilterConfig:
    """Tables and event types to keep. Patterns are anchored regular expressions over
    ``db.table`` (Canal's syntax: ``shop\\..*``); a table is kept when it matches an
    ``include`` pattern (or ``include`` is empty) and no ``exclude`` pattern."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    events: tuple[str, ...] = EVENT_KINDS


@dataclass(frozen=True, slots=True)
class HeartbeatConfig:
    """A heartbeat row written into ``table`` (``db.table``) on the source every
    ``interval`` seconds; its arrival in the stream measures end-to-end lag."""

    table: str
    interval: float = 1.0
    create: bool = True


@dataclass(frozen=True, slots=True)
class BackoffConfig:
    """Reconnect delays: exponential from ``initial`` doubling up to ``max`` seconds, with
    full jitter; ``max_attempts`` 0 retries forever."""

    initial: float = 0.2
    max: float = 30.0
    max_attempts: int = 0


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Change log options of a task (see ``headwater.store.StoreOptions``)."""

    durability: str = "group"
    segment_bytes: int = 64 * MIB
    retention_age_s: float | None = 7 * 24 * 3600.0
    retention_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """TLS to the source (``ssl-mode`` and files, see :data:`SSL_MODES`)."""

    mode: str = DEFAULT_SSL_MODE
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """One source server (or failover group of servers) and how its task reads it."""

    name: str
    hosts: tuple[HostConfig, ...]
    user: str
    server_id: int
    password: str = field(default="", repr=False)
    start: StartConfig = field(default_factory=StartConfig)
    filters: FilterConfig = field(default_factory=FilterConfig)
    heartbeat: HeartbeatConfig | None = None
    chunk_bytes: int = 8 * MIB
    heartbeat_period: float = 2.0
    reconnect: BackoffConfig = field(default_factory=BackoffConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    state_interval: float = 1.0
    tls: TlsConfig = field(default_factory=TlsConfig)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The HTTP API the reader process serves (``headwater.server``): the address to
    listen on (port 0: any free port, see ``server.json``), the bearer token (read from a
    file or an environment variable; never in a message or ``repr``), fetch limits, and
    what bounds clients (``headwater.server.ServerOptions`` has the same fields)."""

    host: str = "127.0.0.1"
    port: int = 8484
    token: str | None = field(default=None, repr=False)
    max_rows: int = 100_000
    max_bytes: int = 64 * MIB
    max_wait_s: float = 60.0
    max_connections: int = 64
    idle_timeout_s: float = 30.0
    header_timeout_s: float = 10.0
    backlog: int = 128
    fetch_workers: int = 2


@dataclass(frozen=True, slots=True)
class ConsoleConfig:
    """The operations console the HTTP API serves (``headwater.server.console``): the
    status files of local pipelines to show (a pipeline's checkpoint directory, whose
    ``status.json`` it writes, or the file itself), seconds between the samples of each
    task (lag, ingest) and between reloads of the page."""

    pipelines: tuple[Path, ...] = ()
    sample_interval: float = 5.0
    refresh_interval: float = 5.0

    def status_files(self) -> tuple[Path, ...]:
        """The ``status.json`` of each pipeline (a directory names its checkpoint)."""
        return tuple(p if p.suffix == ".json" else p / "status.json" for p in self.pipelines)


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    """The reader process: where task data lives, the sources it reads, its HTTP API and
    the console it serves."""

    data_dir: Path
    sources: tuple[SourceConfig, ...]
    file: str = "<config>"
    server: ServerConfig | None = None
    console: ConsoleConfig = field(default_factory=ConsoleConfig)

    def task_dir(self, name: str) -> Path:
        """The directory of one task: ``changes/`` (the change log), ``schema/``, state."""
        return self.data_dir / name


# --- loading --------------------------------------------------------------------------------


def load_reader_config(
    path: str | os.PathLike[str], env: dict[str, str] | None = None
) -> ReaderConfig:
    """Load and validate a reader configuration file (see the module docstring)."""
    text, file, base = read_config(path)
    return parse_reader_config(text, file=file, base=base, env=env)


def parse_reader_config(
    text: str,
    *,
    file: str = "<config>",
    base: Path | None = None,
    env: dict[str, str] | None = None,
) -> ReaderConfig:
    """Validate configuration text; ``base`` anchors relative paths (default: cwd)."""
    ctx = YamlContext(file, base or Path.cwd(), dict(os.environ) if env is None else env)
    root = compose(text, file)
    fields = mapping(
        ctx,
        root,
        "",
        {"data_dir", "sources", "server", "console"},
        required={"data_dir", "sources"},
    )
    data_dir = path_value(ctx, fields["data_dir"], "data_dir")
    sources_node = fields["sources"]
    if not isinstance(sources_node, yaml.SequenceNode) or not sources_node.value:
        raise ctx.error(sources_node, "sources", "must be a non-empty list of sources")
    sources = tuple(
        _source(ctx, node, f"sources[{i}]") for i, node in enumerate(sources_node.value)
    )
    seen: dict[str, int] = {}
    for i, (src, node) in enumerate(zip(sources, sources_node.value, strict=True)):
        if src.name in seen:
            raise ctx.error(
                node,
                f"sources[{i}].name",
                f"{src.name!r} is already the name of sources[{seen[src.name]}]",
            )
        seen[src.name] = i
    server = _server(ctx, fields["server"], "server") if "server" in fields else None
    console = ConsoleConfig()
    if "console" in fields:
        if server is None:
            raise ctx.error(
                fields["console"],
                "console",
                "the console is served by the HTTP API: add a server section",
            )
        console = _console(ctx, fields["console"], "console")
    return ReaderConfig(data_dir, sources, file, server, console)


_SOURCE_FIELDS = {
    "name",
    "host",
    "port",
    "hosts",
    "user",
    "password",
    "password_file",
    "password_env",
    "server_id",
    "start",
    "filters",
    "heartbeat",
    "chunk_bytes",
    "heartbeat_period",
    "reconnect",
    "store",
    "state_interval",
    "tls",
}


def _source(ctx: YamlContext, node: yaml.Node, path: str) -> SourceConfig:
    f = mapping(ctx, node, path, _SOURCE_FIELDS, required={"name", "user", "server_id"})
    name = string(ctx, f["name"], f"{path}.name")
    if not _NAME.match(name):
        raise ctx.error(
            f["name"],
            f"{path}.name",
            "must be 1-64 letters, digits, '_', '.' or '-' (it names a directory)",
        )
    if "hosts" in f and ("host" in f or "port" in f):
        raise ctx.error(f["hosts"], f"{path}.hosts", "give either hosts or host/port, not both")
    if "hosts" in f:
        hosts = _hosts(ctx, f["hosts"], f"{path}.hosts")
    elif "host" in f:
        port = integer(ctx, f["port"], f"{path}.port", 1, 65535) if "port" in f else 3306
        hosts = (HostConfig(string(ctx, f["host"], f"{path}.host"), port),)
    else:
        raise ctx.error(node, f"{path}.host", "missing: give host (and port) or hosts")
    password = _password(ctx, f, path)
    server_id = integer(ctx, f["server_id"], f"{path}.server_id", 1, 0xFFFFFFFF)
    kw: dict[str, Any] = {}
    if "start" in f:
        kw["start"] = _start(ctx, f["start"], f"{path}.start")
    if "filters" in f:
        kw["filters"] = _filters(ctx, f["filters"], f"{path}.filters")
    if "heartbeat" in f:
        kw["heartbeat"] = _heartbeat(ctx, f["heartbeat"], f"{path}.heartbeat")
    if "chunk_bytes" in f:
        kw["chunk_bytes"] = size(ctx, f["chunk_bytes"], f"{path}.chunk_bytes", 64 * 1024, 64 * MIB)
    if "heartbeat_period" in f:
        kw["heartbeat_period"] = number(
            ctx, f["heartbeat_period"], f"{path}.heartbeat_period", 0.1, 3600
        )
    if "state_interval" in f:
        kw["state_interval"] = number(
            ctx, f["state_interval"], f"{path}.state_interval", 0.01, 3600
        )
    if "reconnect" in f:
        kw["reconnect"] = _backoff(ctx, f["reconnect"], f"{path}.reconnect")
    if "store" in f:
        kw["store"] = _store(ctx, f["store"], f"{path}.store")
    if "tls" in f:
        kw["tls"] = _tls(ctx, f["tls"], f"{path}.tls")
    return SourceConfig(
        name=name,
        hosts=hosts,
        user=string(ctx, f["user"], f"{path}.user"),
        server_id=server_id,
        password=password,
        **kw,
    )


def _password(ctx: YamlContext, f: dict[str, yaml.Node], path: str) -> str:
    secret = _secret(ctx, f, path, "password")
    return "" if secret is None else secret


def _secret(ctx: YamlContext, f: dict[str, yaml.Node], path: str, name: str) -> str | None:
    """The first line of ``name_file``, or ``$name_env``; None if neither. ``name``
    itself (the secret inline) is refused: configuration files get copied, committed and
    shown, and the secret with them."""
    if name in f:
        raise ctx.error(
            f[name],
            f"{path}.{name}",
            f"a {name} is not accepted inline: put it in a file ({name}_file) or an "
            f"environment variable ({name}_env)",
        )
    given = [k for k in (f"{name}_file", f"{name}_env") if k in f]
    if len(given) > 1:
        raise ctx.error(f[given[1]], f"{path}.{given[1]}", f"give only one of {', '.join(given)}")
    if not given:
        return None
    key = given[0]
    node = f[key]
    if key.endswith("_file"):
        p = path_value(ctx, node, f"{path}.{key}")
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ctx.error(node, f"{path}.{key}", f"cannot read {p}: {e.strerror}") from None
        return lines[0] if lines else ""
    var = string(ctx, node, f"{path}.{key}")
    if var not in ctx.env:
        raise ctx.error(node, f"{path}.{key}", f"environment variable {var} is not set")
    return ctx.env[var]


def _hosts(ctx: YamlContext, node: yaml.Node, path: str) -> tuple[HostConfig, ...]:
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        raise ctx.error(node, path, "must be a non-empty list of HOST:PORT strings")
    out = []
    for i, item in enumerate(node.value):
        text = string(ctx, item, f"{path}[{i}]")
        host, sep, port = text.rpartition(":")
        if not sep:
            host, port = text, "3306"
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ctx.error(item, f"{path}[{i}]", f"expected HOST:PORT, got {text!r}")
        out.append(HostConfig(host, int(port)))
    return tuple(out)


def _start(ctx: YamlContext, node: yaml.Node, path: str) -> StartConfig:
    if isinstance(node, yaml.ScalarNode):
        value = str(node.value)
        if value in ("earliest", "latest"):
            return StartConfig(value)
        raise ctx.error(
            node,
            path,
            "expected earliest, latest, or a mapping with file+offset, gtid or timestamp; "
            f"got {value!r}",
        )
    f = mapping(ctx, node, path, {"file", "offset", "gtid", "timestamp"})
    kinds = [k for k in ("file", "gtid", "timestamp") if k in f]
    if len(kinds) != 1:
        raise ctx.error(node, path, "give exactly one of file (with offset), gtid, timestamp")
    if "offset" in f and "file" not in f:
        raise ctx.error(f["offset"], f"{path}.offset", "offset needs file")
    kind = kinds[0]
    if kind == "file":
        offset = integer(ctx, f["offset"], f"{path}.offset", 4, 2**63) if "offset" in f else 4
        return StartConfig(
            "file", coordinate=BinlogCoordinate(string(ctx, f["file"], f"{path}.file"), offset)
        )
    if kind == "gtid":
        text = string(ctx, f["gtid"], f"{path}.gtid")
        try:
            return StartConfig("gtid", gtid_set=parse_gtid_set(text))
        except ValueError as e:
            raise ctx.error(f["gtid"], f"{path}.gtid", str(e)) from None
    ts_node = f["timestamp"]
    return StartConfig("timestamp", ts_us=_timestamp(ctx, ts_node, f"{path}.timestamp"))


def _timestamp(ctx: YamlContext, node: yaml.Node, path: str) -> int:
    if not isinstance(node, yaml.ScalarNode):
        raise ctx.error(node, path, "must be an ISO 8601 time or seconds since the epoch")
    text = str(node.value).strip()
    try:
        return round(float(text) * 1_000_000)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ctx.error(node, path, f"not an ISO 8601 time or epoch seconds: {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1_000_000)


def _filters(ctx: YamlContext, node: yaml.Node, path: str) -> FilterConfig:
    f = mapping(ctx, node, path, {"include", "exclude", "events"})
    include = _patterns(ctx, f["include"], f"{path}.include") if "include" in f else ()
    exclude = _patterns(ctx, f["exclude"], f"{path}.exclude") if "exclude" in f else ()
    events: tuple[str, ...] = EVENT_KINDS
    if "events" in f:
        items = string_list(ctx, f["events"], f"{path}.events")
        for i, (text, item) in enumerate(items):
            if text not in EVENT_KINDS:
                raise ctx.error(
                    item,
                    f"{path}.events[{i}]",
                    f"unknown event type {text!r}; expected one of {', '.join(EVENT_KINDS)}",
                )
        events = tuple(t for t, _ in items)
    return FilterConfig(include, exclude, events)


def _patterns(ctx: YamlContext, node: yaml.Node, path: str) -> tuple[str, ...]:
    out = []
    for i, (text, item) in enumerate(string_list(ctx, node, path)):
        try:
            re.compile(text)
        except re.error as e:
            raise ctx.error(item, f"{path}[{i}]", f"bad regular expression {text!r}: {e}") from None
        out.append(text)
    return tuple(out)


def _heartbeat(ctx: YamlContext, node: yaml.Node, path: str) -> HeartbeatConfig:
    f = mapping(ctx, node, path, {"table", "interval", "create"}, required={"table"})
    table = string(ctx, f["table"], f"{path}.table")
    if not _QUALIFIED.match(table):
        raise ctx.error(
            f["table"], f"{path}.table", f"expected db.table (plain identifiers), got {table!r}"
        )
    interval = (
        number(ctx, f["interval"], f"{path}.interval", 0.05, 3600) if "interval" in f else 1.0
    )
    create = boolean(ctx, f["create"], f"{path}.create") if "create" in f else True
    return HeartbeatConfig(table, interval, create)


def _backoff(ctx: YamlContext, node: yaml.Node, path: str) -> BackoffConfig:
    f = mapping(ctx, node, path, {"initial", "max", "max_attempts"})
    initial = number(ctx, f["initial"], f"{path}.initial", 0.001, 3600) if "initial" in f else 0.2
    top = number(ctx, f["max"], f"{path}.max", 0.001, 86400) if "max" in f else 30.0
    if top < initial:
        raise ctx.error(f.get("max", node), f"{path}.max", "must be >= initial")
    attempts = (
        integer(ctx, f["max_attempts"], f"{path}.max_attempts", 0, 2**31)
        if "max_attempts" in f
        else 0
    )
    return BackoffConfig(initial, top, attempts)


def _store(ctx: YamlContext, node: yaml.Node, path: str) -> StoreConfig:
    f = mapping(
        ctx, node, path, {"durability", "segment_bytes", "retention_age", "retention_bytes"}
    )
    kw: dict[str, Any] = {}
    if "durability" in f:
        d = string(ctx, f["durability"], f"{path}.durability")
        if d not in ("fsync", "group", "none"):
            raise ctx.error(
                f["durability"], f"{path}.durability", f"expected fsync, group or none, got {d!r}"
            )
        kw["durability"] = d
    if "segment_bytes" in f:
        kw["segment_bytes"] = size(
            ctx, f["segment_bytes"], f"{path}.segment_bytes", 64 * 1024, 2**40
        )
    if "retention_age" in f:
        kw["retention_age_s"] = number(ctx, f["retention_age"], f"{path}.retention_age", 1, 1e10)
    if "retention_bytes" in f:
        kw["retention_bytes"] = size(ctx, f["retention_bytes"], f"{path}.retention_bytes", 1, 2**62)
    return StoreConfig(**kw)


def _tls(ctx: YamlContext, node: yaml.Node, path: str) -> TlsConfig:
    f = mapping(ctx, node, path, {"mode", "ca", "cert", "key"})
    mode = string(ctx, f["mode"], f"{path}.mode") if "mode" in f else DEFAULT_SSL_MODE
    if mode not in SSL_MODES:
        raise ctx.error(
            f["mode"], f"{path}.mode", f"expected one of {', '.join(SSL_MODES)}, got {mode!r}"
        )
    files: dict[str, Path] = {}
    for key in ("ca", "cert", "key"):
        if key in f:
            p = files[key] = path_value(ctx, f[key], f"{path}.{key}")
            if not p.is_file():
                raise ctx.error(f[key], f"{path}.{key}", f"no such file: {p}")
    if "key" in files and "cert" not in files:
        raise ctx.error(f["key"], f"{path}.key", "a client key needs its certificate (cert)")
    if "ca" in files and mode in ("disabled", "preferred", "required"):
        raise ctx.error(
            f["ca"],
            f"{path}.ca",
            f"mode {mode} checks no certificate: use verify_ca or verify_identity",
        )
    return TlsConfig(mode, files.get("ca"), files.get("cert"), files.get("key"))


def _server(ctx: YamlContext, node: yaml.Node, path: str) -> ServerConfig:
    keys = {
        "listen",
        "token",
        "token_file",
        "token_env",
        "max_rows",
        "max_bytes",
        "max_wait",
        "max_connections",
        "idle_timeout",
        "header_timeout",
        "backlog",
        "fetch_workers",
    }
    f = mapping(ctx, node, path, keys)
    kw: dict[str, Any] = {}
    if "listen" in f:
        listen = string(ctx, f["listen"], f"{path}.listen")
        host, sep, port = listen.rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise ctx.error(f["listen"], f"{path}.listen", f"expected HOST:PORT, got {listen!r}")
        kw["host"], kw["port"] = host.strip("[]"), int(port)
    token = _secret(ctx, f, path, "token")
    if token is not None and not token.strip():
        key = next(k for k in ("token_file", "token_env") if k in f)
        raise ctx.error(f[key], f"{path}.{key}", "the token is empty")
    kw["token"] = None if token is None else token.strip()
    if "max_rows" in f:
        kw["max_rows"] = integer(ctx, f["max_rows"], f"{path}.max_rows", 1000, 10_000_000)
    if "max_bytes" in f:
        kw["max_bytes"] = size(ctx, f["max_bytes"], f"{path}.max_bytes", MIB, 2**31)
    if "max_wait" in f:
        kw["max_wait_s"] = number(ctx, f["max_wait"], f"{path}.max_wait", 0, 3600)
    if "max_connections" in f:
        kw["max_connections"] = integer(
            ctx, f["max_connections"], f"{path}.max_connections", 1, 100_000
        )
    if "idle_timeout" in f:
        kw["idle_timeout_s"] = number(ctx, f["idle_timeout"], f"{path}.idle_timeout", 0.1, 86400)
    if "header_timeout" in f:
        kw["header_timeout_s"] = number(
            ctx, f["header_timeout"], f"{path}.header_timeout", 0.1, 3600
        )
    if "backlog" in f:
        kw["backlog"] = integer(ctx, f["backlog"], f"{path}.backlog", 1, 65535)
    if "fetch_workers" in f:
        kw["fetch_workers"] = integer(ctx, f["fetch_workers"], f"{path}.fetch_workers", 0, 64)
    return ServerConfig(**kw)


def _console(ctx: YamlContext, node: yaml.Node, path: str) -> ConsoleConfig:
    f = mapping(ctx, node, path, {"pipelines", "sample_interval", "refresh_interval"})
    pipelines: list[Path] = []
    if "pipelines" in f:
        items = f["pipelines"]
        if not isinstance(items, yaml.SequenceNode):
            raise ctx.error(items, f"{path}.pipelines", "must be a list of paths")
        for i, item in enumerate(items.value):
            pipelines.append(path_value(ctx, item, f"{path}.pipelines[{i}]"))
    kw: dict[str, Any] = {"pipelines": tuple(pipelines)}
    if "sample_interval" in f:
        kw["sample_interval"] = number(
            ctx, f["sample_interval"], f"{path}.sample_interval", 0.1, 3600
        )
    if "refresh_interval" in f:  # whole seconds: <meta http-equiv="refresh">
        kw["refresh_interval"] = number(
            ctx, f["refresh_interval"], f"{path}.refresh_interval", 1, 3600
        )
    return ConsoleConfig(**kw)

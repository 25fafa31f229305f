"""A sink's section of a pipeline file, and the parsing every sink folder shares.

The pipeline file's ``sinks[i]`` entries reach a sink folder as a :class:`SinkSection`:
its ``type``, its fields as plain YAML values, the line it starts on and its dotted path
(``sinks[1]``). Each folder's ``configuration.py`` turns a section into its config object
(``parse(section, context)``); most call :func:`parse_fields`, which builds a frozen
dataclass from the fields by each field's *declared type*:

* ``connection: TargetConnection``: the connection fields (``host``, ``port``, ``user``,
  ``password_file``, ``password_env``, ``database``, ``connect_timeout_s``, ``session``)
  sit directly in the section;
* ``schema: SchemaSource``: the source's schema history (``schema_file``, default the
  reader task's ``schema.jsonl``) seen through the pipeline's transforms;
* ``pipeline: str``: the pipeline's name (not a YAML field);
* ``tuple[tuple[str, str], ...]``: a YAML mapping; ``DdlMode``: one of its values;
  ``RetryPolicy``: a mapping of its fields.

Invariants: an unknown or missing field raises :class:`~headwater.errors.ConfigError`
naming the section's line and the dotted field (``sinks[0].ddl``); relative paths are
relative to the pipeline file's directory (:attr:`SinkContext.base_dir`). What the
pipeline knows that a sink needs (its name, the schema view of its transforms) comes in a
:class:`SinkContext`, so sinks import nothing of the pipeline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from headwater.connections import TargetConnection
from headwater.errors import ConfigError
from headwater.sinks.base import DdlMode, RetryPolicy, SchemaFile, SchemaSource

__all__ = ["CONNECTION_FIELDS", "SinkContext", "SinkSection", "parse_fields", "section_fields"]

T = TypeVar("T")

#: The YAML fields of a sink's target connection (:class:`TargetConnection`).
CONNECTION_FIELDS = frozenset(
    {
        "host",
        "port",
        "user",
        "password_file",
        "password_env",
        "database",
        "connect_timeout_s",
        "session",
    }
)


@dataclass(frozen=True, slots=True)
class SinkSection:
    """One ``sinks[i]`` entry: its ``type`` and its fields as plain values (checked by the
    sink folder's ``parse``); ``line`` is where it is in the file, ``path`` its dotted
    name."""

    type: str
    fields: tuple[tuple[str, Any], ...] = field(repr=False)
    line: int = 0
    path: str = ""

    def error(self, message: str, key: str | None = None) -> ConfigError:
        """A ConfigError at this section (``key``: the field it is about)."""
        where = f"{self.path}.{key}" if key else self.path
        return ConfigError(message, line=self.line, field=where)


def _same(schema: SchemaSource) -> SchemaSource:
    return schema


@dataclass(frozen=True, slots=True)
class SinkContext:
    """What a sink section is parsed against: the pipeline's ``name``, the directory of
    its file (``base_dir``), the reader task's ``schema.jsonl`` (None for a server
    source), ``schema``: the history from the reader's API for a server source (used when
    neither the section's ``schema_file`` nor :attr:`schema_file` is given), and ``view``,
    which wraps a schema source in the pipeline's transforms."""

    pipeline: str
    base_dir: Path
    schema_file: Path | None = None
    schema: SchemaSource | None = None
    view: Callable[[SchemaSource], SchemaSource] = _same

    def path(self, value: Any) -> Path:
        """``value`` as a path, relative ones anchored at :attr:`base_dir`."""
        p = Path(str(value)).expanduser()
        return p if p.is_absolute() else self.base_dir / p


def section_fields(
    section: SinkSection, allowed: Iterable[str], required: Iterable[str] = ()
) -> dict[str, Any]:
    """The section's fields, after checking none is unknown and none required is missing."""
    allowed = set(allowed)
    fields = dict(section.fields)
    for key in fields:
        if key not in allowed:
            raise section.error(
                f"unknown field for a {section.type} sink; expected one of "
                f"{', '.join(sorted(allowed | {'type'}))}",
                key,
            )
    for key in sorted(set(required) - fields.keys()):
        raise section.error("missing (required)", key)
    return fields


def parse_fields(section: SinkSection, config_class: type[T], context: SinkContext) -> T:
    """An instance of the dataclass ``config_class`` from ``section`` (module docstring)."""
    hints = get_type_hints(config_class)
    names = {f.name for f in dataclasses.fields(config_class)}  # type: ignore[arg-type]
    special = {n for n in names if hints[n] in (TargetConnection, SchemaSource) or n == "pipeline"}
    allowed = names - special
    if "schema" in special:
        allowed.add("schema_file")
    if "connection" in special:
        allowed |= CONNECTION_FIELDS
    f = section_fields(section, allowed)
    kw: dict[str, Any] = {}
    for name in special:
        hint = hints[name]
        if name == "pipeline":
            kw[name] = context.pipeline
        elif hint is SchemaSource:
            kw[name] = _schema(section, context, f.pop("schema_file", None))
        elif hint is TargetConnection:
            kw[name] = _connection(section, context, f)
    for key, value in f.items():
        kw[key] = _typed(section, key, hints[key], value)
    try:
        return config_class(**kw)
    except (TypeError, ValueError) as e:
        raise section.error(str(e)) from None


def _schema(section: SinkSection, context: SinkContext, value: Any) -> SchemaSource:
    path = context.path(value) if value else context.schema_file
    if path is None and context.schema is not None:
        return context.view(context.schema)
    if path is None:
        raise section.error(
            "missing: schema_file (the reader task's schema.jsonl) for a server source",
            "schema_file",
        )
    return context.view(SchemaFile(str(context.path(path))))


def _connection(section: SinkSection, context: SinkContext, f: dict[str, Any]) -> TargetConnection:
    conn = {k: f.pop(k) for k in list(f) if k in CONNECTION_FIELDS}
    if "session" in conn:
        if not isinstance(conn["session"], dict):
            raise section.error("must map session variables to values", "session")
        conn["session"] = tuple(conn["session"].items())
    if "password_file" in conn:
        conn["password_file"] = str(context.path(conn["password_file"]))
    try:
        return TargetConnection(**conn)
    except (TypeError, ValueError) as e:
        raise section.error(str(e)) from None


def _typed(section: SinkSection, key: str, hint: Any, value: Any) -> Any:
    """``value`` converted to the field's declared type where YAML cannot spell it."""
    if hint == tuple[tuple[str, str], ...]:
        if not isinstance(value, dict):
            raise section.error("must map source databases to target databases", key)
        return tuple((str(a), str(b)) for a, b in value.items())
    if hint is DdlMode:
        try:
            return DdlMode(value)
        except ValueError:
            raise section.error(
                f"expected one of {', '.join(m.value for m in DdlMode)}, got {value!r}", key
            ) from None
    if hint is RetryPolicy:
        if not isinstance(value, dict):
            raise section.error("must be a mapping of attempts, base_delay_s, max_delay_s", key)
        try:
            return RetryPolicy(**value)
        except TypeError as e:
            raise section.error(str(e), key) from None
    return value

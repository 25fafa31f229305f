"""Options of the Redis Streams sink: :class:`RedisConfig`, and the parsing of its section.

``host`` and ``port`` locate the server; ``password_env``/``password_file`` name where
the password is (never inline). As for :mod:`headwater.connections`, the password is read
on the driver when the sink is pickled to ship it (the pipeline pickles it once at start,
so a missing variable or file is a ``ConfigError`` then) and travels inside the task in the
private field ``_password`` (not in ``repr``, not compared): executors need neither the
file nor the variable (issue #16). ``topic``/``schema_topic`` are stream-key templates.
Entry ids are ``<sequence>-<sub>`` and Redis only accepts ids above a stream's last, which
is how replays are dropped; so one stream must be written by one task: with ``ordering:
table`` both templates must name ``{database}`` and ``{table}`` (one stream per table);
with ``ordering: global`` any template is accepted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

from headwater.errors import ConfigError
from headwater.sinks.bus.messages import BusOptions
from headwater.sinks.bus.section import BUS_FIELDS, bus_options
from headwater.sinks.bus.spark import ORDERINGS
from headwater.sinks.section import SinkContext, SinkSection, section_fields

__all__ = ["RedisConfig", "parse"]

_DEFAULT_BUS: dict[str, Any] = {
    "topic": "{source}.{database}.{table}",
    "schema_topic": "{source}.schema.{database}.{table}",
}


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """A Redis Streams sink's options (module docstring)."""

    host: str
    port: int = 6379
    db: int = 0
    password_env: str | None = None
    password_file: str | None = field(default=None, repr=False)
    bus: BusOptions = field(default_factory=lambda: BusOptions(**_DEFAULT_BUS))
    ordering: str = "table"
    tasks: int = 2
    timeout_s: float = 30.0
    #: the password read on the driver when this was pickled (module docstring)
    _password: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {', '.join(ORDERINGS)}")
        if self.tasks < 1:
            raise ValueError("tasks must be a positive integer")
        if self.ordering == "table":
            for name in ("topic", "schema_topic"):
                t = getattr(self.bus, name)
                if "{database}" not in t or "{table}" not in t:
                    raise ValueError(
                        f"{name} must contain {{database}} and {{table}} with ordering: table "
                        "(one stream per table), or use ordering: global"
                    )

    def __reduce__(self) -> tuple[Any, ...]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["_password"] = self.password()
        return (_rebuild, (values,))

    def password(self) -> str | None:
        """The password: the one carried from the driver, else read now from its file or
        environment variable (None: neither is set). Raises :class:`ConfigError` naming
        the file or variable, never the value, when it cannot be read."""
        if self._password is not None:
            return self._password
        if self.password_file:
            try:
                with open(self.password_file, encoding="utf-8") as fh:
                    return fh.read().strip()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read the password file: {exc.strerror}", field="password_file"
                ) from None
        if self.password_env:
            value = os.environ.get(self.password_env)
            if value is None:
                raise ConfigError(
                    f"environment variable {self.password_env} is not set", field="password_env"
                )
            return value
        return None


def _rebuild(values: dict[str, Any]) -> RedisConfig:
    return RedisConfig(**values)


def parse(section: SinkSection, context: SinkContext) -> RedisConfig:
    """The options of a ``type: redis`` section."""
    own = {"host", "port", "db", "password_env", "password_file", "ordering", "tasks", "timeout_s"}
    if "password" in dict(section.fields):
        raise section.error(
            "an inline password is refused: use password_env or password_file", "password"
        )
    f = section_fields(section, BUS_FIELDS | own, {"host"})
    bus = bus_options(section, f, **_DEFAULT_BUS)
    if "password_file" in f:
        f["password_file"] = str(context.path(f["password_file"]))
    try:
        return RedisConfig(bus=bus, **f)
    except (TypeError, ValueError) as e:
        raise section.error(str(e)) from None

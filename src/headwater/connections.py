"""Connections to database servers: where a server is, how to log in, and the one place
a PyMySQL connection is opened.

Two types, because the two roles differ in what they may do and where they are configured:

* :class:`SourceConnection`: a server headwater *reads* from outside the binlog stream:
  a snapshot's source, the server a snapshot signal is written to (the pipeline file's
  ``snapshot`` section, the CLI's ``--source`` options);
* :class:`TargetConnection`: a server a sink *writes* to (a sink section's connection
  fields), which may also carry session variables (``session``).

Invariants: the configuration holds only where to read the password (``password_file``,
first line, or the environment variable ``password_env``); ``repr``, logs and errors never
show it. Both are plain frozen data, picklable: Spark ships them to executors, which
connect themselves. Pickling happens on the driver, and it reads the password there and
carries it in the private field ``_password`` (not in ``repr``, not compared), so an
executor needs neither the file nor the variable (issue #16: a worker is another machine
with another environment): the secret travels inside the serialized task, never in the
Spark configuration, the UI or a log (encrypt Spark's RPC on untrusted networks,
docs/cluster.md). A password that cannot be read on the driver fails the pickling with
the :class:`ConfigError` that names the file or variable, before any task starts.

:func:`mysql_connect` is the one call of ``pymysql.connect`` for them and for the
verifier's endpoints: UTF-8 (``utf8mb4``) and the connect timeout are set the same way
everywhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any

from headwater.errors import ConfigError

__all__ = ["ServerConnection", "SourceConnection", "TargetConnection", "mysql_connect"]


@dataclass(frozen=True, slots=True)
class ServerConnection:
    """Where a server is and how to log in (see the module docstring for the password)."""

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password_file: str | None = None
    password_env: str | None = None
    database: str | None = None
    connect_timeout_s: float = 10.0
    #: the password read on the driver when this was pickled (module docstring); None on
    #: the driver itself, which reads it when connecting
    _password: str | None = field(default=None, repr=False, compare=False)

    def __reduce__(self) -> tuple[Any, ...]:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["_password"] = self.password()
        return (_rebuild, (type(self), values))

    def password(self) -> str:
        """The password: the one carried from the driver, else read now. Raises
        :class:`ConfigError` naming the file or variable (never the value) when it cannot
        be read."""
        if self._password is not None:
            return self._password
        if self.password_file:
            try:
                with open(self.password_file, encoding="utf-8") as f:
                    return f.readline().rstrip("\r\n")
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
        return ""

    def connect_mysql(self, *, autocommit: bool, **extra: Any) -> Any:
        """A PyMySQL connection to this server (:func:`mysql_connect`)."""
        return mysql_connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password(),
            database=self.database,
            autocommit=autocommit,
            connect_timeout=self.connect_timeout_s,
            **extra,
        )


def _rebuild(cls: type[ServerConnection], values: dict[str, Any]) -> ServerConnection:
    return cls(**values)


@dataclass(frozen=True, slots=True)
class SourceConnection(ServerConnection):
    """A server headwater reads from (snapshot source, signal table)."""


@dataclass(frozen=True, slots=True)
class TargetConnection(ServerConnection):
    """Where a sink's target server is and how to log in. The password is read when
    connecting, from ``password_file`` (first line) or the environment variable
    ``password_env``; with neither, no password. ``repr`` never shows it (it is not even
    stored)."""

    #: Extra session settings, ``name -> value`` (e.g. ``innodb_lock_wait_timeout: 5``).
    session: tuple[tuple[str, str | int], ...] = ()


def mysql_connect(
    *,
    host: str,
    port: int,
    user: str,
    password: str,
    database: str | None,
    autocommit: bool,
    connect_timeout: float,
    **extra: Any,
) -> Any:
    """``pymysql.connect`` with the settings every headwater connection shares (charset
    ``utf8mb4``); ``extra`` adds PyMySQL options (``local_infile``, ``init_command``)."""
    import pymysql

    return pymysql.connect(
        host=host,
        port=port,
        user=user,
        password=password,
        database=database,
        autocommit=autocommit,
        charset="utf8mb4",
        connect_timeout=connect_timeout,
        **extra,
    )

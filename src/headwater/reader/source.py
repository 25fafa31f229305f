"""Talking to a source outside the dump: probing who it is, finding where to start.

* :func:`probe` opens a plain connection and runs the client's preflight checks, giving the
  :class:`~headwater.binlog.preflight.SourceInfo` (identity, binlog list, GTID position)
  the task needs to choose its start before the dump begins;
* :func:`file_at_time` finds the binlog file to read from for a start timestamp: the newest
  file whose first event (its FORMAT_DESCRIPTION) is not later than the time, read by a
  short non-blocking dump of each candidate, newest first;
* :func:`backoff_delays` is the reconnect schedule: exponential, capped, full jitter.

Errors are the typed ones of :mod:`headwater.errors`; a password never appears in them.
"""

from __future__ import annotations

import contextlib
import random
import ssl
from collections.abc import Iterator
from typing import Any

import pymysql

from headwater.binlog.client import (
    CR_SSL_CONNECTION_ERROR,
    BinlogClient,
    ClientOptions,
    TlsOptions,
    connect_mysql,
)
from headwater.binlog.constants import EventType
from headwater.binlog.preflight import SourceInfo, preflight
from headwater.config import BackoffConfig, HostConfig, SourceConfig
from headwater.errors import AuthenticationError, ConnectionLostError, SourceError
from headwater.position import BinlogCoordinate

__all__ = ["backoff_delays", "connect", "file_at_time", "probe", "tls_options"]

ER_ACCESS_DENIED = 1045


def connect(source: SourceConfig, host: HostConfig, timeout: float = 5.0) -> Any:
    """A PyMySQL connection to ``host`` as the source's user (autocommit, UTC session)."""
    try:
        return connect_mysql(
            tls_options(source),
            host=host.host,
            port=host.port,
            user=source.user,
            password=source.password,
            connect_timeout=timeout,
            read_timeout=timeout * 2,
            write_timeout=timeout * 2,
            autocommit=True,
            charset="utf8mb4",
            init_command="SET time_zone = '+00:00'",
        )
    except pymysql.err.MySQLError as e:
        code = e.args[0] if e.args else 0
        text = str(e.args[1]) if len(e.args) > 1 else type(e).__name__
        if code == CR_SSL_CONNECTION_ERROR or isinstance(
            getattr(e, "original_exception", None), ssl.SSLError
        ):
            raise SourceError(
                f"TLS to {host} failed ({text}); the source's tls.mode is {source.tls.mode}"
            ) from None
        if code == ER_ACCESS_DENIED:
            raise AuthenticationError(
                f"{host} refused user {source.user!r} ({text}): check the user name and the "
                f"password of source {source.name!r} (password, password_file or password_env)"
            ) from None
        raise ConnectionLostError(f"cannot connect to {host}: {code} {text}") from None


def tls_options(source: SourceConfig) -> TlsOptions:
    """The client's TLS options from the source's ``tls`` section."""
    t = source.tls
    return TlsOptions(
        mode=t.mode,
        ca=None if t.ca is None else str(t.ca),
        cert=None if t.cert is None else str(t.cert),
        key=None if t.key is None else str(t.key),
    )


def probe(source: SourceConfig, host: HostConfig, replica_host: str) -> SourceInfo:
    """Who the server at ``host`` is and what it has; raises the preflight's errors."""
    conn = connect(source, host)
    try:
        return preflight(
            conn,
            address=str(host),
            server_id=source.server_id,
            start=None,
            replica_host=replica_host,
        )
    except pymysql.err.MySQLError as e:
        raise ConnectionLostError(f"{host}: probing the server failed: {e.args}") from None
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def file_at_time(
    source: SourceConfig, host: HostConfig, info: SourceInfo, ts_us: int, replica_host: str
) -> BinlogCoordinate:
    """The first event of the newest binlog file created at or before ``ts_us``."""
    names = [name for name, _ in info.binary_logs]
    for name in reversed(names):
        created = _first_event_time(source, host, name, replica_host)
        if created is not None and created * 1_000_000 <= ts_us:
            return BinlogCoordinate(name, 4)
    if not names:
        raise SourceError(f"{host} lists no binary logs")
    return BinlogCoordinate(names[0], 4)


def _first_event_time(
    source: SourceConfig, host: HostConfig, name: str, replica_host: str
) -> int | None:
    options = ClientOptions(
        host=host.host,
        port=host.port,
        user=source.user,
        password=source.password,
        server_id=source.server_id,
        start=BinlogCoordinate(name, 4),
        blocking=False,
        heartbeat_period=0,
        read_timeout=10.0,
        replica_host=replica_host,
        tls=tls_options(source),
    )
    with BinlogClient(options) as client:
        for ev in client.events():
            raw = ev.raw
            if raw.type_code == EventType.FORMAT_DESCRIPTION and raw.offset is not None:
                return raw.timestamp
            if raw.offset is not None:
                return raw.timestamp
    return None


def backoff_delays(config: BackoffConfig, rng: random.Random | None = None) -> Iterator[float]:
    """Delays before reconnect attempts: ``uniform(0, min(max, initial * 2**n))``, except
    that the first delay is at least ``initial / 2`` (no reconnect storm after a blip)."""
    rng = rng or random.Random()
    n = 0
    while True:
        cap = min(config.max, config.initial * (2**n))
        yield max(config.initial / 2, rng.uniform(0, cap)) if n == 0 else rng.uniform(0, cap)
        if cap < config.max:
            n += 1

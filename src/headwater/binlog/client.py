"""The replica connection: connect, check, register, dump, and frame events fast.

A :class:`BinlogClient` speaks the replication protocol of MySQL 5.6+ and MariaDB 10.x:

1. connect and authenticate with PyMySQL, TLS as :class:`TlsOptions` says (MySQL's
   ``--ssl-mode``; without options ``preferred``: TLS when offered, not verified; see
   :func:`connect_mysql` for how ``preferred`` avoids PyMySQL's CA-loading context);
2. :func:`headwater.binlog.preflight.preflight`: log_bin, binlog_format=ROW, privileges,
   start position still on the server, server_id not taken;
3. session variables the dump thread reads (MariaDB sql/sql_repl.cc, MySQL
   sql/rpl_binlog_sender.cc): ``@master_binlog_checksum`` (we declare the server's own
   algorithm, so events arrive exactly as logged; without it a checksumming server refuses
   or strips), ``@master_heartbeat_period`` in nanoseconds, MariaDB's
   ``@mariadb_slave_capability`` = 4 (MARIA_SLAVE_CAPABILITY_GTID, sql/log_event.h: below
   it the server rewrites GTID and ANNOTATE_ROWS events into older forms), and for MariaDB
   GTID dumps ``@slave_connect_state``, ``@slave_gtid_strict_mode``,
   ``@slave_gtid_ignore_duplicates``; MySQL 8.0.26+ reads the ``@source_*`` spellings
   too, and kills older dumps with the same ``@slave_uuid``/``@replica_uuid``;
4. COM_REGISTER_SLAVE, then COM_BINLOG_DUMP (file and offset; MariaDB GTID dumps send an
   empty file name and offset 4) or MySQL's COM_BINLOG_DUMP_GTID -- layouts in
   :mod:`headwater.binlog._packets`;
5. from then on the socket belongs to :class:`~headwater.binlog._packets.EventFramer`,
   which reads it with ``recv_into`` and yields :class:`ClientEvent` values. PyMySQL is
   not used for reading again: its buffered reader holds nothing at that point, because
   the server sends nothing between the OK of COM_REGISTER_SLAVE and our dump command.

Silence: the server sends a HEARTBEAT after ``heartbeat_period`` seconds without events,
so a socket that stays quiet for ``2 * heartbeat_period`` plus slack means a dead or frozen
server (or network): :class:`ConnectionLostError`. Errors from the dump (error packets)
are mapped to the typed errors of :mod:`headwater.errors`; none carries the password.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import socket
import ssl
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

import pymysql

from headwater.binlog._packets import (
    BINLOG_DUMP_NON_BLOCK,
    BINLOG_SEND_ANNOTATE_ROWS_EVENT,
    COM_BINLOG_DUMP,
    COM_BINLOG_DUMP_GTID,
    COM_REGISTER_SLAVE,
    DEFAULT_BUFFER_SIZE,
    ClientEvent,
    EventFramer,
    ServerErrorPacket,
    binlog_dump,
    binlog_dump_gtid,
    register_slave,
)
from headwater.binlog.constants import CHECKSUM_ALG_CRC32, CHECKSUM_ALG_OFF
from headwater.binlog.framing import FormatDescription
from headwater.binlog.preflight import (
    SourceInfo,
    StartPosition,
    find_server_id_conflict,
    preflight,
    privilege_error,
    purged_error,
)
from headwater.errors import (
    AuthenticationError,
    ConfigError,
    ConnectionLostError,
    ServerIdConflictError,
    SourceError,
)
from headwater.position import BinlogCoordinate, MariadbGtidPos, MysqlGtidSet

__all__ = [
    "PASSWORD_ENV",
    "SSL_MODES",
    "BinlogClient",
    "ClientEvent",
    "ClientOptions",
    "TlsOptions",
    "client_from_url",
    "connect_mysql",
    "options_from_url",
]

log = logging.getLogger(__name__)

#: Environment variable holding the source password for :func:`options_from_url`.
PASSWORD_ENV = "HEADWATER_SOURCE_PASSWORD"

_MAX_SERVER_ID = 0xFFFFFFFF
_MAX_HEARTBEAT = 4294967.0  # seconds; MariaDB and MySQL cap the period (ms in a u32)

# Server error codes (include/mysqld_error.h, MariaDB include/mysqld_error.h).
ER_ACCESS_DENIED = 1045
ER_SERVER_SHUTDOWN = 1053
ER_SPECIFIC_ACCESS_DENIED = 1227
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
ER_QUERY_INTERRUPTED = 1317
ER_CONNECTION_KILLED = 1927
ER_SLAVE_SAME_ID = 4052  # MariaDB: a newer dump with our server_id killed this one
CR_SSL_CONNECTION_ERROR = 2026  # client side: "SSL is required but the server doesn't..."
_LOST = {ER_SERVER_SHUTDOWN, ER_QUERY_INTERRUPTED, ER_CONNECTION_KILLED, 2003, 2006, 2013}
# Texts of error 1236 that mean "the start is not in the log" (MySQL sql/rpl_binlog_sender.cc,
# MariaDB sql/sql_repl.cc).
_NOT_IN_LOG = (
    "could not find first log file name",
    "purged",
    "not in the master's binlog",
    "could not find gtid state",
    "could not open log file",
)


#: TLS modes, weakest first, as MySQL's ``--ssl-mode`` (MySQL Reference Manual, "Command
#: Options for Encrypted Connections"; MariaDB's client has the same checks as flags):
#: ``disabled`` plain text; ``preferred`` TLS when the server offers it, certificate not
#: checked (MySQL's default); ``required`` TLS or no connection, certificate not checked;
#: ``verify_ca`` also checks the certificate against ``ca`` (the system's CAs without
#: one); ``verify_identity`` also checks that it names the host connected to.
SSL_MODES = ("disabled", "preferred", "required", "verify_ca", "verify_identity")


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """TLS to the source: ``mode`` (one of :data:`SSL_MODES`), the CA file to verify
    the server with, and a client certificate and key (sent under ``required`` and
    stricter modes). ``verify_cert``/``verify_identity`` are older spellings of the
    ``verify_ca``/``verify_identity`` modes.
    """

    mode: str = "preferred"
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    verify_cert: bool = False
    verify_identity: bool = False

    def __post_init__(self) -> None:
        if self.mode not in SSL_MODES:
            raise ConfigError(
                f"must be one of {', '.join(SSL_MODES)}, got {self.mode!r}", field="tls.mode"
            )
        if self.verify_identity:
            object.__setattr__(self, "mode", "verify_identity")
        elif self.verify_cert and SSL_MODES.index(self.mode) < SSL_MODES.index("verify_ca"):
            object.__setattr__(self, "mode", "verify_ca")
        if self.key and not self.cert:
            raise ConfigError("a client key needs its certificate (tls.cert)", field="tls.key")

    def connect_args(self) -> dict[str, Any]:
        """Keyword arguments for one ``pymysql.connect``. PyMySQL itself tries TLS without
        checking anything when given no ``ssl`` (``preferred``), and insists on TLS
        (error 2026 when the server does not offer it) when given a context.
        :func:`connect_mysql` does ``preferred`` at less cost."""
        if self.mode == "disabled":
            return {"ssl_disabled": True}
        if self.mode == "preferred":
            return {}
        verify = self.mode in ("verify_ca", "verify_identity")
        try:
            ctx = ssl.create_default_context(cafile=self.ca if verify else None)
        except OSError as e:  # ssl.SSLError is one too
            raise ConfigError(f"cannot load the CA file {self.ca}: {e}", field="tls.ca") from None
        ctx.check_hostname = self.mode == "verify_identity"
        if not verify:
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert:
            try:
                ctx.load_cert_chain(self.cert, self.key)
            except OSError as e:
                raise ConfigError(
                    f"cannot load the client certificate {self.cert} / key {self.key}: {e}",
                    field="tls.cert",
                ) from None
        return {"ssl": ctx}


@functools.cache
def _preferred_context() -> ssl.SSLContext:
    """The TLS context of the ``preferred`` mode: encrypts, checks nothing (made once).

    PyMySQL's own preferred mode (no ``ssl`` argument; pymysql/connections.py 2.2,
    ``Connection.__init__`` then ``_create_ssl_ctx({})``) builds a fresh
    ``ssl.create_default_context()`` per connection, which loads the system CA bundle
    (``load_default_certs``: 20-85 ms of CPU here), and then sets ``check_hostname =
    False`` and ``verify_mode = CERT_NONE`` because no CA was given (``hasnoca``): the
    loaded CAs are never consulted. ``create_default_context`` is
    ``SSLContext(PROTOCOL_TLS_CLIENT)`` plus those CAs (Lib/ssl.py), and that
    constructor already sets OP_NO_SSLv2/OP_NO_SSLv3, which PyMySQL adds; PyMySQL's
    clearing of VERIFY_X509_STRICT only matters when verifying. So this context is the
    same security as PyMySQL's preferred mode, without the CA bundle. An SSLContext may
    be shared by connections and threads (it is OpenSSL's SSL_CTX; each connection gets
    its own SSL object).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


#: Servers seen offering no TLS under ``preferred``: (host, port, unix socket) -> when
#: (``time.monotonic``). Connections to them go in plain text at once for
#: :data:`_NO_TLS_RECHECK` seconds, then TLS is tried again.
_NO_TLS: dict[tuple[object, object, object], float] = {}
_NO_TLS_RECHECK = 600.0


def connect_mysql(tls: TlsOptions | None, **kwargs: Any) -> Any:
    """``pymysql.connect(**kwargs)`` with TLS as ``tls`` says (``None``: ``preferred``).

    ``disabled`` and the modes that insist on TLS pass :meth:`TlsOptions.connect_args`.
    ``preferred`` passes the shared :func:`_preferred_context`; PyMySQL then insists on
    TLS (a context means "required" to it), so a server that offers none answers with
    error 2026 before any credential is sent (``_request_authentication``: the check of
    the server's CLIENT_SSL capability comes before the handshake response), and the
    connection is made again in plain text -- what PyMySQL's preferred mode does on one
    connection. The server counts the dropped attempt as an aborted connect and logs a
    warning ("closed normally without authentication"); the connection that follows at
    once clears its count of interrupted connects from this host (``max_connect_errors``:
    a successful connection resets it), so the host is never blocked. So that a server
    without TLS does not log that warning for every connection, it is remembered as such
    for ten minutes (:data:`_NO_TLS`), after which TLS is offered again: a server that
    gains TLS is used with it within ten minutes (PyMySQL's own preferred mode checks on
    every connection, at the cost of its CA-loading context).
    """
    if tls is not None and tls.mode != "preferred":
        return pymysql.connect(**kwargs, **tls.connect_args())
    address = (kwargs.get("host"), kwargs.get("port"), kwargs.get("unix_socket"))
    seen = _NO_TLS.get(address)
    if seen is None or time.monotonic() - seen > _NO_TLS_RECHECK:
        try:
            conn = pymysql.connect(**kwargs, ssl=_preferred_context())
        except pymysql.err.OperationalError as e:
            if not e.args or e.args[0] != CR_SSL_CONNECTION_ERROR:
                raise
            log.info("%s:%s offers no TLS: connecting in plain text", *address[:2])
            _NO_TLS[address] = time.monotonic()
        else:
            _NO_TLS.pop(address, None)
            return conn
    return pymysql.connect(**kwargs, ssl_disabled=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    """Everything a :class:`BinlogClient` needs. ``server_id`` is required.

    ``start``: a :class:`BinlogCoordinate`, a GTID set of the server's flavor, or ``None``
    for the current end of the log. ``heartbeat_period`` (seconds, 0 = off) is how often
    an idle server sends a heartbeat; ``read_timeout`` is how long the socket may stay
    silent before :class:`ConnectionLostError` (default ``2 * heartbeat_period`` plus
    slack; with no heartbeat and no read_timeout a blocking dump waits forever).
    ``blocking=False`` stops at the end of the log. ``replica_host`` is the name this
    replica registers under (SHOW SLAVE HOSTS); a service that reconnects should keep it
    stable, so that its own earlier connection is not taken for another replica.
    """

    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = field(default="", repr=False)
    server_id: int
    start: StartPosition = None
    heartbeat_period: float = 5.0
    connect_timeout: float = 10.0
    read_timeout: float | None = None
    tls: TlsOptions | None = None
    buffer_size: int = DEFAULT_BUFFER_SIZE
    blocking: bool = True
    send_annotate_rows: bool = True
    verify_checksums: bool = True
    gtid_strict_mode: bool = False
    gtid_ignore_duplicates: bool = False
    replica_host: str | None = None

    def __post_init__(self) -> None:
        sid = self.server_id
        if not isinstance(sid, int) or isinstance(sid, bool) or not 1 <= sid <= _MAX_SERVER_ID:
            raise ConfigError(
                f"must be an integer in 1..{_MAX_SERVER_ID}, unique among the servers and "
                f"replicas of the source, got {sid!r}",
                field="server_id",
            )
        if not 0 < self.port < 65536:
            raise ConfigError(f"must be in 1..65535, got {self.port}", field="port")
        if not 0 <= self.heartbeat_period <= _MAX_HEARTBEAT:
            raise ConfigError(
                f"must be in 0..{_MAX_HEARTBEAT:.0f} seconds, got {self.heartbeat_period}",
                field="heartbeat_period",
            )
        if self.read_timeout is not None and self.read_timeout <= 0:
            raise ConfigError("must be positive", field="read_timeout")
        if self.connect_timeout <= 0:
            raise ConfigError("must be positive", field="connect_timeout")
        if self.buffer_size < 64 * 1024:
            raise ConfigError("must be at least 65536 bytes", field="buffer_size")
        if isinstance(self.start, BinlogCoordinate) and self.start.offset < 4:
            raise ConfigError(
                f"offset {self.start.offset} is inside the file header; events start at 4",
                field="start",
            )
        if self.replica_host is not None and len(self.replica_host.encode()) > 60:
            raise ConfigError("must be at most 60 bytes", field="replica_host")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def silence_timeout(self) -> float | None:
        """Seconds without a byte from the server before the connection counts as lost."""
        if self.read_timeout is not None:
            return self.read_timeout
        if self.heartbeat_period == 0:
            return None
        return 2 * self.heartbeat_period + max(1.0, self.heartbeat_period / 2)


class BinlogClient:
    """One replica connection to one source, dumping once from ``options.start``.

    ``events()`` connects on first use and yields :class:`ClientEvent` values (the
    :class:`~headwater.binlog.framing.RawEvent` plus the coordinates where it starts and
    where the next event starts). After an error the client is spent: make a new one
    starting from :attr:`position`.
    """

    def __init__(self, options: ClientOptions) -> None:
        self.options = options
        self.replica_host = options.replica_host or _default_replica_host()
        self._conn: Any = None
        self._info: SourceInfo | None = None
        self._framer: EventFramer | None = None
        self._iterating = False

    # -- lifecycle -------------------------------------------------------------------------

    def connect(self) -> SourceInfo:
        """Connect, check the source, register and start the dump (once)."""
        if self._info is not None:
            return self._info
        o = self.options
        conn = self._open()
        try:
            info = preflight(
                conn,
                address=o.address,
                server_id=o.server_id,
                start=o.start,
                replica_host=self.replica_host,
            )
            self._info = info
            start = o.start if o.start is not None else info.current
            alg = self._prepare_session(conn, info, start)
            self._register(conn, info)
            self._send_dump(conn, info, start)
            sock = conn._sock
            sock.settimeout(o.silence_timeout)
        except BaseException:
            _force_close(conn)
            raise
        self._conn = conn
        file, pos = (start.file, start.offset) if isinstance(start, BinlogCoordinate) else ("", 4)
        self._framer = EventFramer(
            sock.recv_into,
            file=file,
            position=pos,
            checksum_alg=alg,
            verify=o.verify_checksums,
            buffer_size=o.buffer_size,
            source=o.address,
            blocking=o.blocking,
            on_error=self._dump_error,
            on_close=self._closed_by_server,
        )
        log.info(
            "dumping the binlog of %s (%s %s, server_id %d) from %s as replica %d",
            o.address,
            info.flavor,
            info.version,
            info.server_id,
            start,
            o.server_id,
        )
        return info

    def events(self, *, include_heartbeats: bool = False) -> Iterator[ClientEvent]:
        """The events of the dump, in order; heartbeats only when asked for (they are
        counted in :attr:`heartbeats` either way). Ends after the last event of a
        non-blocking dump; raises :class:`ConnectionLostError` when the server goes away
        or falls silent."""
        if self._iterating:
            raise RuntimeError("events() of a BinlogClient can be iterated only once")
        self.connect()
        assert self._framer is not None
        self._iterating = True
        self._framer.include_heartbeats = include_heartbeats
        return self._framer.events()

    def close(self) -> None:
        """Drop the connection (no COM_QUIT: the server is busy sending the dump)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            _force_close(conn)

    def __enter__(self) -> BinlogClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- state -----------------------------------------------------------------------------

    @property
    def info(self) -> SourceInfo:
        """The source's identity and settings (after :meth:`connect`)."""
        if self._info is None:
            raise RuntimeError("not connected yet: call connect() or iterate events()")
        return self._info

    @property
    def flavor(self) -> str:
        return self.info.flavor

    @property
    def server_uuid(self) -> str | None:
        return self.info.server_uuid

    @property
    def format_description(self) -> FormatDescription | None:
        return None if self._framer is None else self._framer.format_description

    @property
    def file(self) -> str | None:
        """The binlog file the stream is in."""
        return None if self._framer is None else self._framer.file

    @property
    def position(self) -> BinlogCoordinate | None:
        """Where the event after the last one yielded starts: where to resume."""
        if self._framer is None:
            return None
        return BinlogCoordinate(self._framer.file, self._framer.position)

    @property
    def heartbeats(self) -> int:
        return 0 if self._framer is None else self._framer.heartbeats

    @property
    def last_heartbeat(self) -> BinlogCoordinate | None:
        return None if self._framer is None else self._framer.last_heartbeat

    @property
    def bytes_received(self) -> int:
        return 0 if self._framer is None else self._framer.bytes_received

    @property
    def framer(self) -> EventFramer | None:
        """The framer of the dump (its counters: reads, bytes, heartbeats, buffers)."""
        return self._framer

    # -- steps -----------------------------------------------------------------------------

    def _open(self) -> Any:
        o = self.options
        try:
            return connect_mysql(
                o.tls,
                host=o.host,
                port=o.port,
                user=o.user,
                password=o.password,
                connect_timeout=o.connect_timeout,
                read_timeout=o.connect_timeout,
                write_timeout=o.connect_timeout,
                autocommit=True,
                charset="utf8mb4",
                program_name="headwater",
            )
        except pymysql.err.MySQLError as e:
            code = e.args[0] if e.args else 0
            text = str(e.args[1]) if len(e.args) > 1 else str(e)
            if code == ER_ACCESS_DENIED:
                raise AuthenticationError(
                    f"{o.address} refused user {o.user!r} ({text}): check the user name and "
                    f"the password (ClientOptions.password, ${PASSWORD_ENV} or a password "
                    "file)"
                ) from None
            if isinstance(getattr(e, "original_exception", None), ssl.SSLError):
                raise SourceError(
                    f"TLS to {o.address} failed ({text}): check TlsOptions (the CA that "
                    "signed the server certificate, verify_identity against the host name)"
                ) from None
            if code == CR_SSL_CONNECTION_ERROR:
                mode = "required" if o.tls is None else o.tls.mode
                raise SourceError(
                    f"{o.address} does not offer TLS and the TLS mode is {mode}: enable TLS "
                    "on the server (ssl_cert, ssl_key) or lower the mode"
                ) from None
            if code in _LOST:
                raise ConnectionLostError(f"cannot connect to {o.address}: {text}") from None
            raise SourceError(f"connecting to {o.address} failed: {code} {text}") from None

    def _prepare_session(self, conn: Any, info: SourceInfo, start: StartPosition) -> int:
        o = self.options
        statements = ["SET @master_binlog_checksum = @@global.binlog_checksum"]
        if not info.is_mariadb:
            statements.append("SET @source_binlog_checksum = @@global.binlog_checksum")
            replica_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, self.replica_host))
            statements += [f"SET @slave_uuid = '{replica_uuid}'"]
            statements += [f"SET @replica_uuid = '{replica_uuid}'"]
        if o.heartbeat_period > 0:
            nanos = int(o.heartbeat_period * 1e9)
            statements.append(f"SET @master_heartbeat_period = {nanos}")
            if not info.is_mariadb:
                statements.append(f"SET @source_heartbeat_period = {nanos}")
        if info.is_mariadb:
            statements.append("SET @mariadb_slave_capability = 4")
            if isinstance(start, MariadbGtidPos):
                # Values are digits and dashes only (MariadbGtidPos renders them).
                statements += [
                    f"SET @slave_connect_state = '{start}'",
                    f"SET @slave_gtid_strict_mode = {int(o.gtid_strict_mode)}",
                    f"SET @slave_gtid_ignore_duplicates = {int(o.gtid_ignore_duplicates)}",
                ]
        try:
            with conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql)
                cur.execute("SELECT @master_binlog_checksum")
                declared = str(cur.fetchone()[0] or "NONE").upper()
        except pymysql.err.MySQLError as e:
            raise SourceError(f"{o.address}: setting up the replica session failed: {e}") from None
        return CHECKSUM_ALG_CRC32 if declared == "CRC32" else CHECKSUM_ALG_OFF

    def _register(self, conn: Any, info: SourceInfo) -> None:
        o = self.options
        body = register_slave(o.server_id, host=self.replica_host, user=o.user)
        try:
            conn._execute_command(COM_REGISTER_SLAVE, body)
            conn._read_packet()
        except pymysql.err.MySQLError as e:
            code = e.args[0] if e.args else 0
            # MariaDB answers a missing REPLICATION SLAVE with 1045 here (the password
            # was accepted already), MySQL with 1227.
            if code in (ER_SPECIFIC_ACCESS_DENIED, ER_ACCESS_DENIED):
                raise privilege_error(
                    o.address, info.user, info.flavor, info.version, str(e.args[1])
                ) from None
            raise SourceError(f"{o.address}: registering as a replica failed: {e}") from None

    def _send_dump(self, conn: Any, info: SourceInfo, start: StartPosition) -> None:
        o = self.options
        flags = 0 if o.blocking else BINLOG_DUMP_NON_BLOCK
        if info.is_mariadb and o.send_annotate_rows:
            flags |= BINLOG_SEND_ANNOTATE_ROWS_EVENT
        if isinstance(start, MysqlGtidSet):
            command, body = COM_BINLOG_DUMP_GTID, binlog_dump_gtid(start, o.server_id, flags)
        elif isinstance(start, MariadbGtidPos):
            command, body = COM_BINLOG_DUMP, binlog_dump("", 4, o.server_id, flags)
        else:
            assert isinstance(start, BinlogCoordinate)
            command, body = (
                COM_BINLOG_DUMP,
                binlog_dump(start.file, start.offset, o.server_id, flags),
            )
        try:
            conn._execute_command(command, body)
        except pymysql.err.MySQLError as e:
            raise ConnectionLostError(
                f"{o.address}: sending the dump command failed: {e}"
            ) from None

    # -- errors ----------------------------------------------------------------------------

    def _dump_error(self, packet: ServerErrorPacket) -> Exception:
        """The typed error for an error packet that ended the dump."""
        o = self.options
        info = self.info
        text = f"error {packet.errno}: {packet.message}"
        lower = packet.message.lower()
        # MySQL: 1236 "A slave with the same server_uuid/server_id as this slave has
        # connected to the master" (sql/rpl_binlog_sender.cc); MariaDB: 4052
        # ER_SLAVE_SAME_ID sent to the older dump that kill_zombie_dump_threads ends.
        if packet.errno == ER_SLAVE_SAME_ID or "same server_uuid/server_id" in lower:
            return ServerIdConflictError(
                f"{o.address} dropped this replica ({text}): another replica uses "
                f"server_id {o.server_id}; give this reader a server_id no other replica uses"
            )
        if packet.errno == ER_MASTER_FATAL_ERROR_READING_BINLOG:
            if any(marker in lower for marker in _NOT_IN_LOG):
                return purged_error(info, o.start, text)
            return SourceError(f"{o.address} ended the dump from {o.start or 'the end'}: {text}")
        if packet.errno == ER_SPECIFIC_ACCESS_DENIED:
            return privilege_error(o.address, info.user, info.flavor, info.version, text)
        if packet.errno in _LOST:
            return self._closed_by_server(f"{o.address} ended the dump ({text})")
        return SourceError(f"{o.address} ended the dump: {text}")

    def _closed_by_server(self, message: str) -> Exception:
        """The server ended our dump thread: a replica taking our server_id makes it do so
        (kill_zombie_dump_threads), otherwise it is a transient loss."""
        o = self.options
        try:
            conn = connect_mysql(
                o.tls,
                host=o.host,
                port=o.port,
                user=o.user,
                password=o.password,
                connect_timeout=min(o.connect_timeout, 2.0),
                read_timeout=2.0,
            )
        except pymysql.err.MySQLError:
            return ConnectionLostError(message)
        try:
            other = find_server_id_conflict(conn, o.server_id, self.replica_host)
        except pymysql.err.MySQLError:
            other = None
        finally:
            _force_close(conn)
        if other is not None:
            return ServerIdConflictError(
                f"{message}: another replica ({other}) registered with server_id "
                f"{o.server_id} and the server dropped this one; give this reader a server_id "
                "no other replica uses"
            )
        return ConnectionLostError(message)


# --- building a client from a URL -----------------------------------------------------------


def options_from_url(
    url: str,
    *,
    server_id: int,
    password: str | None = None,
    password_file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    **fields: Any,
) -> ClientOptions:
    """ClientOptions from ``mysql://user@host:port`` (``mariadb://`` too).

    The password never comes from the URL (it would end up in shell histories and process
    lists): it is ``password``, else the first line of ``password_file``, else
    ``$HEADWATER_SOURCE_PASSWORD``, else empty. Other ClientOptions fields pass through.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("mysql", "mariadb"):
        raise ConfigError(f"expected mysql://USER@HOST:PORT, got {parts.scheme}://", field="source")
    if parts.password is not None:
        raise ConfigError(
            f"the URL carries a password: remove it and set ${PASSWORD_ENV} or use a password file",
            field="source",
        )
    if not parts.hostname:
        raise ConfigError("the URL names no host: mysql://USER@HOST:PORT", field="source")
    if not parts.username:
        raise ConfigError("the URL names no user: mysql://USER@HOST:PORT", field="source")
    try:
        port = parts.port or 3306
    except ValueError:
        raise ConfigError("the URL's port is not a number in 1..65535", field="source") from None
    if password is None and password_file is not None:
        lines = Path(password_file).read_text().splitlines()
        password = lines[0] if lines else ""
    if password is None:
        password = (os.environ if env is None else env).get(PASSWORD_ENV, "")
    return ClientOptions(
        host=parts.hostname,
        port=port,
        user=unquote(parts.username),
        password=password,
        server_id=server_id,
        **fields,
    )


def client_from_url(url: str, *, server_id: int, **kwargs: Any) -> BinlogClient:
    """A :class:`BinlogClient` for ``mysql://user@host:port``; see :func:`options_from_url`."""
    return BinlogClient(options_from_url(url, server_id=server_id, **kwargs))


def _default_replica_host() -> str:
    host = socket.gethostname()[:30]
    return f"headwater-{host}-{os.getpid()}-{secrets.token_hex(3)}"


def _force_close(conn: Any) -> None:
    with contextlib.suppress(Exception):
        conn._force_close()

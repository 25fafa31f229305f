"""Checks of a source server before a dump, with errors that name the fix.

:func:`preflight` runs on an open PyMySQL connection before the replica registers, and
returns a :class:`SourceInfo`: who the server is (flavor, version, server_id, server_uuid or
GTID domain) and how it logs. It refuses, each time saying what to change:

* binary logging off (``@@log_bin = 0``)                       -> SourceConfigError
* ``binlog_format`` other than ROW (the global value: what new sessions use)
                                                                -> SourceConfigError
* no right to read the binlog status (SHOW MASTER STATUS fails with 1227; MariaDB 10.5+
  wants BINLOG MONITOR, MySQL and older MariaDB REPLICATION CLIENT)  -> PrivilegeError
* a start file that SHOW BINARY LOGS no longer lists           -> PositionPurgedError
* our server_id equal to the source's, or registered by another replica (SHOW SLAVE
  HOSTS, when the user may run it)                             -> ServerIdConflictError

and warns (logging) when ``binlog_row_image`` or ``binlog_row_metadata`` is not FULL.
:func:`heartbeat_grant_problem` checks, when a heartbeat is configured, that the user may
write the heartbeat table (INSERT and UPDATE -- the row is upserted -- and CREATE when the
reader creates the database and table) and names the GRANT that is missing.
The REPLICATION SLAVE privilege is checked by the server itself when the replica
registers (MariaDB sql/repl_failsafe.cc register_slave, MySQL sql/rpl_source.cc);
:func:`privilege_error` words that refusal.

Replica registrations: MariaDB and MySQL keep one SHOW SLAVE HOSTS entry per server_id
(a new registration replaces the old one), and a new dump kills older dump threads with
the same server_id (MariaDB sql/sql_parse.cc ``kill_zombie_dump_threads``) or the same
``@slave_uuid`` (MySQL). A registration under our ``replica_host`` name is taken for an
earlier connection of ours (a zombie the server is about to kill), not for a conflict.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pymysql

from headwater.errors import (
    PositionPurgedError,
    PrivilegeError,
    ServerIdConflictError,
    SourceConfigError,
    SourceError,
)
from headwater.position import BinlogCoordinate, MariadbGtidPos, MysqlGtidSet

__all__ = [
    "SourceInfo",
    "StartPosition",
    "find_server_id_conflict",
    "grant_statement",
    "heartbeat_grant_problem",
    "preflight",
    "privilege_error",
    "purged_error",
]

log = logging.getLogger(__name__)

StartPosition = BinlogCoordinate | MysqlGtidSet | MariadbGtidPos | None

ER_SPECIFIC_ACCESS_DENIED = 1227
ER_PARSE_ERROR = 1064

_VARIABLES = (
    "version",
    "server_id",
    "server_uuid",
    "hostname",
    "log_bin",
    "binlog_format",
    "binlog_row_image",
    "binlog_row_metadata",
    "binlog_checksum",
    "gtid_domain_id",
    "gtid_binlog_pos",
    "gtid_binlog_state",
    "gtid_executed",
    "gtid_purged",
)


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """What the source said about itself just before the dump.

    ``gtid_position`` is MariaDB's ``@@gtid_binlog_pos`` or MySQL's ``@@gtid_executed``;
    ``gtid_purged`` MySQL's ``@@gtid_purged`` (MariaDB has none: its oldest GTIDs are in
    the GTID_LIST event at the start of the oldest binlog file).
    """

    address: str
    flavor: str  # "mariadb" or "mysql"
    version: str
    server_id: int
    server_uuid: str | None  # MySQL only
    gtid_domain_id: int | None  # MariaDB only
    hostname: str
    user: str  # CURRENT_USER(), as 'name'@'host' for GRANT statements
    binlog_format: str
    binlog_row_image: str
    binlog_row_metadata: str | None  # None: the server predates the variable
    binlog_checksum: str
    current: BinlogCoordinate  # the end of the binary log (SHOW MASTER STATUS)
    binary_logs: tuple[tuple[str, int], ...]  # SHOW BINARY LOGS: (name, size), oldest first
    gtid_position: str
    gtid_purged: str

    @property
    def is_mariadb(self) -> bool:
        return self.flavor == "mariadb"

    @property
    def oldest(self) -> BinlogCoordinate:
        """The first event the server still has."""
        return BinlogCoordinate(
            self.binary_logs[0][0] if self.binary_logs else self.current.file, 4
        )

    @property
    def identity(self) -> str:
        """A stable name of the server for failover detection: MySQL's server_uuid; for
        MariaDB (no uuid) ``mariadb:<server_id>:<gtid_domain_id>``."""
        if self.server_uuid:
            return self.server_uuid
        return f"{self.flavor}:{self.server_id}:{self.gtid_domain_id or 0}"


def preflight(
    conn: Any,
    *,
    address: str,
    server_id: int,
    start: StartPosition,
    replica_host: str,
) -> SourceInfo:
    """Inspect the source on ``conn`` (an open PyMySQL connection) and refuse what cannot
    work; see the module docstring. Returns the :class:`SourceInfo`."""
    with conn.cursor() as cur:
        names = ", ".join(f"'{n}'" for n in _VARIABLES)
        cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
        variables = {str(k).lower(): str(v) for k, v in cur.fetchall()}
        cur.execute("SELECT CURRENT_USER()")
        user = _quote_account(str(cur.fetchone()[0]))
    version = variables.get("version", "")
    flavor = "mariadb" if "mariadb" in version.lower() else "mysql"
    if variables.get("log_bin", "OFF").upper() not in ("ON", "1"):
        raise SourceConfigError(
            f"binary logging is off on {address}: start the server with --log-bin "
            "(and --binlog-format=ROW, a --server-id) so that it writes the binary log"
        )
    binlog_format = variables.get("binlog_format", "")
    if binlog_format.upper() != "ROW":
        raise SourceConfigError(
            f"binlog_format is {binlog_format} on {address}, headwater reads row events: "
            "set binlog_format=ROW (SET GLOBAL binlog_format='ROW' now, and "
            "binlog_format=ROW under [mysqld] in the server configuration; sessions that "
            "are already open keep their old format until they reconnect)"
        )
    current, binary_logs = _binlog_status(conn, address, user, flavor, version)
    info = SourceInfo(
        address=address,
        flavor=flavor,
        version=version,
        server_id=int(variables.get("server_id", "0")),
        server_uuid=variables.get("server_uuid") or None,
        gtid_domain_id=int(variables["gtid_domain_id"]) if "gtid_domain_id" in variables else None,
        hostname=variables.get("hostname", ""),
        user=user,
        binlog_format=binlog_format,
        binlog_row_image=variables.get("binlog_row_image", ""),
        binlog_row_metadata=variables.get("binlog_row_metadata"),
        binlog_checksum=variables.get("binlog_checksum", "NONE"),
        current=current,
        binary_logs=binary_logs,
        gtid_position=variables.get("gtid_binlog_pos", variables.get("gtid_executed", "")),
        gtid_purged=variables.get("gtid_purged", ""),
    )
    _warn_row_settings(info)
    _check_start(info, start)
    if server_id == info.server_id:
        raise ServerIdConflictError(
            f"server_id {server_id} is the server_id of the source {address} itself: give "
            "this reader a server_id no server or replica of the topology uses"
        )
    other = find_server_id_conflict(conn, server_id, replica_host)
    if other is not None:
        raise ServerIdConflictError(
            f"another replica ({other}) is registered on {address} with server_id "
            f"{server_id}: give this reader a server_id no other replica uses "
            "(the server would disconnect one of the two)"
        )
    return info


def find_server_id_conflict(conn: Any, server_id: int, replica_host: str) -> str | None:
    """``host:port`` of another replica registered with ``server_id``, or ``None``.

    SHOW SLAVE HOSTS needs REPLICATION MASTER ADMIN on MariaDB 10.5+ (a plain replication
    user lacks it): then nothing can be seen here and ``None`` is returned.
    """
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SLAVE HOSTS")
            columns = [d[0].lower() for d in cur.description]
            rows = cur.fetchall()
    except pymysql.err.MySQLError as e:
        log.debug("SHOW SLAVE HOSTS refused (%s); server_id conflicts not checked", e.args[0])
        return None
    for row in rows:
        entry = dict(zip(columns, row, strict=True))
        if int(entry.get("server_id", 0)) == server_id and entry.get("host") != replica_host:
            return f"{entry.get('host')}:{entry.get('port')}"
    return None


def _binlog_status(
    conn: Any, address: str, user: str, flavor: str, version: str
) -> tuple[BinlogCoordinate, tuple[tuple[str, int], ...]]:
    try:
        with conn.cursor() as cur:
            try:
                cur.execute("SHOW MASTER STATUS")
            except pymysql.err.MySQLError as e:
                if e.args[0] != ER_PARSE_ERROR:
                    raise
                cur.execute("SHOW BINARY LOG STATUS")  # MySQL 8.4 removed SHOW MASTER STATUS
            status = cur.fetchone()
            cur.execute("SHOW BINARY LOGS")
            logs = tuple((str(r[0]), int(r[1])) for r in cur.fetchall())
    except pymysql.err.MySQLError as e:
        if e.args[0] == ER_SPECIFIC_ACCESS_DENIED:
            raise privilege_error(address, user, flavor, version, str(e.args[1])) from None
        raise SourceError(f"{address}: reading the binary log status failed: {e}") from None
    if status is None:
        raise SourceConfigError(f"binary logging is off on {address}: start it with --log-bin")
    return BinlogCoordinate(str(status[0]), int(status[1])), logs


def grant_statement(user: str, flavor: str, version: str) -> str:
    """The GRANT that gives ``user`` what a binlog reader needs on this server."""
    monitor = "REPLICATION CLIENT"
    if flavor == "mariadb" and _version_tuple(version) >= (10, 5, 2):
        monitor = "BINLOG MONITOR"  # MariaDB 10.5.2 split REPLICATION CLIENT
    return f"GRANT REPLICATION SLAVE, {monitor} ON *.* TO {user}"


def heartbeat_grant_problem(conn: Any, table: str, *, create: bool) -> str | None:
    """None when CURRENT_USER() may write the heartbeat ``db.table``; else what is missing
    and the GRANT to run.

    Read from information_schema's USER_PRIVILEGES, SCHEMA_PRIVILEGES (whose database
    names may be LIKE patterns, as in ``GRANT ... ON `hw%`.*``) and TABLE_PRIVILEGES, which
    list each privilege of each account by name (MariaDB sql/sql_show.cc
    fill_schema_user_privileges and friends). Privileges that come only through a role are
    not seen there: a user who has them that way is warned once, needlessly.
    """
    db, _, name = table.partition(".")
    needed = ["CREATE", "INSERT", "UPDATE"] if create else ["INSERT", "UPDATE"]
    with conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        user = _quote_account(str(cur.fetchone()[0]))
        cur.execute(
            "SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = %s"
            " UNION SELECT PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES"
            " WHERE GRANTEE = %s AND %s LIKE TABLE_SCHEMA"
            " UNION SELECT PRIVILEGE_TYPE FROM information_schema.TABLE_PRIVILEGES"
            " WHERE GRANTEE = %s AND TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (user, user, db, user, db, name),
        )
        have = {str(r[0]).upper() for r in cur.fetchall()}
    missing = [p for p in needed if p not in have]
    if not missing:
        return None
    return (
        f"{user} may not write the heartbeat table {table} (missing {', '.join(missing)}): "
        f"run GRANT {', '.join(needed)} ON `{db}`.* TO {user}"
    )


def privilege_error(
    address: str, user: str, flavor: str, version: str, detail: str
) -> PrivilegeError:
    return PrivilegeError(
        f"{user} may not read the binary log of {address} ({detail}): run "
        f"{grant_statement(user, flavor, version)}"
    )


def purged_error(info: SourceInfo, requested: StartPosition, detail: str) -> PositionPurgedError:
    """PositionPurgedError naming what was asked and what the server still has."""
    have = f"the oldest binlog on the server is {info.oldest}"
    if info.gtid_position:
        have += f", its GTID position is {info.gtid_position}"
    if info.gtid_purged:
        have += f", gtid_purged is {info.gtid_purged}"
    return PositionPurgedError(
        f"{info.address} no longer has the requested start {requested or 'position'} "
        f"({detail}); {have}. Start from a position the server still has (or take a new "
        "snapshot), and keep binlogs longer (expire_logs_days / binlog_expire_logs_seconds)"
    )


def _check_start(info: SourceInfo, start: StartPosition) -> None:
    if isinstance(start, BinlogCoordinate):
        names = [name for name, _ in info.binary_logs]
        if start.file not in names:
            raise purged_error(info, start, f"{start.file} is not in SHOW BINARY LOGS")
    elif isinstance(start, MysqlGtidSet) and info.is_mariadb:
        raise SourceConfigError(
            f"{info.address} is MariaDB: start from a MariaDB GTID position "
            "(domain-server-seq), not a MySQL GTID set"
        )
    elif isinstance(start, MariadbGtidPos) and not info.is_mariadb:
        raise SourceConfigError(
            f"{info.address} is MySQL: start from a MySQL GTID set (uuid:1-n), "
            "not a MariaDB GTID position"
        )


def _warn_row_settings(info: SourceInfo) -> None:
    if info.binlog_row_image.upper() != "FULL":
        log.warning(
            "%s: binlog_row_image is %s, so updates and deletes carry only some columns; "
            "set binlog_row_image=FULL for full before and after images",
            info.address,
            info.binlog_row_image,
        )
    if (info.binlog_row_metadata or "").upper() != "FULL":
        log.warning(
            "%s: binlog_row_metadata is %s, so column names come from the schema history, "
            "not the log; set binlog_row_metadata=FULL (MySQL 8.0.14+, MariaDB 10.5+)",
            info.address,
            info.binlog_row_metadata or "not supported",
        )


def _quote_account(current_user: str) -> str:
    name, _, host = current_user.rpartition("@")
    if not name:
        return f"'{current_user}'"
    return f"'{name}'@'{host}'"


def _version_tuple(version: str) -> tuple[int, ...]:
    head = version.split("-", 1)[0]
    parts = []
    for p in head.split(".")[:3]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)

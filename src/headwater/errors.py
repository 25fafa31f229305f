"""The one exception tree of headwater.

Every error headwater raises on purpose derives from :class:`HeadwaterError`. Errors say
what was wrong and where (file, event offset, config line, request field), never carry
secrets, and say whether retrying can help::

    HeadwaterError
     +-- ConfigError                  bad configuration (file, line, field)
     +-- BinlogError                  anything about reading a binary log
     |    +-- BinlogFormatError       bytes that do not parse (file/offset/event type)
     |    |    +-- ChecksumError      an event whose CRC32 does not match
     |    |    +-- TruncatedError     input ends inside an event
     |    +-- SourceError             the source server refuses or cannot serve us
     |         +-- AuthenticationError  the server refused the user name or password
     |         +-- SourceConfigError  server settings that must change (binlog_format, log_bin)
     |         +-- PrivilegeError     the user lacks a privilege
     |         +-- PositionPurgedError  requested file or GTIDs are no longer on the server
     |         +-- ServerIdConflictError  another replica uses our server_id
     |         +-- ConnectionLostError    the server closed or went silent (transient)
     +-- StoreError                   the change log on disk
     |    +-- CorruptRecordError      a record or index entry fails its checks (file, offset)
     |    +-- PositionNotRetainedError  a position older than what retention kept
     +-- SchemaError                  table definitions and the schema history
     |    +-- DdlError                a DDL statement that cannot be applied (reported, not raised)
     +-- SinkError                    a sink could not apply changes (table, key, statement,
          |                           and the sequence to resume from)
          +-- TransientSinkError      deadlock, lock wait timeout, lost connection: retries ran out

``TransientError`` is a mixin for errors where a retry (reconnect, back off) can succeed.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthenticationError",
    "BinlogError",
    "BinlogFormatError",
    "ChecksumError",
    "ConfigError",
    "ConnectionLostError",
    "CorruptRecordError",
    "DdlError",
    "HeadwaterError",
    "PositionNotRetainedError",
    "PositionPurgedError",
    "PrivilegeError",
    "SchemaError",
    "ServerIdConflictError",
    "SinkError",
    "SourceConfigError",
    "SourceError",
    "StoreError",
    "TransientError",
    "TransientSinkError",
    "TruncatedError",
]


class HeadwaterError(Exception):
    """Base of every error headwater raises on purpose."""


class TransientError:
    """Mixin: the operation may succeed if retried after a back-off."""

    retryable = True


class ConfigError(HeadwaterError):
    """A configuration value is missing or wrong; the message names file, line and field."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        where = ":".join(str(p) for p in (file, line) if p is not None)
        prefix = f"{where}: " if where else ""
        if field:
            prefix += f"{field}: "
        super().__init__(prefix + message)
        self.file = file
        self.line = line
        self.field = field


class BinlogError(HeadwaterError):
    """Something went wrong reading a binary log, from a file or a server."""


class BinlogFormatError(BinlogError):
    """Bytes of a binary log that do not parse.

    ``source`` is a file name or ``host:port``; ``offset`` the event's start offset in the
    binlog file; ``event_type`` the event type name when known.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        offset: int | None = None,
        event_type: str | None = None,
    ) -> None:
        parts = []
        if source is not None:
            parts.append(source)
        if offset is not None:
            parts.append(f"offset {offset}")
        if event_type is not None:
            parts.append(event_type)
        where = ", ".join(parts)
        super().__init__(f"{where}: {message}" if where else message)
        self.reason = message
        self.source = source
        self.offset = offset
        self.event_type = event_type

    def located(
        self,
        *,
        source: str | None = None,
        offset: int | None = None,
        event_type: str | None = None,
    ) -> BinlogFormatError:
        """The same error with the location filled in where it was missing."""
        return type(self)(
            self.reason,
            source=self.source if self.source is not None else source,
            offset=self.offset if self.offset is not None else offset,
            event_type=self.event_type if self.event_type is not None else event_type,
        )


class ChecksumError(BinlogFormatError):
    """An event's CRC32 checksum does not match its bytes."""


class TruncatedError(BinlogFormatError):
    """The input ends inside an event (or inside a field of one)."""


class SourceError(BinlogError):
    """The source server refuses, or cannot serve, what we asked."""


class AuthenticationError(SourceError):
    """The server refused the user name or password (error 1045); never names the password."""


class SourceConfigError(SourceError):
    """A server setting must change before headwater can read it (the message names it)."""


class PrivilegeError(SourceError):
    """The replication user lacks a privilege (the message names the GRANT)."""


class PositionPurgedError(SourceError):
    """The requested binlog file or GTIDs were purged from the server (error 1236)."""


class ServerIdConflictError(SourceError):
    """Another replica is connected with the same server_id."""


class ConnectionLostError(TransientError, SourceError):
    """The server closed the stream or stopped sending (no event or heartbeat in time)."""


class StoreError(HeadwaterError):
    """Something went wrong in the change log on disk."""


class CorruptRecordError(StoreError):
    """A record, footer or index entry failed its checks; names the file and offset."""

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None):
        where = ", ".join(p for p in (path, None if offset is None else f"offset {offset}") if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.path = path
        self.offset = offset


class PositionNotRetainedError(StoreError):
    """The requested position is older than what retention has kept."""


class SchemaError(HeadwaterError):
    """Table definitions or the schema history: a corrupt history file, positions out of order."""


class DdlError(SchemaError):
    """A DDL statement that cannot be applied to the known definitions.

    :func:`headwater.schema.ddl.apply_ddl` catches it and reports the statement as unparsed.
    """


class SinkError(HeadwaterError):
    """A sink could not apply changes to its target.

    The message names the target table, the key and the statement (SQL text with
    placeholders, never values of other rows and never credentials). ``resume_sequence`` is
    the first change sequence not applied for ``shard`` (start the pipeline again from there,
    or simply replay: applied changes are skipped); ``None`` when unknown.
    """

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        key: object = None,
        statement: str | None = None,
        shard: int | None = None,
        batch_id: int | None = None,
        resume_sequence: int | None = None,
    ) -> None:
        parts = [message]
        if table is not None:
            parts.append(f"table {table}")
        if key is not None:
            parts.append(f"key {key}")
        if shard is not None:
            parts.append(f"shard {shard}")
        if batch_id is not None:
            parts.append(f"batch {batch_id}")
        if resume_sequence is not None:
            parts.append(f"resume from sequence {resume_sequence}")
        if statement is not None:
            parts.append(f"statement: {statement}")
        super().__init__("; ".join(parts))
        self.reason = message
        self.table = table
        self.key = key
        self.statement = statement
        self.shard = shard
        self.batch_id = batch_id
        self.resume_sequence = resume_sequence

    def __reduce__(self) -> tuple[object, ...]:  # survives pickling (Spark executors)
        fields = ("table", "key", "statement", "shard", "batch_id", "resume_sequence")
        return (
            _rebuild_sink_error,
            (type(self), self.reason, {f: getattr(self, f) for f in fields}),
        )


def _rebuild_sink_error(cls: type[SinkError], reason: str, fields: dict[str, Any]) -> SinkError:
    return cls(reason, **fields)


class TransientSinkError(TransientError, SinkError):
    """A retryable sink failure (deadlock, lock wait timeout, lost connection) that lasted
    through every retry of the sink's retry policy."""

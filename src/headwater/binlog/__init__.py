"""Reading MySQL and MariaDB binary logs: framing, events, row decoding, the replica client.

Modules, in import order (each imports only those above it):

``constants``  event type and column type codes.
``framing``    the 19-byte event header, FORMAT_DESCRIPTION, checksum verification, and
               iteration over the events of a binlog file or byte buffer. No decoding of bodies.
``jsonb``      MySQL binary JSON to its text form.
``jsondiff``   JSON diffs of PARTIAL_UPDATE_ROWS (MySQL 8 partial JSON updates).
``tablemap``   TABLE_MAP events with all optional metadata -> :class:`TableMap`.
``codec``      column value decoders and the per-table row decoder, generated once per
               TABLE_MAP shape.
``rows``       WRITE/UPDATE/DELETE_ROWS v1/v2, PARTIAL_UPDATE_ROWS, MariaDB compressed rows.
``events``     the other event bodies and :func:`parse_event`, the one dispatch table.
``client``     the replica connection: register, dump by file/offset or GTID, fast framing.
``preflight``  checks of the source before a dump, with errors that name the fix.

Decoders are pure: bytes and a table definition in, values out. They raise
:class:`headwater.errors.BinlogFormatError` (or a subclass) on bad bytes and nothing else.

Python values of decoded columns (docs/formats.md repeats this for users):

=====================  ===================================================================
integer types          ``int`` (unsigned when the column is unsigned)
FLOAT, DOUBLE          ``float``
DECIMAL                ``decimal.Decimal``, exact
BIT(n)                 ``int``
YEAR                   ``int`` (0 for 0000)
DATE                   ``datetime.date``; a zero or partly zero date (``0000-00-00``,
                       ``2020-00-15``) is the ``str`` MySQL would print, never silently NULL
TIME                   ``datetime.timedelta`` (negative and > 24 h allowed)
DATETIME               ``datetime.datetime`` (naive); invalid dates as ``str`` like DATE
TIMESTAMP              ``datetime.datetime`` aware, UTC; the zero TIMESTAMP as the ``str``
                       ``0000-00-00 00:00:00`` (with fraction digits when fsp > 0)
CHAR/VARCHAR/TEXT      ``str`` decoded with the column charset; ``bytes`` for binary charset
BINARY/VARBINARY/BLOB  ``bytes``
ENUM                   ``str`` when the value names are known, else the 1-based ``int`` index
SET                    ``tuple[str, ...]`` in definition order when names are known, else
                       the ``int`` bitmask
JSON                   ``str``: the JSON text as MySQL prints it (MySQL's binary JSON is
                       converted; MariaDB's JSON is already text)
GEOMETRY               ``bytes``: MySQL's internal format, 4-byte SRID then WKB
VECTOR                 ``tuple[float, ...]``
NULL                   ``None``
=====================  ===================================================================
"""

"""Record framing of the change log: one committed transaction (or one chunk of one) per record.

Every record is written as one frame. All integers are little-endian::

    frame prefix (12 bytes, FRAME)
      0   4  magic       b"HWR1"
      4   4  crc32c      CRC32C (Castagnoli) of bytes 8 .. end of frame (body_len + body)
      8   4  body_len    number of bytes that follow the prefix
    body
      fixed header (FIXED, 62 bytes)
      0   8  seq             store-assigned sequence number, 1, 2, 3, ... over the whole log
      8   8  change_id       Position.change_id
     16   4  file_num        Position.file_num (binlog file number)
     20   8  offset          Position.offset (binlog offset of the transaction's first event)
     28   4  event_index     Position.event_index
     32   8  ts_us           commit timestamp, microseconds since the Unix epoch (UTC)
     40   8  schema_version  schema version in force for this transaction
     48   1  flags           bit 0: first chunk, bit 1: last chunk (a whole transaction has both)
     49   1  gtid_len        length of the GTID text (0: no GTID)
     50   2  n_tables        number of (table, rows) entries
     52   4  tables_len      bytes of the table list
     56   4  chunk_no        0 for the first chunk of a transaction, then 1, 2, ...
     60   2  reserved        zero
      gtid        gtid_len bytes, ASCII: MySQL ``uuid:gno`` or MariaDB ``domain-server-seq``
      tables      n_tables times: name_len (u16), name (UTF-8, ``db.table``), rows (u64)
      payload     the rest of the body: the transaction's raw binlog events

Why this shape: the CRC covers the length, so a torn or flipped length is caught by the CRC
(or by the frame running past the end of the file) and never makes a reader trust garbage.
A frame whose magic, length bound or CRC fails is *invalid*; a reader never returns it.
``body_len`` is capped at :data:`MAX_BODY` so a corrupt length cannot make us allocate
gigabytes. Chunks of one large transaction share its position and GTID; the writer keeps
them together in one segment and makes them visible only when the last chunk is durable.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from crc32c import crc32c

from headwater.errors import CorruptRecordError
from headwater.position import Position

__all__ = [
    "FIRST_CHUNK",
    "FIXED",
    "FRAME",
    "LAST_CHUNK",
    "LEN_FIXED",
    "MAGIC",
    "MAX_BODY",
    "PREFIX",
    "WHOLE",
    "Record",
    "RecordHead",
    "decode_body",
    "decode_head",
    "encode_parts",
    "encode_tables",
    "frame_crc",
    "frame_head",
]

MAGIC = 0x31525748  # b"HWR1" read as a little-endian u32
MAGIC_BYTES = b"HWR1"
FRAME = struct.Struct("<III")  # magic, crc32c, body_len
LEN = struct.Struct("<I")
FIXED = struct.Struct("<QQIQIQQBBHIIH")
# The frame split where the CRC's coverage starts: PREFIX (magic, crc) is followed by
# LEN_FIXED (body_len and the fixed header), which the CRC covers with the rest.
PREFIX = struct.Struct("<II")
LEN_FIXED = struct.Struct("<I" + FIXED.format[1:])
TABLE_NAME = struct.Struct("<H")
TABLE_ROWS = struct.Struct("<Q")
MAX_BODY = 256 * 1024 * 1024

FIRST_CHUNK = 1
LAST_CHUNK = 2
WHOLE = FIRST_CHUNK | LAST_CHUNK


@dataclass(slots=True)
class Record:
    """One stored record: a whole committed transaction, or one chunk of a large one.

    ``seq`` is assigned by the store on append (leave it 0 when building a record to
    append). ``tables`` lists ``(db.table, rows)`` for the tables the transaction touched.
    """

    position: Position
    payload: bytes
    ts_us: int = 0
    gtid: str = ""
    tables: tuple[tuple[str, int], ...] = ()
    schema_version: int = 0
    flags: int = WHOLE
    chunk_no: int = 0
    seq: int = field(default=0)

    @property
    def first_chunk(self) -> bool:
        return bool(self.flags & FIRST_CHUNK)

    @property
    def last_chunk(self) -> bool:
        """True for a whole transaction and for the final chunk of a chunked one."""
        return bool(self.flags & LAST_CHUNK)


def frame_head(
    rec: Record,
    seq: int,
    *,
    _pack: Callable[..., bytes] = LEN_FIXED.pack,
    _ppack: Callable[..., bytes] = PREFIX.pack,
    _crc: Callable[[bytes, int], int] = crc32c,
    _fixed: int = FIXED.size,
) -> bytes:
    """The frame prefix and header of ``rec`` numbered ``seq`` (the frame is these bytes
    followed by ``rec.payload``, so its length is their two lengths).

    The one record encoder (the writer's batch loop calls it per record; the compiled
    reader builds the same bytes, held equal by a differential test). The payload is not
    copied: the caller writes the returned bytes, then ``rec.payload``. Raises
    ``ValueError`` for a record that cannot be framed (over-long GTID or table list).
    (The keyword-only parameters are constants bound as locals: this runs per record.)
    """
    gtid = rec.gtid.encode("ascii")
    glen = len(gtid)
    if glen > 255:
        raise ValueError(f"GTID longer than 255 bytes: {rec.gtid!r}")
    t = rec.tables
    tables = encode_tables(t) if t else b""
    payload = rec.payload
    body_len = _fixed + glen + len(tables) + len(payload)
    if body_len > MAX_BODY:
        raise ValueError(f"record body of {body_len} bytes exceeds the {MAX_BODY} byte cap")
    pos = rec.position
    hdr = (
        _pack(
            body_len,
            seq,
            pos.change_id,
            pos.file_num,
            pos.offset,
            pos.event_index,
            rec.ts_us,
            rec.schema_version,
            rec.flags,
            glen,
            len(t),
            len(tables),
            rec.chunk_no,
            0,
        )
        + gtid
        + tables
    )
    return _ppack(MAGIC, _crc(payload, _crc(hdr, 0))) + hdr


def encode_parts(rec: Record, seq: int) -> tuple[bytes, bytes, int]:
    """The frame prefix plus header bytes, the payload, and the frame's total length."""
    head = frame_head(rec, seq)
    return head, rec.payload, len(head) + len(rec.payload)


_TABLES_CACHE: dict[tuple[tuple[str, int], ...], bytes] = {}


def encode_tables(tables: tuple[tuple[str, int], ...]) -> bytes:
    """The table list's bytes; the same few lists recur, so they are cached (bounded)."""
    cached = _TABLES_CACHE.get(tables)
    if cached is not None:
        return cached
    if len(tables) > 0xFFFF:
        raise ValueError("more than 65535 tables in one record")
    parts = []
    for name, rows in tables:
        raw = name.encode("utf-8")
        if len(raw) > 0xFFFF:
            raise ValueError(f"table name longer than 65535 bytes: {name[:40]!r}...")
        parts.append(TABLE_NAME.pack(len(raw)) + raw + TABLE_ROWS.pack(rows))
    out = b"".join(parts)
    if len(_TABLES_CACHE) >= 4096:
        _TABLES_CACHE.clear()
    _TABLES_CACHE[tables] = out
    return out


def frame_crc(body_len: int, body: bytes | memoryview) -> int:
    """The CRC a frame with this body must carry."""
    return crc32c(body, crc32c(LEN.pack(body_len)))


#: Table lists by their bytes (:func:`_tables_of`): the same few recur record after record.
_TABLES_DECODED: dict[bytes, tuple[tuple[str, int], ...]] = {}


def _tables_of(raw: bytes, n_tables: int) -> tuple[tuple[str, int], ...]:
    """The table list encoded in ``raw`` (``n_tables`` entries; :func:`encode_tables`),
    remembered by its bytes (bounded, as :func:`encode_tables` is)."""
    key = raw if len(raw) <= 512 else b""
    cached = _TABLES_DECODED.get(key) if key else None
    if cached is not None:
        return cached
    out = []
    q = 0
    for _ in range(n_tables):
        (nlen,) = TABLE_NAME.unpack_from(raw, q)
        name = raw[q + 2 : q + 2 + nlen].decode("utf-8")
        (rows,) = TABLE_ROWS.unpack_from(raw, q + 2 + nlen)
        out.append((name, rows))
        q += 2 + nlen + 8
    if q != len(raw):
        raise ValueError("table list length mismatch")
    tables = tuple(out)
    if key:
        if len(_TABLES_DECODED) >= 4096:
            _TABLES_DECODED.clear()
        _TABLES_DECODED[key] = tables
    return tables


def _parse_header(
    body: bytes | memoryview,
) -> tuple[tuple[int, ...], str, tuple[tuple[str, int], ...], int]:
    """The fixed fields, GTID text, table list and header length of a record body (or of
    its header alone). Raises struct.error, ValueError or UnicodeDecodeError."""
    fixed = FIXED.unpack_from(body, 0)
    glen, n_tables, tlen = fixed[8], fixed[9], fixed[10]
    p = FIXED.size
    gtid = bytes(body[p : p + glen]).decode("ascii") if glen else ""
    p += glen
    tables: tuple[tuple[str, int], ...] = ()
    if n_tables:
        raw = bytes(body[p : p + tlen])
        if len(raw) != tlen:
            raise ValueError("table list runs past the body")
        tables = _tables_of(raw, n_tables)
    p += tlen
    if p > len(body):
        raise ValueError("header longer than body")
    return fixed, gtid, tables, p


def decode_body(
    body: bytes | memoryview,
    *,
    path: str | None = None,
    offset: int | None = None,
    payload: bytes | None = None,
) -> Record:
    """Parse a CRC-checked body into a :class:`Record`; with ``payload``, ``body`` is the
    header alone and ``payload`` (read on its own: not copied again) the rest.

    The CRC already vouches for the bytes, so a failure here means a writer bug or a
    colliding CRC; it is still reported as :class:`CorruptRecordError` with the location.
    """
    try:
        fixed, gtid, tables, p = _parse_header(body)
        if payload is not None and p != len(body):
            raise ValueError("header longer than body")
        (seq, change_id, file_num, boff, event_index, ts_us, schema_version, flags) = fixed[:8]
        return Record(
            position=Position(change_id, file_num, boff, event_index),
            payload=bytes(body[p:]) if payload is None else payload,
            ts_us=ts_us,
            gtid=gtid,
            tables=tables,
            schema_version=schema_version,
            flags=flags,
            chunk_no=fixed[11],
            seq=seq,
        )
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise CorruptRecordError(
            f"record header does not parse: {e}", path=path, offset=offset
        ) from None


@dataclass(slots=True)
class RecordHead:
    """What a record's header says, without its payload: for planning reads (which
    records of a range are wanted, how many payload bytes and rows they hold) that never
    look at the events. ``pos`` is the position as a tuple; :attr:`position` builds the
    :class:`Position` (only the few a caller keeps need one)."""

    seq: int
    pos: tuple[int, int, int, int]
    ts_us: int
    gtid: str
    tables: tuple[tuple[str, int], ...]
    schema_version: int
    flags: int
    chunk_no: int
    #: payload bytes
    size: int

    @property
    def position(self) -> Position:
        return Position(*self.pos)

    @classmethod
    def of(cls, rec: Record) -> RecordHead:
        """The head of a record already read whole."""
        p = rec.position
        return cls(
            rec.seq, (p.change_id, p.file_num, p.offset, p.event_index), rec.ts_us, rec.gtid,
            rec.tables, rec.schema_version, rec.flags, rec.chunk_no, len(rec.payload),
        )  # fmt: skip


def decode_head(
    body: bytes | memoryview, *, path: str | None = None, offset: int | None = None
) -> RecordHead:
    """:func:`decode_body` without building the payload: the :class:`RecordHead` of a
    CRC-checked body."""
    try:
        fixed, gtid, tables, p = _parse_header(body)
        return RecordHead(
            fixed[0], (fixed[1], fixed[2], fixed[3], fixed[4]), fixed[5], gtid, tables,
            fixed[6], fixed[7], fixed[11], len(body) - p,
        )  # fmt: skip
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise CorruptRecordError(
            f"record header does not parse: {e}", path=path, offset=offset
        ) from None

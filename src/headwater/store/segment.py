"""Segment files: naming, sealed-segment footers, reading, scanning and compression.

A log directory holds (``BASE`` is the seq of the segment's first record, 20 digits, so a
plain directory listing sorts segments in log order and is the manifest)::

    BASE.seg        records (see record.py); a sealed one ends with a footer
    BASE.zseg       a sealed segment after compression (same records, zstd blocks)
    BASE.idx        its sparse index (see index.py)
    *.bad           segments set aside as corrupt (never read again, kept for inspection)
    head            where the writer has acknowledged up to (see log.py)
    LOCK            flock'ed by the one writer

Footer of a sealed ``.seg``, appended after the last record (FOOTER then GITEM items,
then the 12-byte end trailer)::

      0   4  magic "HWSF"  (not the record magic, so a record scan stops here)
      4   8  data_end      bytes of records before the footer
     12   8  count         records in the segment
     20   8  first_seq, 28 8 last_seq
     36  24  first position (change_id u64, file_num u32, offset u64, event_index u32)
     60  24  last position
     84   8  first_ts_us, 92 8 max_ts_us, 100 8 sealed_at_us (wall clock)
    108   1  has_other     1 if some record had no (parseable) GTID
    109   2  n_gtid        GITEM entries follow: kind u8, id 16 bytes, min u64, max u64
    end trailer: footer_len u32 (FOOTER + items), crc32c of those bytes u32, magic "HWSE"

A compressed ``.zseg``: ``b"HWZ1"`` and 4 zero bytes; blocks of the uncompressed segment
bytes ``[0, data_end)``, each ``clen u32, ulen u32, crc32c(compressed) u32`` then the zstd
frame; a block table (per block: uncompressed offset u64, file offset u64); the footer (as
above); a trailer ``table_off u64, n_blocks u32, footer_len u32, crc32c(table + footer)
u32, b"HWZE"``. Index offsets always refer to uncompressed positions, so an index serves
both forms; reading a record decompresses only the blocks it spans.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
from dataclasses import dataclass

import zstandard
from crc32c import crc32c

from headwater.errors import CorruptRecordError
from headwater.position import Position
from headwater.store.index import GtidSummary, IndexBuilder, PosTuple
from headwater.store.record import (
    FIXED,
    FRAME,
    LAST_CHUNK,
    MAGIC,
    MAX_BODY,
    Record,
    RecordHead,
    decode_body,
    decode_head,
    frame_crc,
)

__all__ = [
    "Footer",
    "PlainSource",
    "ScanResult",
    "SegmentMeta",
    "ZstdSource",
    "compress_segment",
    "open_source",
    "read_footer",
    "read_head",
    "read_record",
    "scan_buffer",
    "segment_name",
]

SEG = ".seg"
ZSEG = ".zseg"
IDX = ".idx"
BAD = ".bad"

FOOTER = struct.Struct("<4sQQQQQIQIQIQIQQQBH")
FOOTER_MAGIC = b"HWSF"
GITEM = struct.Struct("<B16sQQ")
END = struct.Struct("<II4s")
END_MAGIC = b"HWSE"
ZHEAD = b"HWZ1\0\0\0\0"
ZBLOCK = struct.Struct("<III")
ZTABLE = struct.Struct("<QQ")
ZTRAILER = struct.Struct("<QIII4s")
ZTRAILER_MAGIC = b"HWZE"
WINDOW = 256 * 1024


def segment_name(base: int, suffix: str = SEG) -> str:
    return f"{base:020d}{suffix}"


def parse_name(name: str) -> tuple[int, str] | None:
    """``(base, suffix)`` of a segment or index file name, else None."""
    stem, _dot, ext = name.partition(".")
    if len(stem) != 20 or not stem.isdigit() or "." + ext not in (SEG, ZSEG, IDX):
        return None
    return int(stem), "." + ext


@dataclass(frozen=True, slots=True)
class Footer:
    data_end: int
    count: int
    first_seq: int
    last_seq: int
    first_pos: PosTuple
    last_pos: PosTuple
    first_ts: int
    max_ts: int
    sealed_at_us: int
    summary: GtidSummary

    def encode(self) -> bytes:
        items = [] if self.summary is None else sorted(self.summary.items())
        body = FOOTER.pack(
            FOOTER_MAGIC,
            self.data_end,
            self.count,
            self.first_seq,
            self.last_seq,
            *self.first_pos,
            *self.last_pos,
            self.first_ts,
            self.max_ts,
            self.sealed_at_us,
            1 if self.summary is None else 0,
            len(items),
        ) + b"".join(GITEM.pack(k, i, lo, hi) for (k, i), (lo, hi) in items)
        return body

    @classmethod
    def decode(cls, body: bytes, *, path: str, offset: int) -> Footer:
        try:
            f = FOOTER.unpack_from(body, 0)
            if f[0] != FOOTER_MAGIC:
                raise ValueError("bad footer magic")
            n = f[17]
            summary: dict[tuple[int, bytes], tuple[int, int]] = {}
            for j in range(n):
                k, i, lo, hi = GITEM.unpack_from(body, FOOTER.size + j * GITEM.size)
                summary[(k, i)] = (lo, hi)
            if FOOTER.size + n * GITEM.size != len(body):
                raise ValueError("footer length mismatch")
        except (struct.error, ValueError) as e:
            raise CorruptRecordError(
                f"segment footer does not parse: {e}", path=path, offset=offset
            ) from None
        return cls(
            f[1],
            f[2],
            f[3],
            f[4],
            (f[5], f[6], f[7], f[8]),
            (f[9], f[10], f[11], f[12]),
            f[13],
            f[14],
            f[15],
            None if f[16] else summary,
        )

    @property
    def first_position(self) -> Position:
        return Position(*self.first_pos)

    @property
    def last_position(self) -> Position:
        return Position(*self.last_pos)


@dataclass(slots=True)
class SegmentMeta:
    """One segment as the log's top-level index knows it (footer None: active)."""

    base: int
    path: str
    footer: Footer | None
    file_bytes: int

    @property
    def compressed(self) -> bool:
        return self.path.endswith(ZSEG)

    @property
    def index_path(self) -> str:
        return os.path.join(os.path.dirname(self.path), segment_name(self.base, IDX))


def read_footer(path: str) -> Footer:
    """Read and check the footer of a sealed ``.seg`` or ``.zseg`` file."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if path.endswith(ZSEG):
            if size < len(ZHEAD) + ZTRAILER.size:
                raise CorruptRecordError("compressed segment too short", path=path, offset=0)
            f.seek(size - ZTRAILER.size)
            table_off, nblocks, flen, crc, magic = ZTRAILER.unpack(f.read(ZTRAILER.size))
            at = size - ZTRAILER.size - flen
            if magic != ZTRAILER_MAGIC or table_off + nblocks * ZTABLE.size != at or at < 0:
                raise CorruptRecordError(
                    "compressed segment trailer is bad", path=path, offset=size - ZTRAILER.size
                )
            f.seek(table_off)
            raw = f.read(size - ZTRAILER.size - table_off)
            if crc32c(raw) != crc:
                raise CorruptRecordError(
                    "compressed segment table/footer CRC mismatch", path=path, offset=table_off
                )
            return Footer.decode(raw[nblocks * ZTABLE.size :], path=path, offset=at)
        if size < END.size:
            raise CorruptRecordError("segment has no footer", path=path, offset=0)
        f.seek(size - END.size)
        flen, crc, magic = END.unpack(f.read(END.size))
        at = size - END.size - flen
        if magic != END_MAGIC or at < 0:
            raise CorruptRecordError("segment has no footer", path=path, offset=size - END.size)
        f.seek(at)
        body = f.read(flen)
        if crc32c(body) != crc:
            raise CorruptRecordError("segment footer CRC mismatch", path=path, offset=at)
        footer = Footer.decode(body, path=path, offset=at)
        if footer.data_end != at:
            raise CorruptRecordError(
                "segment footer data_end does not match its place", path=path, offset=at
            )
        return footer


def encode_footer_tail(footer: Footer) -> bytes:
    body = footer.encode()
    return body + END.pack(len(body), crc32c(body), END_MAGIC)


class PlainSource:
    """Random reads from an uncompressed segment through a read-ahead window."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        self._win_off = 0
        self._win = b""

    def read(self, off: int, n: int) -> bytes:
        w = self._win
        rel = off - self._win_off
        if rel >= 0 and rel + n <= len(w):
            return w[rel : rel + n]
        if n >= WINDOW:
            return os.pread(self.fd, n, off)
        self._win = os.pread(self.fd, WINDOW, off)
        self._win_off = off
        return self._win[:n]

    def span(self, off: int, n: int) -> tuple[bytes, int] | None:
        """``(buffer, at)`` with the ``n`` bytes at ``off`` as ``buffer[at : at + n]``
        (the read-ahead window, not copied), or None when they do not fit one window or
        the file ends first."""
        w = self._win
        rel = off - self._win_off
        if rel >= 0 and rel + n <= len(w):
            return w, rel
        if n > WINDOW:
            return None
        self._win = w = os.pread(self.fd, WINDOW, off)
        self._win_off = off
        return (w, 0) if n <= len(w) else None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class ZstdSource:
    """Random reads from a compressed segment; decompresses (and caches) one block."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(self.fd).st_size
            table_off, nblocks, _flen, _crc, _m = ZTRAILER.unpack(
                os.pread(self.fd, ZTRAILER.size, size - ZTRAILER.size)
            )
            table = os.pread(self.fd, nblocks * ZTABLE.size, table_off)
            self._uoffs: list[int] = []
            self._foffs: list[int] = []
            for u, fo in ZTABLE.iter_unpack(table):
                self._uoffs.append(u)
                self._foffs.append(fo)
        except (struct.error, OSError):
            os.close(self.fd)
            raise CorruptRecordError(
                "compressed segment table unreadable", path=path, offset=0
            ) from None
        self._dctx = zstandard.ZstdDecompressor()
        self._cached = -1
        self._block = b""

    def _load(self, i: int) -> bytes:
        if i != self._cached:
            at = self._foffs[i]
            clen, ulen, crc = ZBLOCK.unpack(os.pread(self.fd, ZBLOCK.size, at))
            comp = os.pread(self.fd, clen, at + ZBLOCK.size)
            if len(comp) != clen or crc32c(comp) != crc:
                raise CorruptRecordError("compressed block CRC mismatch", path=self.path, offset=at)
            try:
                block = self._dctx.decompress(comp, max_output_size=ulen)
            except zstandard.ZstdError as e:
                raise CorruptRecordError(
                    f"compressed block does not decompress: {e}", path=self.path, offset=at
                ) from None
            if len(block) != ulen:
                raise CorruptRecordError(
                    "compressed block has the wrong length", path=self.path, offset=at
                )
            self._cached, self._block = i, block
        return self._block

    def read(self, off: int, n: int) -> bytes:
        out = []
        while n > 0:
            i = bisect.bisect_right(self._uoffs, off) - 1
            if i < 0:
                break
            block = self._load(i)
            rel = off - self._uoffs[i]
            if rel >= len(block):
                break
            piece = block[rel : rel + n]
            out.append(piece)
            off += len(piece)
            n -= len(piece)
        return b"".join(out)

    def span(self, off: int, n: int) -> tuple[bytes, int] | None:
        """As :meth:`PlainSource.span`: the bytes when one decompressed block holds them."""
        i = bisect.bisect_right(self._uoffs, off) - 1
        if i < 0:
            return None
        block = self._load(i)
        rel = off - self._uoffs[i]
        return (block, rel) if rel + n <= len(block) else None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


Source = PlainSource | ZstdSource


def open_source(path: str) -> Source:
    return ZstdSource(path) if path.endswith(ZSEG) else PlainSource(path)


def _framed(src: Source, off: int, limit: int) -> tuple[memoryview, int] | None:
    """The CRC-checked body of the frame at ``off`` as a view of the source's buffer, and
    the frame's length; None when the frame does not lie in one buffer (then
    :func:`read_record`'s reads take it). Raises CorruptRecordError as they do."""
    got = src.span(off, FRAME.size)
    if got is None:
        return None
    buf, at = got
    magic, crc, blen = FRAME.unpack_from(buf, at)
    if magic != MAGIC:
        raise CorruptRecordError("bad record magic", path=src.path, offset=off)
    if blen > MAX_BODY or off + FRAME.size + blen > limit:
        raise CorruptRecordError(
            f"record length {blen} runs past the data", path=src.path, offset=off
        )
    flen = FRAME.size + blen
    got = src.span(off, flen)
    if got is None:
        return None
    buf, at = got
    body = memoryview(buf)[at + FRAME.size : at + flen]
    if frame_crc(blen, body) != crc:
        raise CorruptRecordError("record CRC mismatch", path=src.path, offset=off)
    return body, flen


def read_head(src: Source, off: int, limit: int) -> tuple[RecordHead, int]:
    """:func:`read_record` without building the payload: the record's
    :class:`~headwater.store.record.RecordHead` and its frame length. The CRC is checked
    all the same (over the window the frame lies in: no copy), so a planning read trusts
    no byte a whole read would refuse."""
    framed = _framed(src, off, limit)
    if framed is None:
        rec, flen = read_record(src, off, limit)
        return RecordHead.of(rec), flen
    body, flen = framed
    return decode_head(body, path=src.path, offset=off), flen


def read_record(src: Source, off: int, limit: int) -> tuple[Record, int]:
    """The record at ``off`` (which must end at or before ``limit``) and its frame length.

    Only called for data known to be acknowledged, so any failure is corruption. A frame
    that lies in the source's read-ahead window (or decompressed block) is parsed there,
    its payload the one copy; a larger one is read in pieces.
    """
    framed = _framed(src, off, limit)
    if framed is not None:
        body, flen = framed
        return decode_body(body, path=src.path, offset=off), flen
    prefix = src.read(off, FRAME.size)
    if len(prefix) < FRAME.size:
        raise CorruptRecordError("record frame cut short", path=src.path, offset=off)
    magic, crc, blen = FRAME.unpack(prefix)
    if magic != MAGIC:
        raise CorruptRecordError("bad record magic", path=src.path, offset=off)
    if blen > MAX_BODY or off + FRAME.size + blen > limit:
        raise CorruptRecordError(
            f"record length {blen} runs past the data", path=src.path, offset=off
        )
    at = off + FRAME.size
    # The header first, then the payload read on its own (a bytes object of its own, not
    # copied again out of the body: a replay's task reads every record of its range), the
    # CRC carried over both. A header that does not fit takes the whole-body read, whose
    # CRC check and decode_body report it as before.
    fixed = src.read(at, FIXED.size) if blen >= FIXED.size else b""
    if len(fixed) == FIXED.size:
        _f = FIXED.unpack_from(fixed)
        hlen = FIXED.size + _f[8] + _f[10]  # glen, tlen
        if hlen <= blen:
            header = (
                fixed + src.read(at + FIXED.size, hlen - FIXED.size) if hlen > FIXED.size else fixed
            )
            payload = src.read(at + hlen, blen - hlen)
            if (
                len(header) != hlen
                or len(payload) != blen - hlen
                or crc32c(payload, frame_crc(blen, header)) != crc
            ):
                raise CorruptRecordError("record CRC mismatch", path=src.path, offset=off)
            rec = decode_body(header, path=src.path, offset=off, payload=payload)
            return rec, FRAME.size + blen
    whole = src.read(at, blen)
    if len(whole) != blen or frame_crc(blen, whole) != crc:
        raise CorruptRecordError("record CRC mismatch", path=src.path, offset=off)
    return decode_body(whole, path=src.path, offset=off), FRAME.size + blen


@dataclass(slots=True)
class ScanResult:
    """What a scan of segment data found; only whole, committed transactions count."""

    commit_end: int
    last_seq: int
    count: int
    first_pos: PosTuple
    last_pos: PosTuple
    first_ts: int
    builder: IndexBuilder
    bad_offset: int | None
    bad_reason: str
    corrupt_after: bool


def _frame_ok(buf: bytes | mmap.mmap, off: int, limit: int) -> int:
    """Length of a valid frame at ``off``, or 0."""
    if off + FRAME.size > limit:
        return 0
    magic, crc, blen = FRAME.unpack_from(buf, off)
    end: int = off + FRAME.size + blen
    if magic != MAGIC or blen < FIXED.size or blen > MAX_BODY or end > limit:
        return 0
    if frame_crc(blen, memoryview(buf)[off + FRAME.size : end]) != crc:
        return 0
    return end - off


def scan_buffer(buf: bytes | mmap.mmap, base: int, limit: int, interval: int) -> ScanResult:
    """Check every frame of ``buf[:limit]`` and rebuild the segment's index from it.

    Stops at the first invalid frame, a sequence gap, or the end. Records of a chunked
    transaction whose last chunk is missing are left out (they were never acknowledged).
    ``corrupt_after`` tells a torn tail (nothing valid follows) from damage in the middle.
    """
    builder = IndexBuilder(interval)
    off = 0
    expect = base
    commit_end, committed, count = 0, base - 1, 0
    first_pos: PosTuple = (0, 0, 0, 0)
    last_pos: PosTuple = (0, 0, 0, 0)
    first_ts = 0
    group: list[tuple[int, int, PosTuple, int, str, int]] = []
    bad: int | None = None
    reason = ""
    mv = memoryview(buf)
    try:
        while off < limit:
            flen = _frame_ok(buf, off, limit)
            if not flen:
                bad, reason = off, "invalid frame (bad magic, length or CRC)"
                break
            fx = FIXED.unpack_from(buf, off + FRAME.size)
            seq, flags, glen = fx[0], fx[7], fx[8]
            if seq != expect:
                bad, reason = off, f"sequence {seq} where {expect} was expected"
                break
            gstart = off + FRAME.size + FIXED.size
            gtid = bytes(mv[gstart : gstart + glen]).decode("ascii", "replace") if glen else ""
            pos = (fx[1], fx[2], fx[3], fx[4])
            group.append((seq, off, pos, fx[5], gtid, flen))
            off += flen
            expect += 1
            if flags & LAST_CHUNK:
                for g in group:
                    builder.add(*g)
                if count == 0:
                    first_pos, first_ts = group[0][2], group[0][3]
                count += len(group)
                last_pos = pos
                group.clear()
                commit_end, committed = off, seq
    finally:
        mv.release()
    corrupt_after = False
    if bad is not None:
        corrupt_after = _valid_frame_after(buf, bad + 1, limit)
    return ScanResult(
        commit_end,
        committed,
        count,
        first_pos,
        last_pos,
        first_ts,
        builder,
        bad,
        reason,
        corrupt_after,
    )


def _valid_frame_after(buf: bytes | mmap.mmap, start: int, limit: int) -> bool:
    """True if some valid frame starts at or after ``start`` (damage, not a torn tail)."""
    magic = struct.pack("<I", MAGIC)
    at = buf.find(magic, start, limit)
    while at >= 0:
        if _frame_ok(buf, at, limit):
            return True
        at = buf.find(magic, at + 1, limit)
    return False


def load_data(path: str) -> tuple[bytes | mmap.mmap, int]:
    """The whole uncompressed data of a segment file (mmap for plain files)."""
    if path.endswith(ZSEG):
        footer = read_footer(path)
        src = ZstdSource(path)
        try:
            data = src.read(0, footer.data_end)
        finally:
            src.close()
        return data, footer.data_end
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b"", 0
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ), size


def compress_segment(
    src_path: str, dst_path: str, footer: Footer, *, block_bytes: int, level: int
) -> int:
    """Write ``dst_path`` (a ``.zseg``) from a sealed plain segment; return its size.

    The caller renames it into place; every block is checked back by CRC when read.
    """
    cctx = zstandard.ZstdCompressor(level=level)
    table: list[bytes] = []
    fd_in = os.open(src_path, os.O_RDONLY)
    fd = os.open(dst_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pos = len(ZHEAD)
        out = [ZHEAD]
        uoff = 0
        while uoff < footer.data_end:
            raw = os.pread(fd_in, min(block_bytes, footer.data_end - uoff), uoff)
            if not raw:
                raise CorruptRecordError(
                    "segment shorter than its footer says", path=src_path, offset=uoff
                )
            comp = cctx.compress(raw)
            table.append(ZTABLE.pack(uoff, pos))
            out.append(ZBLOCK.pack(len(comp), len(raw), crc32c(comp)))
            out.append(comp)
            pos += ZBLOCK.size + len(comp)
            uoff += len(raw)
            if len(out) > 64:
                _write_all(fd, b"".join(out))
                out = []
        fbody = footer.encode()
        tail = b"".join(table) + fbody
        out.append(tail)
        out.append(ZTRAILER.pack(pos, len(table), len(fbody), crc32c(tail), ZTRAILER_MAGIC))
        _write_all(fd, b"".join(out))
        os.fsync(fd)
        size: int = os.fstat(fd).st_size
        return size
    finally:
        os.close(fd)
        os.close(fd_in)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]

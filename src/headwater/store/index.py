"""Sparse per-segment index, and GTID summaries that let lookups skip data.

One index entry is kept per block of about ``index_interval_bytes`` of records; it describes
the block's first record and the block as a whole. Entries are fixed width (ENTRY, 94 bytes,
little-endian)::

     0   8  seq            sequence number of the block's first record
     8   8  seg_offset     byte offset of that record in the (uncompressed) segment data
    16   8  change_id      \\
    24   4  file_num        | Position of that record
    28   8  offset          |
    36   4  event_index    /
    40   8  ts_us          commit timestamp of that record
    48   8  max_ts_before  max ts_us of all records of the segment before that record (0: none)
    56   1  gtid_kind      0: the block cannot be skipped (a record without GTID, or mixed
                           server uuids / domains); 1: MySQL; 2: MariaDB; 3: MySQL tagged
    57   1  reserved
    58  16  gtid_id        MySQL server uuid bytes, or MariaDB domain id (u32) zero-padded,
                           or for a tagged MySQL GTID (``uuid:tag:n``, MySQL 8.3+) the
                           :func:`tagged_ident` digest of its uuid and tag
    74   8  gtid_min       smallest gno / seq_no in the block (for gtid_id)
    82   8  gtid_max       largest gno / seq_no in the block
    90   4  crc32c         of bytes 0..89 of the entry

A sealed segment's ``.idx`` file is its entries followed by a trailer (TRAILER, 32 bytes):
entry count (u64), the segment's last seq (u64), its data length (u64), CRC32C of all
entry bytes followed by those three fields (u32), magic ``b"HWIX"``. The active
segment's ``.idx`` has no trailer: the writer appends entries of closed blocks as it goes;
recovery rebuilds it from the data.

Lookups (costs for a segment of N entries):

* by seq or position: ``bisect`` over the entries (both are monotone), then a scan of at
  most one block;
* by time: commit timestamps can go backwards a little, so entries carry ``max_ts_before``,
  which is monotone; the first record with ``ts >= T`` lies in the block before the first
  entry whose ``max_ts_before >= T``: ``bisect`` plus a one-block scan;
* by GTID set ("first record whose GTID is not in the set"): GTIDs are not monotone across
  server uuids or domains, so a block is *skippable* when its summary (one id and a gno
  range) is wholly inside the wanted set. A binary tree of merged summaries over the blocks
  (:class:`GtidTree`) finds the first non-skippable block in O(log N) node checks when the
  set is a prefix per uuid/domain (the normal case); holes in the wanted set only make the
  summary checks conservative, never wrong: a non-skippable block is scanned record by
  record and scanning goes on to the next non-skippable block. Worst case (a GTID-less log,
  or a wanted set with holes everywhere) is a linear scan.

A tagged GTID's uuid and tag (up to 48 bytes) do not fit the 16-byte id, so its id is a
16-byte BLAKE2b digest of them (:func:`tagged_ident`); the wanted set computes the same
digest for each of its tags. Two (uuid, tag) pairs share an id only on a 128-bit collision.
An index written before kind 3 existed has kind 0 for tagged blocks (never skipped), and a
reader that does not know kind 3 treats it as not covered: both only cost speed.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter

from crc32c import crc32c

from headwater.errors import CorruptRecordError
from headwater.position import MariadbGtidPos, MysqlGtidSet, normalize_gtid_tag

__all__ = [
    "ENTRY",
    "TRAILER",
    "GtidKey",
    "GtidSummary",
    "GtidTree",
    "GtidWanted",
    "IndexBuilder",
    "IndexView",
    "block_summary",
    "gtid_key",
    "tagged_ident",
]

ENTRY = struct.Struct("<QQQIQIQQBB16sQQI")
_ENTRY_BODY = ENTRY.size - 4
TRAILER = struct.Struct("<QQQI4s")
TRAILER_MAGIC = b"HWIX"

KIND_NONE = 0
KIND_MYSQL = 1
KIND_MARIADB = 2
KIND_MYSQL_TAGGED = 3

GtidKey = tuple[int, bytes]  # (kind, 16-byte id)
PosTuple = tuple[int, int, int, int]
# A summary: per (kind, id) the (min, max) number seen, or None when some record had no
# parseable GTID (such data can never be skipped).
GtidSummary = dict[GtidKey, tuple[int, int]] | None


def tagged_ident(sid: bytes, tag: str) -> bytes:
    """The 16-byte index id of a tagged MySQL GTID's (uuid bytes, lowercased tag)."""
    return hashlib.blake2b(
        sid + tag.encode("ascii"), digest_size=16, person=b"hw-gtid-tag"
    ).digest()


def _mysql_ident(head: str) -> tuple[int, bytes]:
    """``(kind, id16)`` of the text before a MySQL GTID's number: ``uuid`` or ``uuid:tag``
    (the tag is matched case-insensitively, as MySQL does). ValueError if neither."""
    sid, sep, tag = head.partition(":")
    if not sep:
        return KIND_MYSQL, uuid.UUID(head).bytes
    if not tag:
        raise ValueError(f"empty GTID tag in {head!r}")
    return KIND_MYSQL_TAGGED, tagged_ident(uuid.UUID(sid).bytes, normalize_gtid_tag(tag, "a GTID"))


_KEY_CACHE: dict[str, tuple[int, bytes]] = {}


def gtid_key(gtid: str) -> tuple[int, bytes, int] | None:
    """``(kind, id16, number)`` of a GTID string, or None if empty or unparseable."""
    if not gtid:
        return None
    head, sep, num = gtid.rpartition(":")
    try:
        if sep:
            key = _KEY_CACHE.get(head)
            if key is None:
                key = _mysql_ident(head)
                if len(_KEY_CACHE) < 1024:
                    _KEY_CACHE[head] = key
            n = int(num)
            return None if n < 0 else (key[0], key[1], n)
        parts = gtid.split("-")
        if len(parts) != 3:
            return None
        domain, seq = int(parts[0]), int(parts[2])
        if domain < 0 or seq < 0 or domain > 0xFFFFFFFF:
            return None
        return KIND_MARIADB, struct.pack("<I", domain) + bytes(12), seq
    except ValueError:
        return None


class GtidWanted:
    """A wanted GTID set prepared for fast "is this wholly contained" checks."""

    def __init__(self, wanted: MysqlGtidSet | MariadbGtidPos) -> None:
        self._mysql: dict[bytes, tuple[list[int], list[int]]] = {}
        self._tagged: dict[bytes, tuple[list[int], list[int]]] = {}
        self._maria: dict[bytes, int] = {}
        if isinstance(wanted, MysqlGtidSet):
            for sid, tag, lo, hi in wanted.tagged_intervals():
                if tag:
                    by_id = self._tagged
                    ident = tagged_ident(sid.bytes, tag)
                else:
                    by_id, ident = self._mysql, sid.bytes
                los, his = by_id.setdefault(ident, ([], []))
                los.append(lo)
                his.append(hi)
        else:
            for g in wanted.gtids():
                self._maria[struct.pack("<I", g.domain_id) + bytes(12)] = g.seq_no

    def covers(self, kind: int, ident: bytes, lo: int, hi: int) -> bool:
        """True if every number in ``[lo, hi]`` of this uuid/domain is in the set."""
        if kind in (KIND_MYSQL, KIND_MYSQL_TAGGED):
            iv = (self._mysql if kind == KIND_MYSQL else self._tagged).get(ident)
            if iv is None:
                return False
            i = bisect.bisect_right(iv[0], lo) - 1
            return i >= 0 and hi < iv[1][i]
        if kind == KIND_MARIADB:
            last = self._maria.get(ident)
            return last is not None and hi <= last
        return False

    def covers_summary(self, summary: GtidSummary) -> bool:
        if summary is None:
            return False
        return all(self.covers(k, i, lo, hi) for (k, i), (lo, hi) in summary.items())

    def contains(self, gtid: str) -> bool:
        key = gtid_key(gtid)
        return key is not None and self.covers(key[0], key[1], key[2], key[2])


def merge_summaries(a: GtidSummary, b: GtidSummary) -> GtidSummary:
    if a is None or b is None:
        return None
    out = dict(a)
    for k, (lo, hi) in b.items():
        cur = out.get(k)
        out[k] = (lo, hi) if cur is None else (min(cur[0], lo), max(cur[1], hi))
    return out


class GtidTree:
    """Binary tree of merged block summaries: first non-skippable block in O(log N)."""

    def __init__(self, leaves: list[GtidSummary]) -> None:
        self.n = len(leaves)
        self.levels: list[list[GtidSummary]] = [leaves]
        while len(self.levels[-1]) > 1:
            prev = self.levels[-1]
            nxt = [
                merge_summaries(prev[i], prev[i + 1]) if i + 1 < len(prev) else prev[i]
                for i in range(0, len(prev), 2)
            ]
            self.levels.append(nxt)

    def first_unskippable(self, start: int, wanted: GtidWanted) -> int:
        """Smallest block index >= start whose summary is not covered (``n`` if none)."""
        if self.n == 0 or start >= self.n:
            return self.n
        found = self._search(len(self.levels) - 1, 0, start, wanted)
        return self.n if found is None else found

    def _search(self, level: int, i: int, start: int, wanted: GtidWanted) -> int | None:
        lo = i << level
        if min(lo + (1 << level), self.n) <= start:
            return None
        if lo >= start and wanted.covers_summary(self.levels[level][i]):
            return None
        if level == 0:
            return i
        below = self.levels[level - 1]
        r = self._search(level - 1, 2 * i, start, wanted)
        if r is None and 2 * i + 1 < len(below):
            r = self._search(level - 1, 2 * i + 1, start, wanted)
        return r


@dataclass(slots=True)
class IndexView:
    """The entries of one segment's index as parallel lists (bisect-friendly)."""

    seqs: list[int]
    offs: list[int]
    poss: list[PosTuple]
    tss: list[int]
    mtb: list[int]
    leaves: list[GtidSummary]
    tree: GtidTree | None = None
    # Sealed views get their GtidTree on the first GTID lookup (not on the write path).
    sealed: bool = False

    @classmethod
    def empty(cls) -> IndexView:
        return cls([], [], [], [], [], [])

    def __len__(self) -> int:
        return len(self.seqs)

    def visible(self, max_seq: int) -> int:
        """Number of leading entries whose record has ``seq <= max_seq``."""
        return bisect.bisect_right(self.seqs, max_seq)

    def first_unskippable(self, start: int, hi: int, wanted: GtidWanted) -> int:
        if self.tree is None and self.sealed:
            self.build_tree()
        if self.tree is not None and self.tree.n == len(self.leaves):
            return min(self.tree.first_unskippable(start, wanted), hi)
        for i in range(start, hi):
            if not wanted.covers_summary(self.leaves[i]):
                return i
        return hi

    def build_tree(self) -> None:
        self.tree = GtidTree(self.leaves)

    @classmethod
    def parse(
        cls, data: bytes, *, path: str, limit_offset: int | None = None, strict: bool = True
    ) -> IndexView:
        """Parse entry bytes (no trailer); check every entry's CRC.

        ``strict``: a bad entry raises :class:`CorruptRecordError` naming path and offset.
        Otherwise (the active segment's index, appended by a live writer) parsing stops at
        the first bad entry. Entries at or past ``limit_offset`` in the data are dropped.
        """
        view = cls.empty()
        n = len(data) // ENTRY.size
        if strict and len(data) % ENTRY.size:
            raise CorruptRecordError(
                "index length is not a whole number of entries", path=path, offset=n * ENTRY.size
            )
        mv = memoryview(data)
        for i in range(n):
            at = i * ENTRY.size
            e = ENTRY.unpack_from(data, at)
            if crc32c(mv[at : at + _ENTRY_BODY]) != e[13]:
                if strict:
                    raise CorruptRecordError("index entry CRC mismatch", path=path, offset=at)
                break
            if view.seqs and (e[0] <= view.seqs[-1] or e[1] <= view.offs[-1]):
                if strict:
                    raise CorruptRecordError("index entries out of order", path=path, offset=at)
                break
            if limit_offset is not None and e[1] >= limit_offset:
                break
            view.seqs.append(e[0])
            view.offs.append(e[1])
            view.poss.append((e[2], e[3], e[4], e[5]))
            view.tss.append(e[6])
            view.mtb.append(e[7])
            view.leaves.append({(e[8], e[10]): (e[11], e[12])} if e[8] else None)
        return view


def encode_entry(seq: int, off: int, pos: PosTuple, ts: int, mtb: int, leaf: GtidSummary) -> bytes:
    if leaf is not None and len(leaf) == 1:
        (((kind, ident), (lo, hi)),) = leaf.items()
    else:
        kind, ident, lo, hi = KIND_NONE, bytes(16), 0, 0
    body = ENTRY.pack(seq, off, pos[0], pos[1], pos[2], pos[3], ts, mtb, kind, 0, ident, lo, hi, 0)[
        :_ENTRY_BODY
    ]
    return body + struct.pack("<I", crc32c(body))


def encode_trailer(entry_bytes: bytes, count: int, last_seq: int, data_end: int) -> bytes:
    fields = struct.pack("<QQQ", count, last_seq, data_end)
    return TRAILER.pack(
        count, last_seq, data_end, crc32c(fields, crc32c(entry_bytes)), TRAILER_MAGIC
    )


def split_sealed(data: bytes, *, path: str) -> tuple[bytes, int, int, int]:
    """Split a sealed index file into entry bytes, count, last seq and data end.

    Raises :class:`CorruptRecordError` (with the offset) when the trailer is missing,
    malformed or does not match the entries.
    """
    if len(data) < TRAILER.size or data[-4:] != TRAILER_MAGIC:
        raise CorruptRecordError(
            "index trailer missing", path=path, offset=max(0, len(data) - TRAILER.size)
        )
    at = len(data) - TRAILER.size
    count, last_seq, data_end, crc, _magic = TRAILER.unpack_from(data, at)
    entries = data[:at]
    if count * ENTRY.size != len(entries):
        raise CorruptRecordError(
            "index trailer count does not match its length", path=path, offset=at
        )
    if crc32c(data[at : at + 24], crc32c(entries)) != crc:
        # Find the first bad entry so the report names where the damage is.
        IndexView.parse(entries, path=path)
        raise CorruptRecordError("index trailer CRC mismatch", path=path, offset=at)
    return entries, count, last_seq, data_end


class IndexBuilder:
    """Builds a segment's index and footer statistics as records are appended.

    Holds the segment's view (the current, still open block has an entry whose GTID leaf
    is ``None`` until the block closes), the encoded entries of closed blocks not yet
    written out, and running per-segment statistics for the footer.

    Per record only the byte count, the running max timestamp and the GTID string are
    kept (the writer inlines exactly that: :meth:`open_block`, ``block_bytes``, ``max_ts``,
    ``count`` and ``gtids``); a block's GTID summary is computed when it closes, with
    C-level ``map`` passes over its GTIDs in the usual case of one uuid / domain-server
    prefix (:func:`block_summary`).
    """

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.view = IndexView.empty()
        self.unwritten: list[bytes] = []
        self.all_entries: list[bytes] = []
        self.block_bytes = 0
        self.gtids: list[str] = []
        self.max_ts = 0
        self.summary: dict[GtidKey, tuple[int, int]] = {}
        self.has_other = False
        self.count = 0
        self.hint: tuple[str, GtidKey] | None = None

    def add(self, seq: int, off: int, pos: PosTuple, ts: int, gtid: str, size: int) -> None:
        if self.block_bytes >= self.interval or not self.view.seqs:
            self.open_block(seq, off, pos, ts)
        self.block_bytes += size
        self.count += 1
        if ts > self.max_ts:
            self.max_ts = ts
        self.gtids.append(gtid)

    def open_block(
        self, seq: int, off: int, pos: PosTuple, ts: int, leaf: tuple[int, int, int] | None = None
    ) -> None:
        """Close the current block (if any) and start one at this record. ``leaf``: the
        closing block's GTIDs are all MariaDB ones of that (domain, lowest, highest)
        sequence number, already summarized (store/bulk.py); ``gtids`` is then empty."""
        view = self.view
        if view.seqs:
            if leaf is None:
                self._close_block()
            else:
                self._close_block_leaf(leaf)
        view.seqs.append(seq)
        view.offs.append(off)
        view.poss.append(pos)
        view.tss.append(ts)
        view.mtb.append(self.max_ts)
        view.leaves.append(None)
        self.block_bytes = 0

    def _close_block(self) -> None:
        view = self.view
        i = len(view.seqs) - 1
        leaf, other, self.hint = block_summary(self.gtids, self.summary, self.hint)
        self.gtids.clear()
        if other:
            self.has_other = True
        view.leaves[i] = leaf
        raw = encode_entry(view.seqs[i], view.offs[i], view.poss[i], view.tss[i], view.mtb[i], leaf)
        self.unwritten.append(raw)
        self.all_entries.append(raw)

    def _close_block_leaf(self, leaf: tuple[int, int, int]) -> None:
        """``_close_block`` with the summary :func:`block_summary` would compute."""
        view = self.view
        i = len(view.seqs) - 1
        domain, lo, hi = leaf
        k = (KIND_MARIADB, struct.pack("<I", domain) + bytes(12))
        cur = self.summary.get(k)
        self.summary[k] = (lo, hi) if cur is None else (min(cur[0], lo), max(cur[1], hi))
        view.leaves[i] = summary = {k: (lo, hi)}
        raw = encode_entry(
            view.seqs[i], view.offs[i], view.poss[i], view.tss[i], view.mtb[i], summary
        )
        self.unwritten.append(raw)
        self.all_entries.append(raw)

    def seal(self) -> bytes:
        """Close the last block; return all entry bytes of the segment."""
        if self.view.seqs:
            self._close_block()
        self.view.sealed = True
        return b"".join(self.all_entries)

    def take_unwritten(self) -> bytes:
        out = b"".join(self.unwritten)
        self.unwritten.clear()
        return out

    def footer_summary(self) -> GtidSummary:
        """The segment's GTID summary; call after :meth:`seal` (it covers closed blocks)."""
        return None if self.has_other else dict(self.summary)


def _prefix(gtid: str) -> str:
    return gtid[: max(gtid.rfind(":"), gtid.rfind("-")) + 1]


def block_summary(
    gtids: list[str],
    summary: dict[GtidKey, tuple[int, int]],
    hint: tuple[str, GtidKey] | None = None,
) -> tuple[GtidSummary, bool, tuple[str, GtidKey] | None]:
    """One block's leaf, merged into ``summary``; whether a GTID was missing; a new hint.

    Fast path: every GTID is ``prefix + number`` for one uuid (or MariaDB domain-server)
    prefix, the previous block's (``hint``) or the first GTID's; then the numbers parse
    exactly as :func:`gtid_key` parses them and only their min and max matter. Anything
    else takes the per-GTID path.
    """
    if not gtids:
        return None, False, hint
    first = gtids[0]
    if hint is None or not first.startswith(hint[0]):
        key = gtid_key(first)
        hint = None if key is None else (_prefix(first), (key[0], key[1]))
    if hint is not None:
        pfx, k = hint
        if all(map(str.startswith, gtids, repeat(pfx))):
            try:
                nums = list(map(int, map(itemgetter(slice(len(pfx), None)), gtids)))
            except ValueError:
                nums = [-1]
            lo, hi = min(nums), max(nums)
            if lo >= 0:
                cur = summary.get(k)
                summary[k] = (lo, hi) if cur is None else (min(cur[0], lo), max(cur[1], hi))
                return {k: (lo, hi)}, False, hint
    leaf, other = _block_summary_slow(gtids, summary)
    return leaf, other, hint


def _block_summary_slow(
    gtids: list[str], summary: dict[GtidKey, tuple[int, int]]
) -> tuple[GtidSummary, bool]:
    block: dict[GtidKey, tuple[int, int]] = {}
    other = False
    for gtid in gtids:
        key = gtid_key(gtid)
        if key is None:
            other = True
            continue
        kind, ident, num = key
        k = (kind, ident)
        for d in (summary, block):
            cur = d.get(k)
            d[k] = (num, num) if cur is None else (min(cur[0], num), max(cur[1], num))
    return (block if len(block) == 1 and not other else None), other


def summary_from_items(
    items: Iterable[tuple[int, bytes, int, int]], has_other: bool
) -> GtidSummary:
    if has_other:
        return None
    return {(k, i): (lo, hi) for k, i, lo, hi in items}

"""Positions and GTID sets: the value types every layer of headwater shares.

No I/O here. The invariants:

* :class:`Position` is totally ordered and orders every change of one source, across
  failovers: ``change_id`` grows when the source's server_uuid changes (DESIGN.md, decision 3),
  then the binlog file number, the offset of the event that starts the transaction, and the
  index of the event within the transaction.
* :class:`MysqlGtidSet` is MySQL's ``uuid:1-5:7-9,uuid2:1-3:tag:1-2`` (a tag, MySQL 8.3+, names
  its own series of numbers under the uuid; intervals closed in text,
  half-open inside); :class:`MariadbGtidPos` is MariaDB's ``domain-server-seq`` list, one
  entry per replication domain (the last GTID applied in it).
* Every type round-trips through its text form, and :class:`Position` through a small JSON
  dict (Spark offsets, checkpoints).
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from headwater._varlen import VarlenError, encode_uint, read_uint

__all__ = [
    "BinlogCoordinate",
    "GtidSet",
    "MariadbGtid",
    "MariadbGtidPos",
    "MysqlGtid",
    "MysqlGtidSet",
    "Position",
    "binlog_file_number",
    "parse_gtid_set",
]

_FILE_NUMBER = re.compile(r"\.(\d+)$")


def binlog_file_number(name: str) -> int:
    """The sequence number of a binlog file name: ``mysql-bin.000042`` -> 42."""
    m = _FILE_NUMBER.search(name)
    if m is None:
        raise ValueError(f"binlog file name without a numeric suffix: {name!r}")
    return int(m.group(1))


@dataclass(frozen=True, order=True, slots=True)
class BinlogCoordinate:
    """A place in a server's binary log: file name and byte offset."""

    file: str
    offset: int

    def __str__(self) -> str:
        return f"{self.file}:{self.offset}"

    @classmethod
    def parse(cls, text: str) -> BinlogCoordinate:
        """Parse ``FILE:OFFSET`` (``FILE`` alone means offset 4, the first event)."""
        file, sep, off = text.rpartition(":")
        if not sep:
            return cls(text, 4)
        if not file or not off.isdigit():
            raise ValueError(f"expected FILE:OFFSET, got {text!r}")
        return cls(file, int(off))


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """The ordered position of a change in a source's log.

    ``offset`` is the binlog offset of the first event of the transaction (where a replica
    would resume to replay it whole); ``event_index`` counts events inside it.
    """

    change_id: int
    file_num: int
    offset: int
    event_index: int = 0

    def __post_init__(self) -> None:
        for name in ("change_id", "file_num", "offset", "event_index"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Position.{name} must be a non-negative int, got {value!r}")

    def __str__(self) -> str:
        return f"{self.change_id}:{self.file_num}:{self.offset}:{self.event_index}"

    @classmethod
    def parse(cls, text: str) -> Position:
        parts = text.split(":")
        if len(parts) not in (3, 4) or not all(p.isdigit() for p in parts):
            raise ValueError(f"expected CHANGE_ID:FILE_NUM:OFFSET[:EVENT_INDEX], got {text!r}")
        return cls(*(int(p) for p in parts))

    def to_json(self) -> dict[str, int]:
        return {
            "change_id": self.change_id,
            "file": self.file_num,
            "offset": self.offset,
            "event": self.event_index,
        }

    @classmethod
    def from_json(cls, data: Any) -> Position:
        if not isinstance(data, dict):
            raise ValueError(f"position must be an object, got {type(data).__name__}")
        try:
            return cls(
                int(data["change_id"]),
                int(data["file"]),
                int(data["offset"]),
                int(data.get("event", 0)),
            )
        except KeyError as e:
            raise ValueError(f"position lacks field {e.args[0]!r}") from None


# --- MySQL GTIDs ---------------------------------------------------------------------------

_UUID_TEXT = r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
# A GTID tag (MySQL 8.3+, ``Tag::is_character_valid`` in libs/mysql/gtid/tag.cpp): a letter or
# underscore, then letters, digits or underscores, at most 32 (``tag_max_length``); MySQL
# keeps it lowercased.
_TAG_TEXT = r"[A-Za-z_][A-Za-z0-9_]{0,31}"
_TAG = re.compile(_TAG_TEXT)
_MYSQL_GTID = re.compile(rf"^({_UUID_TEXT}):(?:({_TAG_TEXT}):)?(\d+)$")
_TAGGED_FORMAT = 1  # mysql::gtid::Gtid_format::tagged (libs/mysql/gtid/gtid_format.h)
_FORMAT_MASK = 0xFF << 56


def normalize_gtid_tag(tag: str, where: str) -> str:
    """``tag`` lowercased, or ValueError naming ``where`` if it is not a valid GTID tag."""
    if tag and not _TAG.fullmatch(tag):
        raise ValueError(
            f"bad GTID tag {tag!r} in {where}: 1-32 letters, digits or '_',"
            " not starting with a digit"
        )
    return tag.lower()


@dataclass(frozen=True, order=True, slots=True)
class MysqlGtid:
    """One MySQL GTID: ``server_uuid:transaction_number``, or with a tag (MySQL 8.3+)
    ``server_uuid:tag:transaction_number``; ``tag`` is ``""`` for an untagged GTID."""

    sid: uuid.UUID
    gno: int
    tag: str = ""

    def __str__(self) -> str:
        if self.tag:
            return f"{self.sid}:{self.tag}:{self.gno}"
        return f"{self.sid}:{self.gno}"

    @classmethod
    def parse(cls, text: str) -> MysqlGtid:
        m = _MYSQL_GTID.match(text.strip())
        if m is None:
            raise ValueError(f"not a MySQL GTID (uuid:number or uuid:tag:number): {text!r}")
        return cls(uuid.UUID(m.group(1)), int(m.group(3)), (m.group(2) or "").lower())


#: The key of one source of transactions in a set: server uuid and tag ("" = untagged).
#: MySQL calls it a TSID (``mysql::gtid::Tsid``) and orders by uuid, then tag.
Tsid = tuple[uuid.UUID, str]


def _tsid_order(tsid: Tsid) -> tuple[bytes, str]:
    return tsid[0].bytes, tsid[1]


class MysqlGtidSet:
    """A MySQL GTID set: for each (server uuid, tag), sorted disjoint half-open intervals.

    Text is MySQL's: ``uuid:1-5:7-9,uuid2:1-3``; a tag switches the following intervals to
    that tag within the same uuid, ``uuid:1-5:tag:1-2`` (``Gtid_set::to_string`` prints the
    untagged intervals, then each tag in order).
    """

    __slots__ = ("_sets",)

    def __init__(
        self,
        sets: dict[uuid.UUID, list[tuple[int, int]]]
        | dict[Tsid, list[tuple[int, int]]]
        | None = None,
    ) -> None:
        self._sets: dict[Tsid, list[tuple[int, int]]] = {}
        for key, intervals in (sets or {}).items():
            tsid: Tsid = key if isinstance(key, tuple) else (key, "")
            tsid = (tsid[0], normalize_gtid_tag(tsid[1], "a GTID set"))
            for start, end in intervals:
                self._add_interval(tsid, start, end)

    @classmethod
    def parse(cls, text: str) -> MysqlGtidSet:
        """Parse ``uuid:1-5:7,uuid2:tag:1-3`` (whitespace and newlines allowed, empty is
        empty)."""
        result = cls()
        text = "".join(text.split())
        if not text:
            return result
        for part in text.split(","):
            if not part:
                continue
            fields = part.split(":")
            if len(fields) < 2 or not re.fullmatch(_UUID_TEXT, fields[0]):
                raise ValueError(f"not a MySQL GTID set entry (uuid:interval...): {part!r}")
            sid = uuid.UUID(fields[0])
            tag, pending_tag = "", False
            for rng in fields[1:]:
                if rng[:1].isalpha() or rng[:1] == "_":
                    if pending_tag:
                        raise ValueError(f"GTID tag {tag!r} without intervals in {part!r}")
                    tag, pending_tag = normalize_gtid_tag(rng, repr(part)), True
                    continue
                lo, dash, hi = rng.partition("-")
                if not lo.isdigit() or (dash and not hi.isdigit()):
                    raise ValueError(f"bad GTID interval {rng!r} in {part!r}")
                start, stop = int(lo), int(hi) if dash else int(lo)
                if start < 1 or stop < start or stop >= 1 << 63:
                    raise ValueError(f"bad GTID interval {rng!r} in {part!r}")
                result._add_interval((sid, tag), start, stop + 1)
                pending_tag = False
            if pending_tag:
                raise ValueError(f"GTID tag {tag!r} without intervals in {part!r}")
        return result

    def _add_interval(self, tsid: Tsid, start: int, end: int) -> None:
        intervals = self._sets.setdefault(tsid, [])
        merged: list[tuple[int, int]] = []
        for lo, hi in intervals:
            if hi < start or lo > end:
                merged.append((lo, hi))
            else:
                start, end = min(lo, start), max(hi, end)
        merged.append((start, end))
        merged.sort()
        self._sets[tsid] = merged

    def add(self, gtid: MysqlGtid) -> None:
        """Add one GTID in place (fast path for the common append at the end)."""
        tsid = (gtid.sid, gtid.tag)
        intervals = self._sets.get(tsid)
        if intervals and intervals[-1][1] == gtid.gno:
            intervals[-1] = (intervals[-1][0], gtid.gno + 1)
            return
        if intervals and intervals[-1][0] <= gtid.gno < intervals[-1][1]:
            return
        self._add_interval(tsid, gtid.gno, gtid.gno + 1)

    def union(self, other: MysqlGtidSet) -> MysqlGtidSet:
        result = self.copy()
        for tsid, intervals in other._sets.items():
            for lo, hi in intervals:
                result._add_interval(tsid, lo, hi)
        return result

    def copy(self) -> MysqlGtidSet:
        result = MysqlGtidSet()
        result._sets = {tsid: list(iv) for tsid, iv in self._sets.items()}
        return result

    def __contains__(self, gtid: object) -> bool:
        if not isinstance(gtid, MysqlGtid):
            return False
        return any(lo <= gtid.gno < hi for lo, hi in self._sets.get((gtid.sid, gtid.tag), ()))

    def issuperset(self, other: MysqlGtidSet) -> bool:
        for tsid, intervals in other._sets.items():
            mine = self._sets.get(tsid, [])
            for lo, hi in intervals:
                if not any(a <= lo and hi <= b for a, b in mine):
                    return False
        return True

    @property
    def is_tagged(self) -> bool:
        """Whether any GTID of the set has a tag (its binary form is then the tagged one)."""
        return any(tag for _sid, tag in self._sets)

    def tsids(self) -> list[Tsid]:
        """The (uuid, tag) keys in MySQL's order: uuid bytes, then tag (untagged first)."""
        return sorted(self._sets, key=_tsid_order)

    def intervals(self) -> Iterator[tuple[uuid.UUID, int, int]]:
        """(sid, start, end) of the *untagged* GTIDs, ``end`` exclusive, sorted by sid then
        start; :meth:`tagged_intervals` covers every GTID."""
        for sid, tag, lo, hi in self.tagged_intervals():
            if not tag:
                yield sid, lo, hi

    def tagged_intervals(self) -> Iterator[tuple[uuid.UUID, str, int, int]]:
        """(sid, tag, start, end) with ``end`` exclusive, in :meth:`tsids` order."""
        for tsid in self.tsids():
            for lo, hi in self._sets[tsid]:
                yield tsid[0], tsid[1], lo, hi

    def __bool__(self) -> bool:
        return bool(self._sets)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MysqlGtidSet) and self._sets == other._sets

    def __hash__(self) -> int:
        return hash(str(self))

    def __str__(self) -> str:
        parts: list[str] = []
        last_sid: uuid.UUID | None = None
        for sid, tag in self.tsids():
            ranges = ":".join(
                str(lo) if hi == lo + 1 else f"{lo}-{hi - 1}" for lo, hi in self._sets[(sid, tag)]
            )
            body = f"{tag}:{ranges}" if tag else ranges
            if sid == last_sid:
                parts[-1] += f":{body}"
            else:
                parts.append(f"{sid}:{body}")
            last_sid = sid
        return ",".join(parts)

    def __repr__(self) -> str:
        return f"MysqlGtidSet({str(self)!r})"

    def encode(self) -> bytes:
        """The binary form of COM_BINLOG_DUMP_GTID's data and PREVIOUS_GTIDS events.

        MySQL ``Gtid_set::encode`` (sql/rpl_gtid_set.cc): a u64 header, then per TSID in
        order the uuid (16), [the tag], n_intervals (u64), per interval start and exclusive
        end (u64 each), all little-endian. Without tags the header is the number of TSIDs
        (the format every server reads). A set with a tag is written in the tagged format
        (``analyze_encoding_format``; MySQL 8.3+ only): the header is
        ``1 << 56 | n << 8 | 1`` (``encode_nsids_format``) and every TSID carries its tag as
        a serialization-library string, a variable-length length then the bytes
        (``Tag::encode_tag``, libs/mysql/gtid/tag.cpp; one 0x00 byte when untagged).
        """
        tagged = self.is_tagged
        tsids = self.tsids()
        n = len(tsids)
        head = (_TAGGED_FORMAT << 56) | (n << 8) | _TAGGED_FORMAT if tagged else n
        out = [struct.pack("<Q", head)]
        for sid, tag in tsids:
            intervals = self._sets[(sid, tag)]
            out.append(sid.bytes)
            if tagged:
                out.append(encode_uint(len(tag)) + tag.encode("ascii"))
            out.append(struct.pack("<Q", len(intervals)))
            for lo, hi in intervals:
                out.append(struct.pack("<QQ", lo, hi))
        return b"".join(out)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> tuple[MysqlGtidSet, int]:
        """Inverse of :meth:`encode` (both formats); returns the set and the bytes used.

        Raises ``ValueError`` naming what is wrong: short bytes, an unknown format byte, a
        bad tag, intervals that are not increasing (``Gtid_set::add_gtid_encoding``).
        """
        data = bytes(data)
        if len(data) < 8:
            raise ValueError(f"GTID set of {len(data)} bytes is shorter than its 8-byte header")
        (head,) = struct.unpack_from("<Q", data, 0)
        fmt = (head & _FORMAT_MASK) >> 56
        if fmt == 0:
            n_sids = head
        elif fmt == _TAGGED_FORMAT:
            n_sids = (head & 0x00FFFFFFFFFFFF00) >> 8
        else:
            raise ValueError(f"GTID set header {head:#018x} has unknown format byte {fmt}")
        pos = 8
        result = cls()
        for i in range(n_sids):
            if pos + 16 > len(data):
                raise ValueError(f"GTID set of {n_sids} sids truncated at sid {i}, byte {pos}")
            sid = uuid.UUID(bytes=data[pos : pos + 16])
            pos += 16
            tag = ""
            if fmt == _TAGGED_FORMAT:
                try:
                    length, pos = read_uint(data, pos)
                except VarlenError as e:
                    raise ValueError(f"tag of sid {sid} in the GTID set: {e}") from None
                raw = data[pos : pos + length]
                if length > 32 or len(raw) < length:
                    raise ValueError(f"tag of {length} bytes for sid {sid} at byte {pos}")
                text = raw.decode("ascii", "replace")
                if raw and not _TAG.fullmatch(text):
                    raise ValueError(f"invalid GTID tag {raw!r} for sid {sid}")
                tag = text.lower()
                pos += length
            if pos + 8 > len(data):
                raise ValueError(f"GTID set truncated at the interval count of sid {sid}")
            (n_iv,) = struct.unpack_from("<Q", data, pos)
            pos += 8
            if pos + 16 * n_iv > len(data):
                raise ValueError(f"{n_iv} intervals of sid {sid} run past the GTID set's end")
            last = 0
            for _ in range(n_iv):
                lo, hi = struct.unpack_from("<QQ", data, pos)
                pos += 16
                if not last < lo < hi or hi > 1 << 63:
                    raise ValueError(f"bad GTID interval [{lo}, {hi}) for {sid}")
                last = hi
                result._add_interval((sid, tag), lo, hi)
        return result, pos


# --- MariaDB GTIDs -------------------------------------------------------------------------

_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


@dataclass(frozen=True, order=True, slots=True)
class MariadbGtid:
    """One MariaDB GTID, ``domain_id-server_id-seq_no``."""

    domain_id: int
    server_id: int
    seq_no: int

    def __str__(self) -> str:
        return f"{self.domain_id}-{self.server_id}-{self.seq_no}"

    @classmethod
    def parse(cls, text: str) -> MariadbGtid:
        m = _MARIADB_GTID.match(text.strip())
        if m is None:
            raise ValueError(f"not a MariaDB GTID (domain-server-seq): {text!r}")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)))


class MariadbGtidPos:
    """A MariaDB GTID position: the last GTID seen in each replication domain.

    This is what ``@@gtid_slave_pos`` / ``@slave_connect_state`` hold; MariaDB resumes
    after the given GTID in each domain.
    """

    __slots__ = ("_domains",)

    def __init__(self, gtids: Iterable[MariadbGtid] = ()) -> None:
        self._domains: dict[int, MariadbGtid] = {}
        for g in gtids:
            self.add(g)

    @classmethod
    def parse(cls, text: str) -> MariadbGtidPos:
        result = cls()
        for part in "".join(text.split()).split(","):
            if part:
                result.add(MariadbGtid.parse(part))
        return result

    def add(self, gtid: MariadbGtid) -> None:
        """Record that ``gtid`` was seen: it becomes its domain's last GTID."""
        self._domains[gtid.domain_id] = gtid

    def __contains__(self, gtid: object) -> bool:
        if not isinstance(gtid, MariadbGtid):
            return False
        last = self._domains.get(gtid.domain_id)
        return last is not None and gtid.seq_no <= last.seq_no

    def gtids(self) -> list[MariadbGtid]:
        return [self._domains[d] for d in sorted(self._domains)]

    def copy(self) -> MariadbGtidPos:
        return MariadbGtidPos(self.gtids())

    def __bool__(self) -> bool:
        return bool(self._domains)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MariadbGtidPos) and self._domains == other._domains

    def __hash__(self) -> int:
        return hash(str(self))

    def __str__(self) -> str:
        return ",".join(str(g) for g in self.gtids())

    def __repr__(self) -> str:
        return f"MariadbGtidPos({str(self)!r})"


GtidSet = MysqlGtidSet | MariadbGtidPos


def parse_gtid_set(text: str) -> GtidSet:
    """Parse either flavour, telling them apart by shape (uuid or domain-server-seq)."""
    stripped = "".join(text.split())
    if not stripped:
        raise ValueError("empty GTID set: say which flavour by giving at least one GTID")
    first = stripped.split(",")[0]
    if _MARIADB_GTID.match(first):
        return MariadbGtidPos.parse(stripped)
    return MysqlGtidSet.parse(stripped)

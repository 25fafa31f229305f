"""Positions and GTID sets: the value types every layer of headwater shares.

No I/O here. The invariants:

* :class:`Position` is totally ordered and orders every change of one source, across
  failovers: ``change_id`` grows when the source's server_uuid changes (DESIGN.md, decision 3),
  then the binlog file number, the offset of the event that starts the transaction, and the
  index of the event within the transaction.
* :class:`MysqlGtidSet` is MySQL's ``uuid:1-5:7-9,uuid2:1-3`` (intervals closed in text,
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
_MYSQL_GTID = re.compile(rf"^({_UUID_TEXT}):(\d+)$")


@dataclass(frozen=True, order=True, slots=True)
class MysqlGtid:
    """One MySQL GTID, ``server_uuid:transaction_number``."""

    sid: uuid.UUID
    gno: int

    def __str__(self) -> str:
        return f"{self.sid}:{self.gno}"

    @classmethod
    def parse(cls, text: str) -> MysqlGtid:
        m = _MYSQL_GTID.match(text.strip())
        if m is None:
            raise ValueError(f"not a MySQL GTID (uuid:number): {text!r}")
        return cls(uuid.UUID(m.group(1)), int(m.group(2)))


class MysqlGtidSet:
    """A MySQL GTID set: for each server uuid, sorted disjoint half-open intervals."""

    __slots__ = ("_sets",)

    def __init__(self, sets: dict[uuid.UUID, list[tuple[int, int]]] | None = None) -> None:
        self._sets: dict[uuid.UUID, list[tuple[int, int]]] = {}
        for sid, intervals in (sets or {}).items():
            for start, end in intervals:
                self._add_interval(sid, start, end)

    @classmethod
    def parse(cls, text: str) -> MysqlGtidSet:
        """Parse ``uuid:1-5:7,uuid2:1-3`` (whitespace and newlines allowed, empty is empty)."""
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
            for rng in fields[1:]:
                lo, dash, hi = rng.partition("-")
                if not lo.isdigit() or (dash and not hi.isdigit()):
                    raise ValueError(f"bad GTID interval {rng!r} in {part!r}")
                start, stop = int(lo), int(hi) if dash else int(lo)
                if start < 1 or stop < start:
                    raise ValueError(f"bad GTID interval {rng!r} in {part!r}")
                result._add_interval(sid, start, stop + 1)
        return result

    def _add_interval(self, sid: uuid.UUID, start: int, end: int) -> None:
        intervals = self._sets.setdefault(sid, [])
        merged: list[tuple[int, int]] = []
        for lo, hi in intervals:
            if hi < start or lo > end:
                merged.append((lo, hi))
            else:
                start, end = min(lo, start), max(hi, end)
        merged.append((start, end))
        merged.sort()
        self._sets[sid] = merged

    def add(self, gtid: MysqlGtid) -> None:
        """Add one GTID in place (fast path for the common append at the end)."""
        intervals = self._sets.get(gtid.sid)
        if intervals and intervals[-1][1] == gtid.gno:
            intervals[-1] = (intervals[-1][0], gtid.gno + 1)
            return
        if intervals and intervals[-1][0] <= gtid.gno < intervals[-1][1]:
            return
        self._add_interval(gtid.sid, gtid.gno, gtid.gno + 1)

    def union(self, other: MysqlGtidSet) -> MysqlGtidSet:
        result = self.copy()
        for sid, intervals in other._sets.items():
            for lo, hi in intervals:
                result._add_interval(sid, lo, hi)
        return result

    def copy(self) -> MysqlGtidSet:
        result = MysqlGtidSet()
        result._sets = {sid: list(iv) for sid, iv in self._sets.items()}
        return result

    def __contains__(self, gtid: object) -> bool:
        if not isinstance(gtid, MysqlGtid):
            return False
        return any(lo <= gtid.gno < hi for lo, hi in self._sets.get(gtid.sid, ()))

    def issuperset(self, other: MysqlGtidSet) -> bool:
        for sid, intervals in other._sets.items():
            mine = self._sets.get(sid, [])
            for lo, hi in intervals:
                if not any(a <= lo and hi <= b for a, b in mine):
                    return False
        return True

    def intervals(self) -> Iterator[tuple[uuid.UUID, int, int]]:
        """(sid, start, end) with ``end`` exclusive, sorted by sid then start."""
        for sid in sorted(self._sets, key=str):
            for lo, hi in self._sets[sid]:
                yield sid, lo, hi

    def __bool__(self) -> bool:
        return bool(self._sets)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MysqlGtidSet) and self._sets == other._sets

    def __hash__(self) -> int:
        return hash(str(self))

    def __str__(self) -> str:
        parts = []
        for sid in sorted(self._sets, key=str):
            ranges = ":".join(
                str(lo) if hi == lo + 1 else f"{lo}-{hi - 1}" for lo, hi in self._sets[sid]
            )
            parts.append(f"{sid}:{ranges}")
        return ",".join(parts)

    def __repr__(self) -> str:
        return f"MysqlGtidSet({str(self)!r})"

    def encode(self) -> bytes:
        """The binary form of COM_BINLOG_DUMP_GTID's data and PREVIOUS_GTIDS events.

        n_sids (8), then per sid: uuid (16), n_intervals (8), per interval start and
        exclusive end (8 each), all little-endian (MySQL ``Gtid_set::encode``,
        sql/rpl_gtid_set.cc).
        """
        out = [struct.pack("<Q", len(self._sets))]
        for sid in sorted(self._sets, key=str):
            intervals = self._sets[sid]
            out.append(sid.bytes)
            out.append(struct.pack("<Q", len(intervals)))
            for lo, hi in intervals:
                out.append(struct.pack("<QQ", lo, hi))
        return b"".join(out)

    @classmethod
    def decode(cls, data: bytes | memoryview) -> tuple[MysqlGtidSet, int]:
        """Inverse of :meth:`encode`; returns the set and the number of bytes used.

        Raises ``ValueError`` when the bytes are short or intervals are not increasing.
        """
        data = bytes(data)
        if len(data) < 8:
            raise ValueError("GTID set shorter than its 8-byte count")
        (n_sids,) = struct.unpack_from("<Q", data, 0)
        pos = 8
        result = cls()
        for _ in range(n_sids):
            if pos + 24 > len(data):
                raise ValueError(f"GTID set truncated at byte {pos}")
            sid = uuid.UUID(bytes=data[pos : pos + 16])
            (n_iv,) = struct.unpack_from("<Q", data, pos + 16)
            pos += 24
            if pos + 16 * n_iv > len(data):
                raise ValueError(f"GTID set truncated at byte {pos}")
            for _ in range(n_iv):
                lo, hi = struct.unpack_from("<QQ", data, pos)
                pos += 16
                if not 0 < lo < hi:
                    raise ValueError(f"bad GTID interval [{lo}, {hi}) for {sid}")
                result._add_interval(sid, lo, hi)
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

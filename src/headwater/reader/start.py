"""Where a task starts reading: pure decisions over its resume state, its log and its source.

Two steps, both pure (values in, a value out; no task, no I/O):

:func:`reconcile` puts the resume state (``state.json``, a :class:`ReaderState`) and the
change log's *intact end* (:class:`LogEnd`, read by :func:`read_log_end`) in agreement, in
both directions. **The log is the truth**:

* the log holds whole transactions beyond the state (the state is saved after the store
  acknowledges, so it may lag after a crash): the state advances over them;
* the log ends *before* the state (its tail was cut or damaged, e.g. ``durability: none``
  and a power cut; recovery keeps the records up to the last intact one): the state moves
  back to the last intact record: its position, its seq, and the GTID set as of it (each
  server uuid / MariaDB domain capped at the highest number the intact log, or the change
  id's starting set, holds). The lost transactions are then read from the source again and
  the store gives them the seqs they had: the source sends the same transactions in the same
  order from that position, and the store numbers records consecutively. The
  :class:`LostRange` says what was lost.

:func:`choose_start` then decides where the dump begins:

* first start: the configured ``start`` (earliest, latest, file, GTID set, timestamp); the
  first change id is recorded with the server's identity;
* same server as before: the file and offset of the last processed transaction (the task
  skips it when it arrives again), or the GTID set when that file is gone; if the log lost
  everything of the current change id, from where that change id began;
* another server: the GTID set, under a new change id (to be saved at once).

Invariant (docs/formats.md, "Sequence numbers"): a seq is never given to a different
transaction than one a consumer may have seen. So the decision refuses, with
:class:`~headwater.errors.PositionPurgedError` naming the missing range, to re-read a lost
range from anywhere but the server it came from, or when that server no longer has it.
"""

from __future__ import annotations

import json
import logging
import struct
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from crc32c import crc32c

from headwater.binlog.preflight import SourceInfo, StartPosition
from headwater.config import FilterConfig, StartConfig
from headwater.errors import ConfigError, PositionPurgedError
from headwater.position import (
    BinlogCoordinate,
    GtidSet,
    MariadbGtid,
    MariadbGtidPos,
    MysqlGtid,
    MysqlGtidSet,
    Position,
    binlog_file_number,
    parse_gtid_set,
)
from headwater.store import AtSeq, ChangeIdInfo, LogInfo, ReaderState
from headwater.store.index import KIND_MARIADB, KIND_MYSQL, KIND_MYSQL_TAGGED, tagged_ident

if TYPE_CHECKING:
    from headwater.store import ChangeLog

__all__ = [
    "LogEnd",
    "LostRange",
    "StartDecision",
    "choose_start",
    "gtid_key_of",
    "layout_of",
    "read_log_end",
    "reconcile",
    "start_position",
]

log = logging.getLogger(__name__)

#: Highest number per GTID key (MySQL ``uuid`` or ``uuid:tag``, MariaDB domain as text),
#: with the full GTID text when known (a MariaDB GTID needs its server_id).
GtidCaps = dict[str, tuple[int, str]]


@dataclass(frozen=True, slots=True)
class LogEnd:
    """What the change log holds at start, as far as the resume state is concerned.

    ``last``: the last intact (acknowledged, whole) transaction, None if the log is empty;
    ``beyond``: the whole transactions after the state's seq (when the log is ahead);
    ``caps``: per GTID key the highest number in the intact log (read only when the log is
    behind the state: it costs a scan of the active segment).
    """

    last: LogInfo | None
    beyond: tuple[LogInfo, ...] = ()
    caps: GtidCaps = field(default_factory=dict)

    @property
    def seq(self) -> int:
        return 0 if self.last is None else self.last.seq


@dataclass(frozen=True, slots=True)
class LostRange:
    """Acknowledged transactions the log no longer has: seqs ``first_seq..last_seq``, read
    after ``after`` (the last intact record, None: nothing intact) up to the state's
    ``up_to`` position and GTID set."""

    first_seq: int
    last_seq: int
    after: LogInfo | None
    up_to: Position | None
    up_to_gtids: str
    layout: str = ""  # ReaderState.layout the lost records were written under

    def __str__(self) -> str:
        where = (
            "the start of the log"
            if self.after is None
            else f"position {self.after.position} (GTID {self.after.gtid or '-'})"
        )
        return (
            f"seqs {self.first_seq}-{self.last_seq} (the transactions after {where} up to "
            f"position {self.up_to}, GTIDs {self.up_to_gtids or '-'})"
        )


@dataclass(frozen=True, slots=True)
class StartDecision:
    """Where to start and with what resume state.

    ``first_position``: the log position the dump begins at (for the schema bootstrap);
    ``ts_floor``: skip transactions committed before it (timestamp start); ``save``: the
    state gained a change id and must be saved before reading.
    """

    start: StartPosition
    state: ReaderState
    first_position: Position
    ts_floor: int | None = None
    save: bool = False
    note: str = ""


# --- reconciling with the log ------------------------------------------------------------


def read_log_end(store: ChangeLog, state: ReaderState) -> LogEnd:
    """Read what :func:`reconcile` needs from ``store`` (the task's I/O half)."""
    last = store.latest()
    beyond: list[LogInfo] = []
    caps: GtidCaps = {}
    if store.acked_seq > state.seq:
        with store.reader(AtSeq(max(state.seq + 1, 1))) as r:
            while (rec := r.next(0)) is not None:
                if rec.last_chunk:
                    beyond.append(LogInfo(rec.seq, rec.position, rec.ts_us, rec.gtid))
    elif last is not None and last.seq < state.seq:
        # The sealed segments (durable since their roll) and what retention removed are
        # summarized per GTID key; only the active segment is read record by record. A
        # tagged key is a digest (store/index.py): named from the tags the state knows,
        # which are all that :func:`reconcile` caps.
        names = tagged_names(state.gtid_set, *(c.start_gtid_set for c in state.change_ids))
        for (kind, ident), (_lo, hi) in (store.sealed_gtid_summary() or {}).items():
            key = summary_key(kind, ident, names)
            if key is not None and caps.get(key, (-1, ""))[0] < hi:
                caps[key] = (hi, "")
        with store.reader(AtSeq(store.active_base())) as r:
            while (rec := r.next(0)) is not None and rec.seq <= last.seq:
                k = gtid_key_of(rec.gtid)
                if k is not None and caps.get(k[0], (-1, ""))[0] <= k[1]:
                    caps[k[0]] = (k[1], rec.gtid)
    return LogEnd(last, tuple(beyond), caps)


def reconcile(state: ReaderState, end: LogEnd) -> tuple[ReaderState, LostRange | None]:
    """The resume state that agrees with the log (see the module docstring), and what the
    log lost (None if nothing)."""
    if end.seq >= state.seq:
        if not end.beyond:
            return state, None
        gtids = parse_gtid_set(state.gtid_set) if state.gtid_set else None
        position, ts_us, seq = state.position, state.ts_us, state.seq
        for rec in end.beyond:
            p = rec.position
            if position is None or p > position:
                position = Position(p.change_id, p.file_num, p.offset)
            if rec.ts_us:
                ts_us = rec.ts_us
            if rec.gtid:
                gtids = _with_gtid(gtids, rec.gtid)
            seq = rec.seq
        return replace(state, position=position, gtid_set=_text(gtids), ts_us=ts_us, seq=seq), None
    lost = LostRange(end.seq + 1, state.seq, end.last, state.position, state.gtid_set, state.layout)
    last = end.last
    if last is None:
        # Nothing intact: back to where the first change id began.
        ids = state.change_ids[:1]
        position = None
        ts_us = 0
    else:
        cid = last.position.change_id
        ids = tuple(c for c in state.change_ids if c.change_id <= cid) or state.change_ids[:1]
        p = last.position
        position = Position(p.change_id, p.file_num, p.offset)
        ts_us = last.ts_us
    base = parse_gtid_set(ids[-1].start_gtid_set) if ids and ids[-1].start_gtid_set else None
    now = parse_gtid_set(state.gtid_set) if state.gtid_set else None
    gtids = _capped(now, end.caps, base)
    back = ReaderState(position, _text(gtids), ts_us, end.seq, tuple(ids), state.layout)
    return back, lost


def gtid_key_of(gtid: str) -> tuple[str, int] | None:
    """``(key, number)`` of one GTID text: MySQL ``uuid[:tag]``, MariaDB the domain."""
    if not gtid:
        return None
    try:
        if ":" in gtid:
            g = MysqlGtid.parse(gtid)
            return (f"{g.sid}:{g.tag}" if g.tag else str(g.sid)), g.gno
        m = MariadbGtid.parse(gtid)
    except ValueError:
        return None
    return str(m.domain_id), m.seq_no


def summary_key(kind: int, ident: bytes, tagged: dict[bytes, str] | None = None) -> str | None:
    """The :func:`gtid_key_of` key of a store GTID summary key (store/index.py: kind 1
    MySQL, the uuid's 16 bytes; kind 2 MariaDB, the domain as u32 then zeros; kind 3 a
    tagged MySQL GTID's digest, named by ``tagged`` (:func:`tagged_names`), else None)."""
    if kind == KIND_MYSQL:
        return str(uuid.UUID(bytes=ident))
    if kind == KIND_MARIADB:
        return str(struct.unpack_from("<I", ident)[0])
    if kind == KIND_MYSQL_TAGGED and tagged:
        return tagged.get(ident)
    return None


def tagged_names(*gtid_sets: str) -> dict[bytes, str]:
    """Store digest -> ``uuid:tag`` key of every tag in these GTID set texts (MySQL ones;
    others and unparseable texts add nothing)."""
    out: dict[bytes, str] = {}
    for text in gtid_sets:
        try:
            parsed = parse_gtid_set(text) if text else None
        except ValueError:
            continue
        if isinstance(parsed, MysqlGtidSet):
            for sid, tag in parsed.tsids():
                if tag:
                    out[tagged_ident(sid.bytes, tag)] = f"{sid}:{tag}"
    return out


def _with_gtid(gtids: GtidSet | None, text: str) -> GtidSet | None:
    one = parse_gtid_set(text)
    if isinstance(one, MysqlGtidSet):
        return one if not isinstance(gtids, MysqlGtidSet) else gtids.union(one)
    out = gtids.copy() if isinstance(gtids, MariadbGtidPos) else MariadbGtidPos()
    for g in one.gtids():
        out.add(g)
    return out


def _capped(now: GtidSet | None, caps: GtidCaps, base: GtidSet | None) -> GtidSet | None:
    """``now`` without the GTIDs above each key's cap (the highest number the intact log or
    the change id's starting set ``base`` holds); keys with no cap are dropped. A source
    numbers each uuid's (domain's) transactions upwards in binlog order, so what the cap
    removes is exactly what comes after the intact end and will be read again."""
    if now is None:
        return base
    if isinstance(now, MariadbGtidPos):
        known = {g.domain_id: g for g in base.gtids()} if isinstance(base, MariadbGtidPos) else {}
        out = MariadbGtidPos()
        for g in now.gtids():
            cap, text = caps.get(str(g.domain_id), (-1, ""))
            b = known.get(g.domain_id)
            if b is not None and b.seq_no > cap:
                cap, text = b.seq_no, str(b)
            if cap < 0:
                continue
            if cap >= g.seq_no:
                out.add(g)
            else:
                out.add(MariadbGtid.parse(text) if text else replace(g, seq_no=cap))
        return out
    kept: dict[tuple[uuid.UUID, str], list[tuple[int, int]]] = {}
    for sid, tag, lo, hi in now.tagged_intervals():
        key = f"{sid}:{tag}" if tag else str(sid)
        cap = caps.get(key, (-1, ""))[0]
        if lo <= cap:
            kept.setdefault((sid, tag), []).append((lo, min(hi, cap + 1)))
    out_set = MysqlGtidSet(kept)
    return out_set.union(base) if isinstance(base, MysqlGtidSet) else out_set


def _text(gtids: GtidSet | None) -> str:
    return "" if gtids is None else str(gtids)


# --- the start decision ------------------------------------------------------------------


def choose_start(
    config: StartConfig,
    state: ReaderState,
    source: SourceInfo,
    *,
    lost: LostRange | None = None,
    at_time: BinlogCoordinate | None = None,
    now_us: int = 0,
    host: str = "the source",
    layout: str = "",
) -> StartDecision:
    """Where to start reading ``source`` with ``state`` (already reconciled), see the
    module docstring. ``lost``: what the log lost and has not read again yet; ``at_time``:
    the file holding ``config``'s timestamp (a timestamp first start only); ``layout``:
    :func:`layout_of` the task's settings now."""
    identity = source.identity
    if lost is not None and lost.layout and layout and lost.layout != layout:
        raise ConfigError(
            f"the change log lost {lost}, stored under another table filter or chunk_bytes "
            "than the task has now: reading them again could give their seqs to other "
            "transactions; restore the previous settings until they are read again"
        )
    if state.position is None and not state.change_ids:
        return _first_start(config, source, at_time, now_us)
    gtids = parse_gtid_set(state.gtid_set) if state.gtid_set else None
    current = state.change_ids[-1] if state.change_ids else None
    if current is not None and current.server_uuid == identity:
        if state.position is None:
            return _from_change_id_start(config, state, source, current, lost, host)
        name = _file_named(source, state.position.file_num)
        if name is not None:
            start = BinlogCoordinate(name, max(4, state.position.offset))
            return StartDecision(start, state, state.position)
        if lost is not None:
            raise PositionPurgedError(
                f"the change log lost {lost} and {host} no longer has binlog file number "
                f"{state.position.file_num}: those transactions cannot be read again"
            )
        if gtids is None:
            raise PositionPurgedError(
                f"{host} no longer has binlog file number {state.position.file_num} "
                f"(position {state.position}) and no GTIDs were seen: cannot resume"
            )
        return StartDecision(gtids, state, start_position(gtids, source, current.change_id))
    if lost is not None:
        raise PositionPurgedError(
            f"the change log lost {lost}, read from {current.server_uuid if current else '?'}; "
            f"{host} is another server ({identity}): reading them from it could give their "
            "seqs to other transactions; bring that server back, or start the task afresh"
        )
    if gtids is None:
        raise PositionPurgedError(
            f"{host} is another server ({identity}) than the one read so far "
            f"({current.server_uuid if current else 'unknown'}) and no GTID set is known: "
            "cannot continue without loss; start the task afresh (new data dir)"
        )
    new_id = (current.change_id if current else 0) + 1
    ids = (
        *state.change_ids,
        ChangeIdInfo(new_id, identity, Position(new_id, 0, 0), str(gtids), now_us),
    )
    note = (
        f"source identity changed to {identity}: continuing from GTIDs {gtids} "
        f"as change_id {new_id}"
    )
    return StartDecision(
        gtids,
        replace(state, change_ids=ids),
        Position(new_id, binlog_file_number(source.current.file), 0),
        save=True,
        note=note,
    )


def layout_of(filters: FilterConfig, chunk_bytes: int) -> str:
    """The :attr:`ReaderState.layout` digest of a task's record-shaping settings."""
    text = json.dumps([filters.include, filters.exclude, filters.events, chunk_bytes])
    return f"{crc32c(text.encode()):08x}"


def _first_start(
    config: StartConfig, source: SourceInfo, at_time: BinlogCoordinate | None, now_us: int
) -> StartDecision:
    start: StartPosition
    gtids: GtidSet | None = None
    ts_floor = None
    if config.kind == "earliest":
        start = source.oldest
    elif config.kind == "file":
        start = config.coordinate
    elif config.kind == "gtid":
        assert config.gtid_set is not None
        start = gtids = config.gtid_set
    elif config.kind == "timestamp":
        assert config.ts_us is not None
        if at_time is None:
            raise ValueError("a timestamp start needs the file holding the timestamp (at_time)")
        start, ts_floor = at_time, config.ts_us
    else:
        start = source.current
        if source.gtid_position:
            gtids = parse_gtid_set(source.gtid_position)
    first = start_position(start, source, 0)
    ids = (ChangeIdInfo(0, source.identity, first, _text(gtids), now_us),)
    state = ReaderState(None, _text(gtids), 0, 0, ids)
    return StartDecision(start, state, first, ts_floor, note=f"first start ({config}) at {start}")


def _from_change_id_start(
    config: StartConfig,
    state: ReaderState,
    source: SourceInfo,
    current: ChangeIdInfo,
    lost: LostRange | None,
    host: str,
) -> StartDecision:
    """The log holds nothing of the current change id: read from where it began."""
    begin = current.start
    if begin.offset > 0:
        name = _file_named(source, begin.file_num)
        if name is not None:
            ts_floor = (
                config.ts_us if config.kind == "timestamp" and current.change_id == 0 else None
            )
            return StartDecision(BinlogCoordinate(name, begin.offset), state, begin, ts_floor)
    elif current.start_gtid_set:
        gtids = parse_gtid_set(current.start_gtid_set)
        return StartDecision(gtids, state, start_position(gtids, source, current.change_id))
    raise PositionPurgedError(
        f"the change log holds nothing of change id {current.change_id}"
        + (f" (it lost {lost})" if lost is not None else "")
        + f" and {host} no longer has where it began ({begin}): cannot read it again"
    )


def start_position(start: StartPosition, source: SourceInfo, change_id: int) -> Position:
    """The log position a dump from ``start`` begins at (GTID starts: the current file)."""
    if isinstance(start, BinlogCoordinate):
        return Position(change_id, binlog_file_number(start.file), start.offset)
    return Position(change_id, binlog_file_number(source.current.file), 0)


def _file_named(info: SourceInfo, number: int) -> str | None:
    for name, _size in info.binary_logs:
        try:
            if binlog_file_number(name) == number:
                return name
        except ValueError:
            continue
    return None

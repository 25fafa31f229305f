"""Where a task starts reading: its first start, a resume, or a failover.

* first start: the configured ``start`` (earliest, latest, file, GTID set, timestamp);
  the first change id is recorded with the server's identity;
* same server as before: the file and offset of the last processed transaction (the
  task skips it when it arrives again), or the GTID set when that file is gone;
* another server: the GTID set, under a new change id (recorded and saved at once).

Raises :class:`~headwater.errors.PositionPurgedError` when continuing without loss is
impossible (no GTIDs known, or the file is gone and no GTIDs were seen).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from headwater.binlog.preflight import SourceInfo, StartPosition
from headwater.config import HostConfig
from headwater.errors import PositionPurgedError
from headwater.position import BinlogCoordinate, Position, binlog_file_number, parse_gtid_set
from headwater.reader.source import file_at_time
from headwater.store import ChangeIdInfo

if TYPE_CHECKING:
    from headwater.reader.task import ReaderTask

__all__ = ["choose_start", "start_position"]

log = logging.getLogger(__name__)


def choose_start(task: ReaderTask, host: HostConfig, info: SourceInfo) -> StartPosition:
    identity = info.identity
    task.identity = identity
    if task.position is None and not task.change_ids:
        return _first_start(task, host, info)
    current = task.change_ids[-1] if task.change_ids else None
    if current is not None and current.server_uuid == identity and task.position is not None:
        name = _file_named(info, task.position.file_num)
        if name is not None:
            return BinlogCoordinate(name, max(4, task.position.offset))
        if task.gtid_set is None:
            raise PositionPurgedError(
                f"{host} no longer has binlog file number {task.position.file_num} "
                f"(position {task.position}) and no GTIDs were seen: cannot resume"
            )
        return task.gtid_set
    # Another server: continue from the GTID set under a new change id.
    if task.gtid_set is None:
        raise PositionPurgedError(
            f"{host} is another server ({identity}) than the one read so far "
            f"({current.server_uuid if current else 'unknown'}) and no GTID set is known: "
            "cannot continue without loss; start the task afresh (new data dir)"
        )
    new_id = task.change_id + 1
    task.change_ids.append(
        ChangeIdInfo(new_id, identity, Position(new_id, 0, 0), str(task.gtid_set), _now_us())
    )
    log.warning(
        "%s: source identity changed to %s: continuing from GTIDs %s as change_id %d",
        task.name,
        identity,
        task.gtid_set,
        new_id,
    )
    task._save_state()
    return task.gtid_set


def _first_start(task: ReaderTask, host: HostConfig, info: SourceInfo) -> StartPosition:
    cfg = task.source.start
    start: StartPosition
    if cfg.kind == "earliest":
        start = info.oldest
    elif cfg.kind == "file":
        start = cfg.coordinate
    elif cfg.kind == "gtid":
        start = cfg.gtid_set
        assert start is not None
        task._add_gtid(start)
    elif cfg.kind == "timestamp":
        assert cfg.ts_us is not None
        start = file_at_time(task.source, host, info, cfg.ts_us, task.replica_host)
        task._ts_floor = cfg.ts_us
    else:
        start = info.current
        if info.gtid_position:
            task._add_gtid(parse_gtid_set(info.gtid_position))
    first = start_position(task, start, info)
    task.change_ids = [ChangeIdInfo(0, info.identity, first, str(task.gtid_set or ""), _now_us())]
    log.info("%s: first start (%s) at %s", task.name, cfg, start)
    return start


def start_position(task: ReaderTask, start: StartPosition, info: SourceInfo) -> Position:
    if isinstance(start, BinlogCoordinate):
        return Position(task.change_id, binlog_file_number(start.file), start.offset)
    return Position(task.change_id, binlog_file_number(info.current.file), 0)


def _file_named(info: SourceInfo, number: int) -> str | None:
    for name, _size in info.binary_logs:
        try:
            if binlog_file_number(name) == number:
                return name
        except ValueError:
            continue
    return None


def _now_us() -> int:
    return time.time_ns() // 1000

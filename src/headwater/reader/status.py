"""A task's status: live (:func:`task_status`, served by the HTTP API) and persisted
(``status.json``, ``state.json``, read from any process by :func:`read_task_status`).

Invariant: reading a status never changes a task; a status left ``running`` by a process
that is gone is reported as such, not as running. Writing one never stops a task: when the
disk is full the file is overwritten in place (:func:`write_status_file`), so it says
``backoff`` and why rather than the last state that fitted.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.errors import StoreError
from headwater.store import ChangeLog, ReaderState
from headwater.store._fs import TMP_SUFFIX, atomic_write

if TYPE_CHECKING:
    from headwater.reader.task import ReaderTask

__all__ = [
    "FDE_FILE",
    "STATE_FILE",
    "STATUS_FILE",
    "read_task_status",
    "task_status",
    "write_status_file",
]

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
STATUS_FILE = "status.json"
FDE_FILE = "fde.bin"


def task_status(task: ReaderTask) -> dict[str, Any]:
    """The live status of a task (documented in docs/configuration.md, "Reader status")."""
    retention: dict[str, Any] | None = None
    if task.store is not None and not task.store.closed:
        try:
            first, last = task.store.earliest(), task.store.latest()
        except StoreError:
            first = last = None
        retention = {
            "first_seq": first.seq if first else None,
            "first_ts_us": first.ts_us if first else None,
            "last_seq": last.seq if last else None,
            "last_position": str(last.position) if last else None,
            "last_ts_us": last.ts_us if last else None,
        }
    hb = task.heartbeat
    client = task._client
    return {
        "name": task.name,
        "state": task.state,
        "error": task.error,
        "pid": os.getpid(),
        "updated_us": _now_us(),
        "host": None if task.host is None else str(task.host),
        "server_identity": task.identity,
        "change_id": task.change_id,
        "position": None if task.position is None else str(task.position),
        "saved_position": _saved_position(task.dir),
        "gtid_set": "" if task.gtid_set is None else str(task.gtid_set),
        "commit_ts_us": task.ts_us,
        "lag_s": task.lag_s,
        "cluster": dict(task.cluster) or None,  # role, epoch, leader, lag_records (HA)
        "events_in": task.events_in,
        "bytes_in": task.bytes_in + (0 if client is None else client.bytes_received),
        "transactions_stored": task.transactions_stored,
        "transactions_filtered": task.transactions_filtered,
        "records_stored": task.records_stored,
        "reconnects": task.reconnects,
        "heartbeats_written": 0 if hb is None else hb.written,
        "heartbeat_errors": 0 if hb is None else hb.errors,
        "heartbeat_marks": [] if hb is None else hb.marks(),
        "retention": retention,
    }


def _saved_position(task_dir: Path) -> str | None:
    """The position in ``state.json``: the start of the last transaction processed
    (stored or filtered out) whose records the store has acknowledged. Unlike the live
    ``position`` (which can be ahead of what readers can see while a group commit is in
    flight), every record before it is readable: snapshots wait on it
    (:mod:`headwater.snapshot.watermarks`, "Caught up to high")."""
    try:
        state = ReaderState.load(str(task_dir / STATE_FILE))
    except (StoreError, OSError):
        return None
    return None if state is None or state.position is None else str(state.position)


def write_status_file(task_dir: Path, status: dict[str, Any]) -> None:
    """Write ``status.json``: atomically (temp file, rename) when the disk allows. With
    the disk full (ENOSPC, EDQUOT) the temp file cannot be written, so the existing file
    is overwritten in place, padded with spaces to its old length: rewriting blocks a
    file already has needs no new ones, so the status still says ``backoff`` and why.
    Raises OSError when neither works (the caller logs it; a status never stops a task)."""
    path = task_dir / STATUS_FILE
    data = json.dumps(status).encode()
    try:
        atomic_write(str(path), data)
        return
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
    with contextlib.suppress(OSError):
        os.unlink(str(path) + TMP_SUFFIX)  # the torn temp file holds space
    fd = os.open(path, os.O_WRONLY)
    try:
        old = os.fstat(fd).st_size
        body = data + b" " * max(0, old - len(data))
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(body))
    finally:
        os.close(fd)


def read_task_status(task_dir: Path) -> dict[str, Any]:
    """What another process can know about a task: its persisted state and last status."""
    out: dict[str, Any] = {"dir": str(task_dir)}
    try:
        out.update(json.loads((task_dir / STATUS_FILE).read_text()))
    except (OSError, ValueError):
        out["state"] = "never started"
    pid = out.get("pid")
    if out.get("state") in _LIVE_STATES and isinstance(pid, int) and not _alive(pid):
        out["state"] = f"not running (was {out['state']}; process {pid} is gone)"
    state = ReaderState.load(str(task_dir / STATE_FILE))
    if state is not None:
        out["position"] = None if state.position is None else str(state.position)
        out["saved_position"] = out["position"]
        out["gtid_set"] = state.gtid_set
        out["stored_seq"] = state.seq
        out["change_id"] = state.change_ids[-1].change_id if state.change_ids else 0
        out["change_ids"] = [c.to_json() for c in state.change_ids]
    if (task_dir / "changes" / "head").exists():
        try:
            with ChangeLog.open(str(task_dir / "changes"), read_only=True) as store:
                first, last = store.earliest(), store.latest()
            out["retention"] = {
                "first_seq": first.seq if first else None,
                "last_seq": last.seq if last else None,
                "last_position": str(last.position) if last else None,
            }
        except StoreError as e:
            out["retention"] = {"error": str(e)}
    return out


_LIVE_STATES = ("created", "connecting", "running", "backoff")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _now_us() -> int:
    return time.time_ns() // 1000

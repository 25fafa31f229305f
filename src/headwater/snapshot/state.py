"""The state of one snapshot: its plan, the chunks done, and progress. One JSON file.

Layout (``version`` 1)::

    {"version": 1, "snapshot_id": "...", "source": "shop",
     "task_dir": "/var/lib/hw/shop",  # or, for a server: source, the reader's API:
     "server": "http://reader:8080", "task": "shop",  # (never its token)
     "tables": {"db.t": {"key": [{"name", "data_type", "charset", "collation"}, ...],
                         "method": "even" | "seek",
                         "chunks": [{"id": "db.t#0", "lo": null, "hi": [1000]}, ...]}},
     "done": {"db.t#0": {"wave": 1, "high": "mysql-bin.000003:1234", "last_seq": 42,
                         "rows": 1000, "seconds": 0.8}},
     "wave": 1,               # the last wave number handed out (each attempt takes a new one)
     "emitted_seq": 42,       # every change of a record <= this, for done chunks, is written
     "started_us": ..., "finished_us": null}

Invariants: a chunk is in ``done`` only after every sink committed its rows and the
changes of its keys up to ``emitted_seq``; the file is replaced atomically (temp file,
fsync, rename, fsync of the directory), so after a crash it holds the state before or
after one wave, never a torn one. A chunk not in ``done`` is read again on resume (the
sinks make that idempotent: see :mod:`headwater.snapshot.runner`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from headwater.errors import ConfigError

__all__ = ["Progress", "SnapshotState"]

VERSION = 1


def _atomic_write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


@dataclass
class SnapshotState:
    """The state file's content (module docstring)."""

    snapshot_id: str
    source: str
    #: the reader task directory the snapshot reads (None: it reads ``server``)
    task_dir: str | None
    tables: dict[str, dict[str, Any]]
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    wave: int = 0
    emitted_seq: int = 0
    started_us: int = field(default_factory=lambda: time.time_ns() // 1000)
    finished_us: int | None = None
    #: the reader's HTTP API and task the snapshot reads (a ``server:`` source)
    server: str | None = None
    task: str | None = None

    def chunk_ids(self) -> list[str]:
        return [c["id"] for t in self.tables.values() for c in t["chunks"]]

    def pending(self) -> list[str]:
        return [c for c in self.chunk_ids() if c not in self.done]

    def to_json(self) -> dict[str, Any]:
        reads: dict[str, Any] = (
            {"task_dir": self.task_dir}
            if self.task_dir is not None
            else {"server": self.server, "task": self.task}
        )
        return {
            "version": VERSION,
            "snapshot_id": self.snapshot_id,
            "source": self.source,
            **reads,
            "tables": self.tables,
            "done": self.done,
            "wave": self.wave,
            "emitted_seq": self.emitted_seq,
            "started_us": self.started_us,
            "finished_us": self.finished_us,
        }

    def save(self, path: str) -> None:
        _atomic_write(path, json.dumps(self.to_json(), indent=1, sort_keys=True).encode())

    @classmethod
    def load(cls, path: str) -> SnapshotState | None:
        try:
            with open(path, "rb") as f:
                doc = json.loads(f.read())
        except FileNotFoundError:
            return None
        except ValueError as e:
            raise ConfigError(f"snapshot state does not load: {e}", file=path) from None
        if doc.get("version") != VERSION:
            raise ConfigError(f"unknown snapshot state version {doc.get('version')!r}", file=path)
        return cls(
            doc["snapshot_id"],
            doc["source"],
            doc.get("task_dir"),
            doc["tables"],
            doc.get("done", {}),
            int(doc.get("wave", 0)),
            int(doc.get("emitted_seq", 0)),
            int(doc.get("started_us", 0)),
            doc.get("finished_us"),
            doc.get("server"),
            doc.get("task"),
        )


@dataclass
class Progress:
    """Chunks done of total, rows, rows/s and ETA, per table and overall, for this run.

    Rates count only chunks finished by this process (a resumed run starts its clock at
    resume); ETA is the remaining chunks times this run's mean seconds per chunk."""

    state: SnapshotState
    started: float = field(default_factory=time.monotonic)
    chunks_this_run: int = 0
    rows_this_run: int = 0

    def record(self, metas: list[dict[str, Any]]) -> None:
        self.chunks_this_run += len(metas)
        self.rows_this_run += sum(int(m["rows"]) for m in metas)

    def as_dict(self) -> dict[str, Any]:
        elapsed = max(1e-9, time.monotonic() - self.started)
        per_chunk = elapsed / self.chunks_this_run if self.chunks_this_run else None
        rate = self.rows_this_run / elapsed
        tables: dict[str, Any] = {}
        for name, t in self.state.tables.items():
            ids = [c["id"] for c in t["chunks"]]
            done = [self.state.done[i] for i in ids if i in self.state.done]
            left = len(ids) - len(done)
            tables[name] = {
                "chunks_done": len(done),
                "chunks_total": len(ids),
                "rows": sum(int(d["rows"]) for d in done),
                "eta_s": None if per_chunk is None else round(left * per_chunk, 1),
            }
        total = len(self.state.chunk_ids())
        left = len(self.state.pending())
        return {
            "snapshot_id": self.state.snapshot_id,
            "chunks_done": total - left,
            "chunks_total": total,
            "rows": sum(int(d["rows"]) for d in self.state.done.values()),
            "rows_per_s": round(rate, 1),
            "eta_s": None if per_chunk is None else round(left * per_chunk, 1),
            "tables": tables,
        }

    def line(self) -> str:
        d = self.as_dict()
        eta = "-" if d["eta_s"] is None else f"{d['eta_s']:.0f}s"
        return (
            f"snapshot {d['snapshot_id']}: chunks {d['chunks_done']}/{d['chunks_total']} "
            f"rows={d['rows']} rate={d['rows_per_s']:.0f} rows/s eta={eta}"
        )

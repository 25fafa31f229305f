"""Persisted reader state: what the binlog reader has stored, so it can resume after a restart.

This is Ptubes' MaxBinlogInfo (the last stored position and GTID set) and ChangeIdInfo (the
history of change ids: which server each one stands for and where it began). The file is
JSON with a CRC32C over its canonical body, replaced atomically (temp file, fsync, rename,
fsync of the directory), so after a crash it holds either the old or the new state, whole.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from crc32c import crc32c

from headwater.errors import CorruptRecordError
from headwater.position import Position
from headwater.store._fs import atomic_write

__all__ = ["ChangeIdInfo", "ReaderState"]

VERSION = 1


@dataclass(frozen=True, slots=True)
class ChangeIdInfo:
    """One change id: the source server it stands for and where its history begins."""

    change_id: int
    server_uuid: str
    start: Position
    start_gtid_set: str = ""
    start_ts_us: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "change_id": self.change_id,
            "server_uuid": self.server_uuid,
            "start": self.start.to_json(),
            "start_gtid_set": self.start_gtid_set,
            "start_ts_us": self.start_ts_us,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ChangeIdInfo:
        return cls(
            int(d["change_id"]),
            str(d["server_uuid"]),
            Position.from_json(d["start"]),
            str(d.get("start_gtid_set", "")),
            int(d.get("start_ts_us", 0)),
        )


@dataclass(frozen=True, slots=True)
class ReaderState:
    """The reader's resume point: last stored position, GTID set, seq, and change ids.

    ``layout``: a digest of the settings that decide which records the source's
    transactions become (table filter, event kinds, chunk size), as saved with the state;
    a lost range of the log is read again only under the same layout (docs/formats.md,
    "Sequence numbers"). Empty in states saved before it existed.
    """

    position: Position | None = None
    gtid_set: str = ""
    ts_us: int = 0
    seq: int = 0
    change_ids: tuple[ChangeIdInfo, ...] = field(default_factory=tuple)
    layout: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "position": None if self.position is None else self.position.to_json(),
            "gtid_set": self.gtid_set,
            "ts_us": self.ts_us,
            "seq": self.seq,
            "change_ids": [c.to_json() for c in self.change_ids],
            "layout": self.layout,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ReaderState:
        pos = d.get("position")
        return cls(
            None if pos is None else Position.from_json(pos),
            str(d.get("gtid_set", "")),
            int(d.get("ts_us", 0)),
            int(d.get("seq", 0)),
            tuple(ChangeIdInfo.from_json(c) for c in d.get("change_ids", ())),
            str(d.get("layout", "")),
        )

    def save(self, path: str) -> None:
        """Write atomically; after a crash the file holds the old or the new state."""
        body = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        doc = {"version": VERSION, "crc32c": crc32c(body.encode()), "state": body}
        atomic_write(path, json.dumps(doc).encode())

    @classmethod
    def load(cls, path: str) -> ReaderState | None:
        """The saved state, or None if there is none. Damage raises CorruptRecordError."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            doc = json.loads(raw)
            body = doc["state"]
            if doc.get("version") != VERSION:
                raise ValueError(f"unknown version {doc.get('version')!r}")
            if crc32c(body.encode()) != doc["crc32c"]:
                raise ValueError("CRC mismatch")
            return cls.from_json(json.loads(body))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptRecordError(
                f"reader state does not load: {e}", path=os.fspath(path), offset=0
            ) from None

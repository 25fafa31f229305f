"""The one options object of the change log store, and its durability policies."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Durability", "StoreOptions"]

KIB = 1024
MIB = 1024 * KIB


class Durability(enum.Enum):
    """When an append is acknowledged (and becomes visible to readers).

    ``EVERY_RECORD``: after an fdatasync that covers the record (one per ``append`` call).
    ``GROUP`` (default): the appending thread writes, and a flusher thread fdatasyncs what
    was written every ``group_commit_ms``, as soon as ``group_commit_bytes`` are unsynced,
    or at once when someone waits in ``wait_acked``; appends are acknowledged by that sync
    and never wait for it (unless ``max_pending_bytes`` are written but unsynced: the disk
    is behind). ``NONE``: after the bytes are handed to the kernel (``os.writev``); survives
    a process crash, not a power cut.
    """

    EVERY_RECORD = "fsync"
    GROUP = "group"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """Tuning of one change log. Times are seconds, sizes bytes; ``None`` disables.

    ``segment_bytes`` / ``roll_interval_s``: a new segment is started (at a transaction
    boundary) once the active one has this many bytes or is this old.
    ``index_interval_bytes``: one sparse index entry per this many bytes of records, so a
    lookup scans at most about this much data after its binary search.
    ``retention_age_s`` / ``retention_bytes``: sealed segments whose newest record is older,
    or the oldest ones beyond the total size, are deleted by ``apply_retention``.
    ``compress_after_s``: sealed segments whose newest record is older are zstd-compressed
    by ``compress_sealed``.
    ``maintenance_interval_s``: how often the writer runs ``apply_retention`` and
    ``compress_sealed`` itself, in a background thread (``None``: only when its owner
    calls them).
    """

    segment_bytes: int = 64 * MIB
    roll_interval_s: float | None = 3600.0
    durability: Durability = Durability.GROUP
    group_commit_ms: float = 5.0
    group_commit_bytes: int = 4 * MIB
    max_pending_bytes: int = 32 * MIB
    memory_tail_bytes: int = 32 * MIB
    index_interval_bytes: int = 16 * KIB
    retention_age_s: float | None = 7 * 24 * 3600.0
    retention_bytes: int | None = None
    compress_after_s: float | None = 24 * 3600.0
    maintenance_interval_s: float | None = 60.0
    compress_level: int = 3
    compress_block_bytes: int = 256 * KIB
    max_record_bytes: int = 16 * MIB

    def __post_init__(self) -> None:
        positive = (
            "segment_bytes",
            "group_commit_bytes",
            "max_pending_bytes",
            "index_interval_bytes",
            "compress_block_bytes",
            "max_record_bytes",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"StoreOptions.{name} must be positive")
        if self.group_commit_ms < 0 or self.memory_tail_bytes < 0:
            raise ValueError("StoreOptions.group_commit_ms and memory_tail_bytes must be >= 0")
        if self.maintenance_interval_s is not None and self.maintenance_interval_s <= 0:
            raise ValueError("StoreOptions.maintenance_interval_s must be positive or None")
        if self.max_pending_bytes < self.group_commit_bytes:
            raise ValueError("StoreOptions.max_pending_bytes must be >= group_commit_bytes")
        if not isinstance(self.durability, Durability):
            raise ValueError(
                f"StoreOptions.durability must be a Durability, got {self.durability!r}"
            )

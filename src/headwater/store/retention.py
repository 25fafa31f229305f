"""Which sealed segments retention deletes and which ones get compressed (pure planning).

Invariants: the active segment is never chosen; deletion always takes a prefix of the log
(oldest segments first, stopping at the first one that must stay) so that what remains is
contiguous in sequence numbers; a segment's age is the age of its newest record (its
footer's ``max_ts_us``), so a segment is deleted only when everything in it is old enough.
"""

from __future__ import annotations

from collections.abc import Sequence

from headwater.store.segment import SegmentMeta

__all__ = ["plan_compression", "plan_retention"]


def plan_retention(
    segments: Sequence[SegmentMeta], now_us: int, *, max_age_s: float | None, max_bytes: int | None
) -> list[SegmentMeta]:
    """The oldest sealed segments to delete so that age and total size limits hold."""
    total = sum(m.file_bytes for m in segments)
    cutoff = None if max_age_s is None else now_us - int(max_age_s * 1_000_000)
    doomed: list[SegmentMeta] = []
    for meta in segments:
        if meta.footer is None:
            break
        too_old = cutoff is not None and meta.footer.max_ts < cutoff
        too_big = max_bytes is not None and total > max_bytes
        if not (too_old or too_big):
            break
        doomed.append(meta)
        total -= meta.file_bytes
    return doomed


def plan_compression(
    segments: Sequence[SegmentMeta], now_us: int, *, after_s: float | None
) -> list[SegmentMeta]:
    """Sealed, still uncompressed segments whose newest record is older than ``after_s``."""
    if after_s is None:
        return []
    cutoff = now_us - int(after_s * 1_000_000)
    return [
        m
        for m in segments
        if m.footer is not None and not m.compressed and m.footer.max_ts < cutoff
    ]

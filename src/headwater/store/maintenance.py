"""Retention and compression of a change log, executed (the planning is in retention.py).

Invariants: deletion takes whole sealed segments, oldest first, and records the GTID
ranges it removes in ``purged`` (temp file, fsync, rename) *before* deleting, so a GTID
lookup can always tell "purged" from "never seen"; compression writes the ``.zseg`` whole
(temp file, rename, directory fsync) before the segment list points at it and the ``.seg``
is deleted. Readers holding the old path reopen through the catalog (``_open_source``).
Both run under ``_maint_lock`` and change the segment list (copy-on-write) under ``_lock``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from headwater.errors import CorruptRecordError
from headwater.store._fs import atomic_write, fsync_dir
from headwater.store.catalog import Catalog
from headwater.store.index import GtidSummary, merge_summaries
from headwater.store.options import StoreOptions
from headwater.store.retention import plan_compression, plan_retention
from headwater.store.segment import ZSEG, SegmentMeta, compress_segment, segment_name

__all__ = ["PURGED_NAME", "Maintenance"]

log = logging.getLogger(__name__)

PURGED_NAME = "purged"


def _now_us() -> int:
    return time.time_ns() // 1000


class Maintenance:
    """Mixin of :class:`~headwater.store.log.ChangeLog`: retention, compression, purged."""

    _dir: str
    _opts: StoreOptions
    _lock: threading.Lock
    _maint_lock: threading.Lock
    _catalog: Catalog
    _purged: GtidSummary

    if TYPE_CHECKING:  # provided by ChangeLog or a sibling mixin

        def _check_writable(self) -> None: ...

    def _maintain_every(self, interval: float, stop: threading.Event) -> None:
        """Body of the writer's maintenance thread: retention then compression, every
        ``interval`` seconds until ``stop`` is set. Failures are logged, never raised: a
        full disk or a bad segment must not stop the writer; the next round tries again."""
        while not stop.wait(interval):
            try:
                removed = self.apply_retention()
                compressed = self.compress_sealed()
            except Exception:  # logged with its traceback; the writer goes on
                log.exception("%s: retention or compression failed", self._dir)
                continue
            if removed or compressed:
                log.info(
                    "%s: retention removed %d segments, %d compressed",
                    self._dir,
                    len(removed),
                    len(compressed),
                )

    def apply_retention(self, now_us: int | None = None) -> list[str]:
        """Delete whole sealed segments beyond the retention age or size; return their paths."""
        self._check_writable()
        now = _now_us() if now_us is None else now_us
        with self._maint_lock:
            doomed = plan_retention(
                self._catalog.segments,
                now,
                max_age_s=self._opts.retention_age_s,
                max_bytes=self._opts.retention_bytes,
            )
            if not doomed:
                return []
            purged = self._purged
            for meta in doomed:
                assert meta.footer is not None
                purged = merge_summaries(purged, meta.footer.summary)
            self._save_purged(purged)
            for meta in doomed:
                with self._lock:
                    self._catalog.replace(meta, None)
                    self._catalog.drop_view(meta.base)
                for path in (meta.index_path, meta.path):
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        log.warning("retention: %s was already gone", path)
            fsync_dir(self._dir)
            log.info(
                "retention deleted %d segments up to seq %d",
                len(doomed),
                doomed[-1].footer.last_seq if doomed[-1].footer else 0,
            )
            return [m.path for m in doomed]

    def compress_sealed(self, now_us: int | None = None) -> list[str]:
        """zstd-compress sealed segments older than ``compress_after_s``; return new paths."""
        self._check_writable()
        now = _now_us() if now_us is None else now_us
        done: list[str] = []
        with self._maint_lock:
            for meta in plan_compression(
                self._catalog.segments, now, after_s=self._opts.compress_after_s
            ):
                assert meta.footer is not None
                zpath = os.path.join(self._dir, segment_name(meta.base, ZSEG))
                tmp = zpath + ".tmp"
                size = compress_segment(
                    meta.path,
                    tmp,
                    meta.footer,
                    block_bytes=self._opts.compress_block_bytes,
                    level=self._opts.compress_level,
                )
                os.replace(tmp, zpath)
                fsync_dir(self._dir)
                with self._lock:
                    self._catalog.replace(meta, SegmentMeta(meta.base, zpath, meta.footer, size))
                os.unlink(meta.path)
                fsync_dir(self._dir)
                done.append(zpath)
        return done

    def _save_purged(self, summary: GtidSummary) -> None:
        items = (
            None
            if summary is None
            else [[k, i.hex(), lo, hi] for (k, i), (lo, hi) in sorted(summary.items())]
        )
        atomic_write(os.path.join(self._dir, PURGED_NAME), json.dumps({"items": items}).encode())
        self._purged = summary

    def _load_purged(self) -> None:
        try:
            with open(os.path.join(self._dir, PURGED_NAME), "rb") as f:
                items = json.loads(f.read())["items"]
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError) as e:
            self._catalog.problems.append(
                CorruptRecordError(
                    f"purged-GTID summary unreadable: {e}", path=PURGED_NAME, offset=0
                )
            )
            self._purged = None
            return
        self._purged = (
            None
            if items is None
            else {(int(k), bytes.fromhex(i)): (int(lo), int(hi)) for k, i, lo, hi in items}
        )

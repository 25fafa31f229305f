"""Retention and compression of a change log, executed (the planning is in retention.py).

Invariants: deletion takes whole sealed segments, oldest first, and records the GTID
ranges it removes in ``purged`` (temp file, fsync, rename) *before* deleting, so a GTID
lookup can always tell "purged" from "never seen"; compression writes the ``.zseg`` whole
(temp file, rename, directory fsync) before the segment list points at it and the ``.seg``
is deleted. Readers holding the old path reopen through the catalog (``_open_source``).
Both run under :attr:`Maintenance.lock` and change the segment list (copy-on-write) under
the published lock. :class:`Maintenance` owns that lock, the purged-GTID summary and the
background thread that runs both every ``maintenance_interval_s``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable

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
    """Retention, compression and the purged-GTID summary of one log (see above)."""

    def __init__(
        self,
        directory: str,
        options: StoreOptions,
        catalog: Catalog,
        pub_lock: threading.Lock,
        check_writable: Callable[[], None],
    ) -> None:
        self.dir = directory
        self.opts = options
        self.catalog = catalog
        self.pub_lock = pub_lock
        self.check_writable = check_writable
        self.lock = threading.Lock()
        #: GTID ranges of the records retention removed ({} none, None: some had no GTID)
        self.purged: GtidSummary = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the background rounds if ``maintenance_interval_s`` is set."""
        interval = self.opts.maintenance_interval_s
        if interval is None:
            return
        self._thread = threading.Thread(
            target=self._maintain_every,
            args=(interval, self._stop),
            name=f"headwater-store-maintenance:{os.path.basename(self.dir)}",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop the background rounds; a round under way finishes first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _maintain_every(self, interval: float, stop: threading.Event) -> None:
        """Body of the writer's maintenance thread: retention then compression, every
        ``interval`` seconds until ``stop`` is set. Failures are logged, never raised: a
        full disk or a bad segment must not stop the writer; the next round tries again."""
        while not stop.wait(interval):
            try:
                removed = self.apply_retention()
                compressed = self.compress_sealed()
            except Exception:  # logged with its traceback; the writer goes on
                log.exception("%s: retention or compression failed", self.dir)
                continue
            if removed or compressed:
                log.info(
                    "%s: retention removed %d segments, %d compressed",
                    self.dir,
                    len(removed),
                    len(compressed),
                )

    def apply_retention(self, now_us: int | None = None) -> list[str]:
        """Delete whole sealed segments beyond the retention age or size; return their paths."""
        self.check_writable()
        now = _now_us() if now_us is None else now_us
        with self.lock:
            doomed = plan_retention(
                self.catalog.segments,
                now,
                max_age_s=self.opts.retention_age_s,
                max_bytes=self.opts.retention_bytes,
            )
            if not doomed:
                return []
            purged = self.purged
            for meta in doomed:
                assert meta.footer is not None
                purged = merge_summaries(purged, meta.footer.summary)
            self.save_purged(purged)
            for meta in doomed:
                with self.pub_lock:
                    self.catalog.replace(meta, None)
                    self.catalog.drop_view(meta.base)
                for path in (meta.index_path, meta.path):
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        log.warning("retention: %s was already gone", path)
            fsync_dir(self.dir)
            log.info(
                "retention deleted %d segments up to seq %d",
                len(doomed),
                doomed[-1].footer.last_seq if doomed[-1].footer else 0,
            )
            return [m.path for m in doomed]

    def compress_sealed(self, now_us: int | None = None) -> list[str]:
        """zstd-compress sealed segments older than ``compress_after_s``; return new paths."""
        self.check_writable()
        now = _now_us() if now_us is None else now_us
        done: list[str] = []
        with self.lock:
            for meta in plan_compression(
                self.catalog.segments, now, after_s=self.opts.compress_after_s
            ):
                assert meta.footer is not None
                zpath = os.path.join(self.dir, segment_name(meta.base, ZSEG))
                tmp = zpath + ".tmp"
                size = compress_segment(
                    meta.path,
                    tmp,
                    meta.footer,
                    block_bytes=self.opts.compress_block_bytes,
                    level=self.opts.compress_level,
                )
                os.replace(tmp, zpath)
                fsync_dir(self.dir)
                with self.pub_lock:
                    self.catalog.replace(meta, SegmentMeta(meta.base, zpath, meta.footer, size))
                os.unlink(meta.path)
                fsync_dir(self.dir)
                done.append(zpath)
        return done

    def save_purged(self, summary: GtidSummary) -> None:
        items = (
            None
            if summary is None
            else [[k, i.hex(), lo, hi] for (k, i), (lo, hi) in sorted(summary.items())]
        )
        atomic_write(os.path.join(self.dir, PURGED_NAME), json.dumps({"items": items}).encode())
        self.purged = summary

    def load_purged(self) -> None:
        try:
            with open(os.path.join(self.dir, PURGED_NAME), "rb") as f:
                items = json.loads(f.read())["items"]
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError) as e:
            self.catalog.problems.append(
                CorruptRecordError(
                    f"purged-GTID summary unreadable: {e}", path=PURGED_NAME, offset=0
                )
            )
            self.purged = None
            return
        self.purged = (
            None
            if items is None
            else {(int(k), bytes.fromhex(i)): (int(lo), int(hi)) for k, i, lo, hi in items}
        )

"""The top-level index over segments, the ``head`` file, and recovery on open.

The directory listing is the manifest (segment names sort in log order). On open the
catalog reads each sealed segment's footer (one small read per segment), which gives the
segment's seq range, first/last position, max timestamp and GTID summary: this is the small
top-level index, kept in memory and searched by ``bisect``. Per-segment sparse indexes are
loaded lazily and cached.

Recovery (writer only), in order:

1. ``*.tmp`` files are leftovers of interrupted atomic writes: deleted. When both
   ``BASE.seg`` and ``BASE.zseg`` exist, compression finished (the ``.zseg`` was renamed
   into place whole) and only the deletion of the ``.seg`` was lost: the ``.seg`` goes.
2. Every segment but the newest must have a valid footer; one that does not is renamed to
   ``*.bad``, reported in ``problems`` (path and offset) and skipped, never fatal.
3. A sealed segment's index is checked against its footer (trailer CRC, count, last seq,
   data length); a missing, stale or damaged one is rebuilt from the segment's data.
4. The newest segment, if it has no valid footer, is the active one: every frame is
   checked (CRC32C, sequence continuity), the index is rebuilt from the scan, and the file
   is truncated after the last whole transaction. If valid records follow the first bad
   frame, the damage is not a torn write: a copy of the file is kept as ``*.bad`` and
   the fact is reported before truncating. A segment whose footer is valid but that has
   no successor was sealed just before a crash: a new active segment is started after it.

``head`` (HEAD, 32 bytes) is where the writer publishes what is acknowledged: the active
segment's base, the committed length of its data, and the last committed seq, with a CRC.
It is overwritten in place with one ``pwrite`` after each group commit and not fsynced
(recovery recomputes it); readers in other processes trust only records below it, and a
torn read of it fails its CRC and is retried.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import struct
import time
from collections import OrderedDict
from dataclasses import dataclass

from crc32c import crc32c

from headwater.errors import CorruptRecordError, StoreError
from headwater.store._fs import TMP_SUFFIX, atomic_write, fsync_dir
from headwater.store.index import (
    IndexBuilder,
    IndexView,
    PosTuple,
    encode_trailer,
    split_sealed,
)
from headwater.store.segment import (
    BAD,
    IDX,
    SEG,
    ZSEG,
    Footer,
    SegmentMeta,
    load_data,
    parse_name,
    read_footer,
    scan_buffer,
    segment_name,
)

__all__ = ["ActiveState", "Catalog", "read_head", "write_head"]

log = logging.getLogger(__name__)

HEAD = struct.Struct("<4sQQQI")
HEAD_MAGIC = b"HWHD"
HEAD_NAME = "head"
LOCK_NAME = "LOCK"
VIEW_CACHE = 64


def write_head(fd: int, base: int, end: int, seq: int) -> None:
    body = HEAD.pack(HEAD_MAGIC, base, end, seq, 0)[:-4]
    os.pwrite(fd, body + struct.pack("<I", crc32c(body)), 0)


def read_head(fd: int) -> tuple[int, int, int] | None:
    """(active base, committed length, committed seq), or None if unreadable."""
    for _ in range(100):
        raw = os.pread(fd, HEAD.size, 0)
        if len(raw) == HEAD.size:
            magic, base, end, seq, crc = HEAD.unpack(raw)
            if magic == HEAD_MAGIC and crc32c(raw[:-4]) == crc:
                return base, end, seq
        # A torn read of a concurrent pwrite; the next read sees the whole value.
    return None


@dataclass(slots=True)
class ActiveState:
    """The recovered (or fresh) active segment."""

    base: int
    size: int
    last_seq: int
    builder: IndexBuilder
    first_pos: PosTuple
    last_pos: PosTuple
    first_ts: int


class Catalog:
    """Ordered segment list (copy-on-write: readers keep a consistent snapshot)."""

    def __init__(self, directory: str, interval: int, *, read_only: bool) -> None:
        self.dir = directory
        self.interval = interval
        self.read_only = read_only
        self.segments: list[SegmentMeta] = []
        self.problems: list[CorruptRecordError] = []
        self._views: OrderedDict[int, IndexView] = OrderedDict()

    # --- queries -------------------------------------------------------------------------

    def find(self, seq: int) -> SegmentMeta | None:
        """The segment holding ``seq`` (by base), or None if before the first one."""
        segs = self.segments
        i = bisect.bisect_right([m.base for m in segs], seq) - 1
        return segs[i] if i >= 0 else None

    def after(self, base: int) -> SegmentMeta | None:
        for m in self.segments:
            if m.base > base:
                return m
        return None

    def earliest_seq(self) -> int:
        segs = self.segments
        return segs[0].base if segs else 1

    def replace(self, old: SegmentMeta, new: SegmentMeta | None) -> None:
        segs = [m for m in self.segments if m is not old]
        if new is not None:
            segs.append(new)
            segs.sort(key=lambda m: m.base)
        self.segments = segs

    def cache_view(self, base: int, view: IndexView) -> None:
        self._views[base] = view
        self._views.move_to_end(base)
        while len(self._views) > VIEW_CACHE:
            self._views.popitem(last=False)

    def drop_view(self, base: int) -> None:
        self._views.pop(base, None)

    def sealed_view(self, meta: SegmentMeta) -> IndexView:
        """The index of a sealed segment, loaded and checked once, then cached."""
        view = self._views.get(meta.base)
        if view is not None:
            self._views.move_to_end(meta.base)
            return view
        assert meta.footer is not None
        try:
            with open(meta.index_path, "rb") as f:
                entries, _count, last_seq, data_end = split_sealed(f.read(), path=meta.index_path)
            if last_seq != meta.footer.last_seq or data_end != meta.footer.data_end:
                raise CorruptRecordError(
                    "index is stale (does not match the footer)", path=meta.index_path, offset=0
                )
            view = IndexView.parse(entries, path=meta.index_path)
        except (FileNotFoundError, CorruptRecordError) as e:
            if isinstance(e, CorruptRecordError):
                self.problems.append(e)
            log.warning("rebuilding index of %s: %s", meta.path, e)
            view = self.rebuild_index(meta)
        view.sealed = True
        self.cache_view(meta.base, view)
        return view

    def active_view_from_disk(self, meta: SegmentMeta, committed_end: int) -> IndexView:
        """A read-only process's view of the writer's active index (entries of closed blocks)."""
        try:
            with open(meta.index_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return IndexView.empty()
        return IndexView.parse(
            data[: len(data) - len(data) % 94],
            path=meta.index_path,
            limit_offset=committed_end,
            strict=False,
        )

    def rebuild_index(self, meta: SegmentMeta) -> IndexView:
        """Rebuild a sealed segment's index from its data (written back by the writer)."""
        assert meta.footer is not None
        data, _size = load_data(meta.path)
        try:
            res = scan_buffer(data, meta.base, meta.footer.data_end, self.interval)
        finally:
            if hasattr(data, "close"):
                data.close()
        if res.bad_offset is not None:
            err = CorruptRecordError(res.bad_reason, path=meta.path, offset=res.bad_offset)
            self.problems.append(err)
            log.error("corrupt sealed segment: %s", err)
        entries = res.builder.seal()
        if not self.read_only:
            n = len(entries) // 94
            atomic_write(
                meta.index_path,
                entries + encode_trailer(entries, n, meta.footer.last_seq, meta.footer.data_end),
            )
        return res.builder.view

    # --- opening -------------------------------------------------------------------------

    def _listing(self) -> dict[int, dict[str, str]]:
        found: dict[int, dict[str, str]] = {}
        for name in os.listdir(self.dir):
            if name.endswith(TMP_SUFFIX):
                if not self.read_only:
                    os.unlink(os.path.join(self.dir, name))
                continue
            parsed = parse_name(name)
            if parsed is not None:
                found.setdefault(parsed[0], {})[parsed[1]] = os.path.join(self.dir, name)
        return found

    def load_readonly(self, active_base: int) -> None:
        """List the directory as a reader in another process (never changes files)."""
        old = {m.path: m for m in self.segments if m.footer is not None}
        segs: list[SegmentMeta] = []
        for base, files in sorted(self._listing().items()):
            path = files.get(ZSEG) or files.get(SEG)
            if path is None:
                continue
            if path in old:
                segs.append(old[path])
                continue
            if base >= active_base:
                segs.append(SegmentMeta(base, path, None, 0))
                continue
            try:
                segs.append(SegmentMeta(base, path, read_footer(path), os.path.getsize(path)))
            except (CorruptRecordError, FileNotFoundError) as e:
                log.warning("skipping unreadable segment %s: %s", path, e)
        self.segments = segs

    def recover(self) -> ActiveState:
        """Open as the writer: check everything cheap, repair what must be (module doc)."""
        listing = self._listing()
        for base, files in list(listing.items()):
            if ZSEG in files and SEG in files:
                os.unlink(files.pop(SEG))
            if ZSEG not in files and SEG not in files:
                os.unlink(files[IDX])
                del listing[base]
        bases = sorted(listing)
        segs: list[SegmentMeta] = []
        active: ActiveState | None = None
        for i, base in enumerate(bases):
            files = listing[base]
            path = files.get(ZSEG) or files[SEG]
            try:
                footer = read_footer(path)
            except CorruptRecordError as e:
                if i == len(bases) - 1 and path.endswith(SEG):
                    active = self._recover_active(base, path)
                    segs.append(SegmentMeta(base, path, None, active.size))
                else:
                    self.set_aside(path, e)
                continue
            if footer.first_seq != base or (
                segs and segs[-1].footer is not None and segs[-1].footer.last_seq + 1 != base
            ):
                log.error("sequence gap before segment %s", path)
            meta = SegmentMeta(base, path, footer, os.path.getsize(path))
            segs.append(meta)
            self._check_index(meta)
        self.segments = segs
        if active is None:
            base = segs[-1].footer.last_seq + 1 if segs and segs[-1].footer else 1
            path = os.path.join(self.dir, segment_name(base))
            open(path, "ab").close()
            open(os.path.join(self.dir, segment_name(base, IDX)), "wb").close()
            fsync_dir(self.dir)
            self.segments = [*segs, SegmentMeta(base, path, None, 0)]
            active = ActiveState(
                base, 0, base - 1, IndexBuilder(self.interval), (0, 0, 0, 0), (0, 0, 0, 0), 0
            )
        return active

    def _check_index(self, meta: SegmentMeta) -> None:
        assert meta.footer is not None
        try:
            with open(meta.index_path, "rb") as f:
                _e, _n, last_seq, data_end = split_sealed(f.read(), path=meta.index_path)
            if last_seq == meta.footer.last_seq and data_end == meta.footer.data_end:
                return
            log.warning("index %s is stale; rebuilding", meta.index_path)
        except FileNotFoundError:
            log.warning("index %s is missing; rebuilding", meta.index_path)
        except CorruptRecordError as e:
            self.problems.append(e)
            log.error("damaged index, rebuilding: %s", e)
        self.cache_view(meta.base, self.rebuild_index(meta))

    def set_aside(self, path: str, err: CorruptRecordError) -> None:
        """Rename a corrupt segment to ``*.bad`` so the log can go on without it."""
        self.problems.append(err)
        log.error("setting corrupt segment aside: %s", err)
        base = parse_name(os.path.basename(path))
        os.replace(path, path + BAD)
        if base is not None:
            idx = os.path.join(self.dir, segment_name(base[0], IDX))
            if os.path.exists(idx):
                os.unlink(idx)
        fsync_dir(self.dir)

    def _recover_active(self, base: int, path: str) -> ActiveState:
        started = time.monotonic()
        data, size = load_data(path)
        try:
            res = scan_buffer(data, base, size, self.interval)
        finally:
            if hasattr(data, "close"):
                data.close()
        if res.bad_offset is not None and res.corrupt_after:
            err = CorruptRecordError(
                f"{res.bad_reason}; valid records follow, so this is "
                f"damage, not a torn write (copy kept as {BAD})",
                path=path,
                offset=res.bad_offset,
            )
            self.problems.append(err)
            log.error("corrupt active segment: %s", err)
            shutil.copyfile(path, path + BAD)
        if res.commit_end < size:
            log.warning(
                "truncating %s from %d to %d bytes (torn or unacknowledged tail)",
                path,
                size,
                res.commit_end,
            )
            fd = os.open(path, os.O_WRONLY)
            try:
                os.ftruncate(fd, res.commit_end)
                os.fsync(fd)
            finally:
                os.close(fd)
        entries = b"".join(res.builder.all_entries)
        idx = os.path.join(self.dir, segment_name(base, IDX))
        atomic_write(idx, entries)
        # Those entries are on disk now: the writer's first write-out must not append them
        # again (it did: a reader in another process stopped at the repeated first entry,
        # out of order, and found every later record by a scan from there).
        res.builder.take_unwritten()
        log.info(
            "recovered %s: %d records, %d bytes in %.2fs",
            path,
            res.count,
            res.commit_end,
            time.monotonic() - started,
        )
        return ActiveState(
            base,
            res.commit_end,
            res.last_seq,
            res.builder,
            res.first_pos,
            res.last_pos,
            res.first_ts,
        )


def seal_footer(base: int, state: ActiveState, now_us: int) -> Footer:
    """The footer describing the active segment as it stands."""
    b = state.builder
    return Footer(
        state.size,
        b.count,
        base,
        state.last_seq,
        state.first_pos,
        state.last_pos,
        state.first_ts,
        b.max_ts,
        now_us,
        b.footer_summary(),
    )


def lock_dir(directory: str) -> int:
    """Take the single-writer lock of a log directory; returns the held fd."""
    import fcntl

    fd = os.open(os.path.join(directory, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreError(
            f"{directory}: another process has this change log open for writing"
        ) from None
    return fd

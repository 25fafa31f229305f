"""Log files in a directory as they grow and rotate: identity, offsets, records.

Identity. A file is known by ``dev:inode`` plus a fingerprint (SHA-1 of its first
:data:`FP_BYTES` bytes, or of all of them while it is shorter, with that length): a
rotation by rename (``app.log`` -> ``app.log.1``, a new ``app.log``) keeps the inode, so
the renamed file is followed under its new name and read to its end; an inode reused by a
new file is told apart by the fingerprint. Each file gets an ordinal when first seen (in
order of modification time, then name), which with a byte offset forms the record's
position and ``ums_id_`` (``ordinal << 40 | offset``: files up to 1 TiB). Copy-and-truncate
rotation is not supported (a file shorter than its offset is read again from 0 and says
so in the log).

Offsets (:class:`FilesOffset`, a JSON dict kept in Spark's checkpoint)::

    {"files": {"<dev>:<ino>": {"name": N, "n": ORDINAL, "off": BYTES, "fp": HEX, "fpn": LEN}},
     "next": NEXT_ORDINAL, "at_us": MICROSECONDS}

``off`` is always the end of a complete record; ``at_us`` is when the driver cut the batch
(heartbeat ``read_ts``, and the change rows' time for records without a parsed time), so a
replayed batch yields the same rows.

Records. Without ``record_start`` a record is one line (``\\n``-terminated; a last line
without its newline waits). With it, a record begins at a line matching ``record_start``
(Python regex, ``re.match`` at the line's start) and runs to the next such line: stack
traces stay with their message. The newest record of a file is complete when another
record starts after it, when a newer file exists (the file was rotated), or when the file
has not changed for ``idle_s`` and ends with a newline.

Cutting (:func:`record_spans`) finds the lines with numpy (one pass in C over the bytes)
and, for multi-line records, tests ``record_start`` at each line start in place
(``Pattern.match(data, start, end)``, compiled with ``re.MULTILINE`` so that ``^`` matches
at a line start; a pattern with ``\\A`` or a look-behind is tested on the line's own
bytes instead, as those see past a line start): no per-line bytes objects, so the
source hands Arrow the file's bytes and the records' offsets (headwater.logs.source).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headwater.errors import HeadwaterError

__all__ = [
    "FP_BYTES",
    "FileChunk",
    "FilesOffset",
    "LogSourceError",
    "advance",
    "chunk_data",
    "plan_chunks",
    "read_chunk",
    "record_spans",
    "records_of",
    "texts_of",
]

log = logging.getLogger(__name__)

FP_BYTES = 256
#: ``ums_id_`` = ordinal << OFFSET_BITS | offset
OFFSET_BITS = 40
_BLOCK = 1 << 16
#: The smallest chunk a batch is cut into for parallelism (a task has a fixed cost).
MIN_CHUNK = 1 << 20


class LogSourceError(HeadwaterError):
    """A log file could not be read (gone before its data was read, unreadable)."""


@dataclass(frozen=True, slots=True)
class FilesOffset:
    files: dict[str, dict[str, Any]]
    next: int = 0
    at_us: int = 0

    def to_dict(self) -> dict[str, Any]:
        files = {k: dict(sorted(v.items())) for k, v in sorted(self.files.items())}
        return {"files": files, "next": self.next, "at_us": self.at_us}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FilesOffset:
        return cls({k: dict(v) for k, v in d["files"].items()}, int(d["next"]), int(d["at_us"]))


@dataclass(frozen=True, slots=True)
class FileChunk:
    """Records starting in ``[lo, hi)`` of one file, the range's complete data ending at
    ``end``; ``first`` is the range's start (a record start by construction)."""

    directory: str
    pattern: str
    key: str
    name: str
    ordinal: int
    first: int
    lo: int
    hi: int
    end: int
    record_start: str | None
    at_us: int


def _fingerprint(path: str, size: int) -> tuple[str, int]:
    n = min(size, FP_BYTES)
    with open(path, "rb") as f:
        return hashlib.sha1(f.read(n)).hexdigest(), n


def _listing(directory: str, pattern: str) -> list[tuple[str, os.stat_result]]:
    out = []
    for p in Path(directory).glob(pattern):
        try:
            st = p.stat()
        except FileNotFoundError:  # rotated away between listing and stat
            continue
        if p.is_file():
            out.append((p.name, st))
    return out


def _same_file(path: str, entry: dict[str, Any], size: int) -> bool:
    if size < entry["fpn"]:
        return False
    with open(path, "rb") as f:
        return bool(hashlib.sha1(f.read(entry["fpn"])).hexdigest() == entry["fp"])


def _last_start(path: str, start: int, size: int, record_start: str | None) -> int:
    """The end of the complete records in ``[start, size)``: after the last newline (single
    lines), or the last record start after ``start`` (multi-line records)."""
    with open(path, "rb") as f:
        if record_start is None:
            pos = size
            while pos > start:  # backwards by blocks: a batch's end is near the file's end
                read_from = max(start, pos - _BLOCK)
                f.seek(read_from)
                i = f.read(pos - read_from).rfind(b"\n")
                if i >= 0:
                    return read_from + i + 1
                pos = read_from
            return start
        f.seek(start)
        data = f.read(size - start)
    test = _start_test(record_start)
    # backwards over the line starts after ``start``: the last record start is near the end
    nl = data.rfind(b"\n")
    while nl >= 0:
        line = nl + 1
        if line < len(data):
            end = data.find(b"\n", line)
            if test(data, line, len(data) if end < 0 else end):
                return start + line
        nl = data.rfind(b"\n", 0, nl)
    return start


def advance(
    directory: str,
    pattern: str,
    prev: FilesOffset,
    *,
    record_start: str | None,
    idle_s: float,
    now: float | None = None,
) -> FilesOffset:
    """The offsets up to the last complete record of every file now (module docstring)."""
    now = time.time() if now is None else now
    found: dict[str, tuple[str, os.stat_result]] = {}
    for name, st in _listing(directory, pattern):
        found[f"{st.st_dev}:{st.st_ino}"] = (name, st)
    files: dict[str, dict[str, Any]] = {}
    new: list[tuple[float, str, str, os.stat_result]] = []
    for key, (name, st) in found.items():
        path = os.path.join(directory, name)
        entry = prev.files.get(key)
        if entry is not None and not _same_file(path, entry, st.st_size):
            log.warning(
                "%s: not the file first seen at this inode (reused or truncated); read from 0", name
            )
            entry = None
        if entry is None:
            new.append((st.st_mtime, name, key, st))
        else:
            files[key] = {**entry, "name": name}
    nxt = prev.next
    for _mtime, name, key, _st in sorted(new):
        files[key] = {"name": name, "n": nxt, "off": 0, "fp": "", "fpn": 0}
        nxt += 1
    newest = max((e["n"] for e in files.values()), default=-1)
    for key, entry in files.items():
        name, st = found[key]
        path = os.path.join(directory, name)
        if entry["fpn"] < FP_BYTES and st.st_size > entry["fpn"]:
            entry["fp"], entry["fpn"] = _fingerprint(path, st.st_size)
        start = entry["off"]
        if st.st_size <= start:
            continue
        end = _last_start(path, start, st.st_size, record_start)
        final = entry["n"] != newest or now - st.st_mtime >= idle_s
        if final and end < st.st_size and _ends_with_newline(path, st.st_size):
            end = st.st_size
        entry["off"] = end
    return FilesOffset(files, nxt, int(now * 1e6))


def _ends_with_newline(path: str, size: int) -> bool:
    with open(path, "rb") as f:
        f.seek(size - 1)
        return f.read(1) == b"\n"


def plan_chunks(
    directory: str,
    pattern: str,
    start: FilesOffset,
    end: FilesOffset,
    *,
    record_start: str | None,
    chunk_bytes: int,
    parallelism: int = 1,
) -> list[FileChunk]:
    """The partitions of the batch ``(start, end]``: each file's new bytes in chunks of at
    most ``chunk_bytes``; a backlog is cut into a multiple of ``parallelism`` chunks of
    equal size (at least :data:`MIN_CHUNK`), so every core has the same work."""
    ranges = []
    for key, e in sorted(end.files.items(), key=lambda kv: kv[1]["n"]):
        s = start.files.get(key)
        first = s["off"] if s is not None and s["n"] == e["n"] else 0
        if e["off"] > first:
            ranges.append((key, e, first))
    total = sum(e["off"] - first for _, e, first in ranges)
    pieces = max(parallelism, -(-total // chunk_bytes))
    pieces = -(-pieces // parallelism) * parallelism
    size = min(chunk_bytes, max(MIN_CHUNK, -(-total // pieces)))
    out = []
    for key, e, first in ranges:
        for lo in range(first, e["off"], size):
            hi = min(lo + size, e["off"])
            out.append(
                FileChunk(
                    directory,
                    pattern,
                    key,
                    e["name"],
                    e["n"],
                    first,
                    lo,
                    hi,
                    e["off"],
                    record_start,
                    end.at_us,
                )
            )
    return out


def _open(chunk: FileChunk) -> Any:
    """The chunk's file by identity: under its recorded name, else wherever it was renamed."""
    candidates = [chunk.name, *(n for n, _ in _listing(chunk.directory, chunk.pattern))]
    for name in candidates:
        path = os.path.join(chunk.directory, name)
        try:
            f = open(path, "rb")  # noqa: SIM115  (returned open)
        except FileNotFoundError:
            continue
        st = os.fstat(f.fileno())
        if f"{st.st_dev}:{st.st_ino}" == chunk.key and st.st_size >= chunk.end:
            return f
        f.close()
    raise LogSourceError(
        f"log file {chunk.name} ({chunk.key}) is gone before bytes {chunk.lo}-{chunk.end} were"
        f" read from {chunk.directory}: keep rotated files until the pipeline has read them"
    )


def chunk_data(chunk: FileChunk) -> tuple[bytes, int]:
    """The bytes to cut the chunk's records from, and the file offset of the first: from
    ``lo`` (moved to the next line start when ``lo`` is not the range's start) to ``end``."""
    with _open(chunk) as f:
        lo = chunk.lo
        if lo > chunk.first:  # align to a line start: the byte before must be a newline
            f.seek(lo - 1)
            data = f.read(chunk.end - lo + 1)
            cut = data.find(b"\n")
            return data[cut + 1 :], lo + cut
        f.seek(lo)
        return f.read(chunk.end - lo), lo


def read_chunk(chunk: FileChunk) -> Iterator[tuple[int, bytes]]:
    """``(offset, record bytes without the final newline)`` of the records starting in
    ``[lo, hi)``; the last one may run past ``hi`` up to ``end``."""
    data, lo = chunk_data(chunk)
    starts, ends = record_spans(
        data, lo, chunk.hi, aligned_mid=chunk.lo > chunk.first, record_start=chunk.record_start
    )
    return texts_of(data, lo, starts, ends)


def records_of(data: bytes, record_start: str | None) -> Iterator[tuple[int, bytes]]:
    """``(offset, record)`` of a whole file's bytes, cut as :func:`read_chunk` cuts them
    (the preview's sample); a last line without its newline counts."""
    starts, ends = record_spans(
        data, 0, len(data) + 1, aligned_mid=False, record_start=record_start
    )
    return texts_of(data, 0, starts, ends)


def texts_of(data: bytes, lo: int, starts: Any, ends: Any) -> Iterator[tuple[int, bytes]]:
    """``(offset, text)`` of the records of :func:`record_spans` (CRs before LFs gone)."""
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        text = data[s:e]
        if b"\r" in text:  # each line's CR before its LF goes, as the lines are cut
            text = text.replace(b"\r\n", b"\n").removesuffix(b"\r")
        yield lo + s, text


def _start_test(record_start: str) -> Any:
    """``test(data, start, end)``: does the line ``data[start:end]`` begin a record?"""
    if "\\A" in record_start or "(?<" in record_start:
        exact = re.compile(record_start.encode())
        return lambda data, s, e: exact.match(data[s:e]) is not None
    # MULTILINE: ^ matches at ``start`` (a line start) as at a line's own beginning; $
    # before the newline at ``end`` or at ``end``, as at the line's end
    pattern = re.compile(record_start.encode(), re.MULTILINE)
    return lambda data, s, e: pattern.match(data, s, e) is not None


def record_spans(
    data: bytes, lo: int, hi: int, *, aligned_mid: bool, record_start: str | None
) -> tuple[Any, Any]:
    """The records of ``data`` (file bytes from offset ``lo``, a line start) that start
    before file offset ``hi``: two int64 numpy arrays, the start of each record in
    ``data`` and its end (the index of its final newline, or ``len(data)`` for a last
    line without one). Records are consecutive: each starts right after the newline
    ending the one before. ``aligned_mid``: ``data`` begins in the middle of a range, so
    lines before its first record start belong to the record before and are skipped."""
    import numpy as np

    n = len(data)
    newlines = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ends = newlines if data[-1] == 10 else np.append(newlines, n)
    starts = np.concatenate(([0], newlines + 1))[: len(ends)].astype(np.int64)
    ends = ends.astype(np.int64)
    if record_start is not None:
        test = _start_test(record_start)
        first = np.fromiter(
            (test(data, s, e) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)),
            bool,
            len(starts),
        )
        if not aligned_mid:
            first[0] = True  # the range's first line starts a record, whatever it is
        index = np.flatnonzero(first)
        ends = np.append(starts[index[1:]] - 1, ends[-1]) if len(index) else index
        starts = starts[index]
    keep = int(np.searchsorted(starts, hi - lo, side="left"))
    return starts[:keep], ends[:keep]

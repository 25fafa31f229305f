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
"""

from __future__ import annotations

import hashlib
import itertools
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
    "plan_chunks",
    "read_chunk",
    "records_of",
]

log = logging.getLogger(__name__)

FP_BYTES = 256
#: ``ums_id_`` = ordinal << OFFSET_BITS | offset
OFFSET_BITS = 40
_BLOCK = 1 << 16


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
    pattern = re.compile(record_start.encode())
    starts = [m.end() for m in re.finditer(b"\n", data)]
    for s in reversed(starts):
        if s < len(data) and pattern.match(data, s):
            return start + s
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
) -> list[FileChunk]:
    """The partitions of the batch ``(start, end]``: each file's new bytes in chunks."""
    out = []
    for key, e in sorted(end.files.items(), key=lambda kv: kv[1]["n"]):
        s = start.files.get(key)
        first = s["off"] if s is not None and s["n"] == e["n"] else 0
        for lo in range(first, e["off"], chunk_bytes):
            hi = min(lo + chunk_bytes, e["off"])
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


def read_chunk(chunk: FileChunk) -> Iterator[tuple[int, bytes]]:
    """``(offset, record bytes without the final newline)`` of the records starting in
    ``[lo, hi)``; the last one may run past ``hi`` up to ``end``."""
    with _open(chunk) as f:
        lo = chunk.lo
        if lo > chunk.first:  # align to a line start: the byte before must be a newline
            f.seek(lo - 1)
            data = f.read(chunk.end - lo + 1)
            cut = data.find(b"\n")
            lo, data = lo + cut, data[cut + 1 :]
        else:
            f.seek(lo)
            data = f.read(chunk.end - lo)
    if chunk.record_start is None:
        yield from _lines(data, lo, chunk.hi)
    else:
        yield from _records(
            data, lo, chunk.hi, chunk.lo > chunk.first, re.compile(chunk.record_start.encode())
        )


def records_of(data: bytes, record_start: str | None) -> Iterator[tuple[int, bytes]]:
    """``(offset, record)`` of a whole file's bytes, cut as :func:`read_chunk` cuts them
    (the preview's sample); a last line without its newline counts."""
    if record_start is None:
        return _lines(data, 0, len(data) + 1)
    return _records(data, 0, len(data) + 1, False, re.compile(record_start.encode()))


def _lines(data: bytes, lo: int, hi: int) -> Iterator[tuple[int, bytes]]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    offsets = itertools.accumulate((len(x) + 1 for x in lines), initial=lo)
    for off, line in zip(offsets, lines, strict=False):
        if off >= hi:
            break
        yield off, line.removesuffix(b"\r")


def _records(
    data: bytes, lo: int, hi: int, aligned_mid: bool, start: re.Pattern[bytes]
) -> Iterator[tuple[int, bytes]]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    offsets = itertools.accumulate((len(x) + 1 for x in lines), initial=lo)
    current: list[bytes] = []
    current_off = -1
    # in the middle of a range, lines before the first record start belong to the record
    # of the chunk before: skip them
    skipping = aligned_mid
    for off, line in zip(offsets, lines, strict=False):
        is_start = start.match(line) is not None
        if skipping and not is_start:
            continue
        skipping = False
        if is_start or current_off < 0:
            if current_off >= 0:
                yield current_off, b"\n".join(current)
            if off >= hi:
                return
            current, current_off = [line.removesuffix(b"\r")], off
        else:
            current.append(line.removesuffix(b"\r"))
    if current_off >= 0:
        yield current_off, b"\n".join(current)

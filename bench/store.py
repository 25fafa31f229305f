"""Benchmark of the change log store: append throughput and lookup latency.

Append: records of 1 KB and 64 KB are appended with the default options (group commit,
the flusher thread fdatasyncs behind the appender) the way the reader service appends:
``append_many`` with the transactions that arrived together (``BATCH`` records per call),
then ``wait_acked`` of the last seq, so the time includes the final acknowledgement (every
record written and fdatasync'ed per the policy). The single-record API (``append_nowait``
per record, then ``wait_acked``) is timed too and printed, not used for the ratio.

The baseline is a plain buffered ``file.write`` of the same bytes the store writes (each
record's whole frame, encoded before timing) followed by one ``flush`` + ``fsync``, so both
sides end with the same bytes durable on the same disk, in the same run. Records are built
before timing (the reader builds them anyway); what is timed is the store's work (framing,
CRC32C, index, memory tail, writes, group commits) versus the plain write.

Lookup: a log of 5 million records (200k with ``--quick``) with ~100 byte payloads, MySQL
GTIDs and commit timestamps that go backwards now and then; then 1000 random lookups each
by position, by time and by GTID set (open a reader and read its first record), checking
every answer. Medians and 99th percentiles are printed.

Last line: ``store_append_vs_plain_write=<ratio>``, the lower of the 1 KB and 64 KB ratios
of store (``append_many``) MB/s to plain-write MB/s.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

from headwater.position import MysqlGtidSet, Position
from headwater.store import AtTime, ChangeLog, Durability, Record, Start, StoreOptions
from headwater.store.record import encode_parts

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
BATCH = 64  # transactions per append_many call (what one socket read may bring)


def ts_of(i: int) -> int:
    """Commit time of record i (1-based): mostly increasing, sometimes a little backwards."""
    return 1_700_000_000_000_000 + i * 1000 - (1500 if i % 7 == 3 else 0)


def record(i: int, payload: bytes) -> Record:
    return Record(
        Position(1, 1 + i // 1_000_000, 4 + (i % 1_000_000) * 10),
        payload,
        ts_us=ts_of(i),
        gtid=f"{UUID}:{i}",
        tables=(("shop.orders", 1),),
    )


def settle() -> None:
    """Write back everything dirty (and the deletions of the previous run) before timing.

    Without this, whichever side runs next pays for the previous run's writeback and (on
    a ``discard`` mount) its TRIMs in its final sync.
    """
    os.sync()


def store_append(base: str, recs: list[Record], options: StoreOptions, batch: int) -> float:
    """Seconds to append ``recs`` (``batch`` per call; 1: ``append_nowait``) until acked."""
    d = tempfile.mkdtemp(dir=base)
    log = ChangeLog.open(d, options)
    settle()
    t0 = time.perf_counter()
    last = 0
    if batch == 1:
        append = log.append_nowait
        for r in recs:
            last = append(r)
    else:
        append_many = log.append_many
        for i in range(0, len(recs), batch):
            last = append_many(recs[i : i + batch])
    if options.durability is Durability.NONE:
        log.flush()
    else:
        assert log.wait_acked(last, 60.0)
    took = time.perf_counter() - t0
    log.close()
    shutil.rmtree(d)
    return took


def plain_write(base: str, frames: list[bytes]) -> float:
    """Seconds to write the same frames with a buffered file, then flush and fsync."""
    path = os.path.join(base, "plain.bin")
    settle()
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for frame in frames:
            f.write(frame)
        f.flush()
        os.fsync(f.fileno())
    took = time.perf_counter() - t0
    os.unlink(path)
    return took


def append_throughput(
    base: str, size: int, count: int, options: StoreOptions | None = None, label: str = ""
) -> float:
    """Print store vs plain write for ``count`` records of ``size``; return the batch ratio."""
    payload = os.urandom(size)
    recs = [record(i, payload) for i in range(1, count + 1)]
    frames = []
    for i, r in enumerate(recs, 1):
        head, body, _n = encode_parts(r, i)
        frames.append(head + body)
    opts = options or StoreOptions()
    batch_s = store_append(base, recs, opts, BATCH)
    single_s = store_append(base, recs, opts, 1)
    plain_s = plain_write(base, frames)
    payload_s = plain_write(base, [r.payload for r in recs])
    mb = size * count / 1e6
    ratio = plain_s / batch_s
    print(
        f"append{label} {size // 1024:>2} KB x {count}: "
        f"store append_many({BATCH}) {mb / batch_s:7.1f} MB/s {count / batch_s:8.0f} rec/s | "
        f"append_nowait {mb / single_s:7.1f} MB/s {count / single_s:8.0f} rec/s | "
        f"plain write {mb / plain_s:7.1f} MB/s {count / plain_s:8.0f} rec/s | "
        f"ratio {ratio:.2f} (append_nowait {plain_s / single_s:.2f})",
        flush=True,
    )
    print(
        f"  (for reference: plain write of the payloads alone {mb / payload_s:7.1f} MB/s, "
        f"ratio to it {payload_s / batch_s:.2f}, append_nowait {payload_s / single_s:.2f})",
        flush=True,
    )
    return ratio


def recovery_time(base: str, megabytes: int) -> None:
    """Reopen time of a log whose active segment holds ``megabytes`` MB of 1 KB records."""
    d = tempfile.mkdtemp(dir=base)
    opts = StoreOptions(segment_bytes=4 << 30, durability=Durability.NONE)
    payload = os.urandom(1000)
    log = ChangeLog.open(d, opts)
    append = log.append_nowait
    n = megabytes * 1_000_000 // 1100
    for i in range(1, n + 1):
        append(record(i, payload))
    log.close()
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".seg"))
    t0 = time.perf_counter()
    log = ChangeLog.open(d, opts)
    took = time.perf_counter() - t0
    assert log.acked_seq == n and len(log.segments()) == 1
    log.close()
    shutil.rmtree(d)
    print(
        f"recovery of a {size / 1e9:.2f} GB active segment ({n} records): {took:.2f}s", flush=True
    )


def expected_time_seq(target: int, n: int) -> int:
    i = max(1, (target - 1_700_000_000_000_000) // 1000 - 3)
    while i <= n and ts_of(i) < target:
        i += 1
    return i


def lookups(base: str, n: int, rounds: int) -> None:
    d = tempfile.mkdtemp(dir=base)
    payload = os.urandom(100)
    log = ChangeLog.open(d, StoreOptions())
    t0 = time.perf_counter()
    append = log.append_nowait
    for i in range(1, n + 1):
        append(record(i, payload))
    log.flush()
    print(
        f"built a log of {n} records in {time.perf_counter() - t0:.1f}s "
        f"({len(log.segments())} segments)",
        flush=True,
    )
    log.close()
    t0 = time.perf_counter()
    log = ChangeLog.open(d, StoreOptions())
    print(
        f"reopened (recovery of the active segment) in {time.perf_counter() - t0:.2f}s", flush=True
    )
    rng = random.Random(5)

    def measure(name: str, make: Callable[[int], tuple[Start, int]]) -> None:
        times = []
        for _ in range(rounds):
            k = rng.randint(1, n)
            start, want = make(k)
            t = time.perf_counter()
            with log.reader(start) as r:
                rec = r.next(0)
            times.append(time.perf_counter() - t)
            assert rec is not None and rec.seq == want, (name, k, want, rec)
        times.sort()
        print(
            f"lookup by {name:8}: median {statistics.median(times) * 1e3:.3f} ms, "
            f"p99 {times[int(len(times) * 0.99)] * 1e3:.3f} ms",
            flush=True,
        )

    def by_pos(k: int) -> tuple[Start, int]:
        return record(k, b"").position, k

    def by_time(k: int) -> tuple[Start, int]:
        t = ts_of(k) + rng.choice((0, 1))
        return AtTime(t), expected_time_seq(t, n)

    def by_gtid(k: int) -> tuple[Start, int]:
        return MysqlGtidSet.parse(f"{UUID}:1-{k}"), min(k + 1, n + 1)

    for name, fn in (("position", by_pos), ("time", by_time), ("gtid", by_gtid)):
        measure(name, fn)
    log.close()
    shutil.rmtree(d)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, under a minute")
    ap.add_argument("--dir", default=None, help="where to put temporary logs")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="headwater-bench-", dir=args.dir)
    try:
        scale = 1 if args.quick else 5
        r1 = append_throughput(base, 1024, 100_000 * scale)
        r64 = append_throughput(base, 64 * 1024, 1600 * scale)
        none = StoreOptions(durability=Durability.NONE)
        append_throughput(base, 1024, 100_000 * scale, none, " (durability=none, for CPU cost)")
        recovery_time(base, 100 if args.quick else 1000)
        lookups(base, 200_000 if args.quick else 5_000_000, 1000)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"store_append_vs_plain_write={min(r1, r64):.2f}")


if __name__ == "__main__":
    main()

"""Crash test of the change log store: SIGKILL a writer under load, N times, same directory.

Each round a child process opens the log and appends records as fast as it can (sizes from
a few bytes to 64 KB, some large transactions in chunks, durability policy rotating between
group commit, fsync-every-record and none), compressing and applying size retention as it
goes. Whenever ``acked_seq`` moves, the child writes ``seq crc`` lines for the newly
acknowledged records to a pipe. The parent kills it with SIGKILL at a random moment, reopens
the log (recovery) and checks that every acknowledged record not yet removed by retention is
present, in order, with the same payload, that every record read is whole and
self-consistent, and that recovery reported no damage.

Last line: ``store_crash rounds=<N> lost=<k> corrupt=<m>``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from crc32c import crc32c

from headwater.errors import StoreError
from headwater.position import Position
from headwater.store import ChangeLog, Durability, Record, StoreOptions

POLICIES = (Durability.GROUP, Durability.EVERY_RECORD, Durability.NONE)


def options(policy: Durability) -> StoreOptions:
    return StoreOptions(
        segment_bytes=512 * 1024,
        index_interval_bytes=4096,
        durability=policy,
        group_commit_ms=2.0,
        group_commit_bytes=256 * 1024,
        retention_age_s=None,
        retention_bytes=16 * 1024 * 1024,
        compress_after_s=0.0,
        memory_tail_bytes=1024 * 1024,
    )


def make_payload(rng: random.Random) -> bytes:
    size = rng.choice((16, 200, 1000, 4000, 20000, 65000))
    body = rng.randbytes(size)
    return crc32c(body).to_bytes(4, "little") + body


def self_consistent(payload: bytes) -> bool:
    return len(payload) >= 4 and crc32c(payload[4:]) == int.from_bytes(payload[:4], "little")


def child(directory: str, fd: int, round_no: int) -> None:
    policy = POLICIES[round_no % len(POLICIES)]
    rng = random.Random(round_no * 7919 + os.getpid())
    log = ChangeLog.open(directory, options(policy))
    pending: list[tuple[int, int]] = []
    latest = log.latest()
    offset = 0 if latest is None else latest.position.offset + 1
    out = os.fdopen(fd, "w", buffering=1)
    n = 0
    while True:
        n += 1
        offset += 1
        pos = Position(1, 1, offset)
        ts = time.time_ns() // 1000
        if rng.random() < 0.02:
            chunks = [make_payload(rng) for _ in range(rng.randint(2, 5))]
            header = Record(pos, b"", ts_us=ts, gtid=f"0-1-{offset}")
            last = log.append_chunked(header, chunks)
            first = last - len(chunks) + 1
            pending.extend((first + i, crc32c(c)) for i, c in enumerate(chunks))
        else:
            payload = make_payload(rng)
            rec = Record(pos, payload, ts_us=ts, gtid=f"0-1-{offset}", tables=(("db.t", 1),))
            seq = log.append(rec) if rng.random() < 0.05 else log.append_nowait(rec)
            pending.append((seq, crc32c(payload)))
        acked = log.acked_seq
        if pending and pending[0][0] <= acked:
            k = 0
            while k < len(pending) and pending[k][0] <= acked:
                k += 1
            out.write("".join(f"{s} {c}\n" for s, c in pending[:k]))
            del pending[:k]
        if n % 500 == 0:
            log.compress_sealed()
            log.apply_retention()


def verify(directory: str, acked: dict[int, int]) -> tuple[int, int, int]:
    """(lost, corrupt, records read) after reopening the log."""
    log = ChangeLog.open(directory, options(Durability.GROUP))
    corrupt = len(log.problems)
    for p in log.problems:
        print(f"  recovery problem: {p}", file=sys.stderr)
    seen: dict[int, int] = {}
    try:
        reader = log.reader()
        earliest = reader.next_seq
        prev = earliest - 1
        for rec in reader:
            if rec.seq != prev + 1:
                corrupt += 1
            prev = rec.seq
            if not self_consistent(rec.payload):
                corrupt += 1
            seen[rec.seq] = crc32c(rec.payload)
    except StoreError as e:
        print(f"  read error: {e}", file=sys.stderr)
        corrupt += 1
        earliest = 0
    finally:
        log.close()
    lost = 0
    for seq, crc in acked.items():
        if seq < earliest:
            continue
        got = seen.get(seq)
        if got is None:
            lost += 1
        elif got != crc:
            corrupt += 1
    return lost, corrupt, len(seen)


def run(rounds: int, directory: str, seed: int) -> tuple[int, int]:
    rng = random.Random(seed)
    lost = corrupt = 0
    acked: dict[int, int] = {}
    for r in range(rounds):
        rfd, wfd = os.pipe()
        proc = subprocess.Popen(
            [sys.executable, __file__, "--child", directory, "--fd", str(wfd), "--round", str(r)],
            pass_fds=(wfd,),
        )
        os.close(wfd)
        time.sleep(rng.uniform(0.3, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with os.fdopen(rfd, "rb") as f:
            data = f.read()
        for line in data.split(b"\n")[:-1]:
            seq, crc = line.split()
            acked[int(seq)] = int(crc)
        lo, co, nread = verify(directory, acked)
        lost += lo
        corrupt += co
        print(
            f"round {r + 1}: acked so far {len(acked)}, read back {nread}, lost {lo}, corrupt {co}",
            flush=True,
        )
    return lost, corrupt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="10 rounds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--fd", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.fd, args.round)
        return
    rounds = 10 if args.quick else args.rounds
    directory = tempfile.mkdtemp(prefix="headwater-crash-")
    try:
        lost, corrupt = run(rounds, directory, args.seed)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(f"store_crash rounds={rounds} lost={lost} corrupt={corrupt}")


if __name__ == "__main__":
    main()

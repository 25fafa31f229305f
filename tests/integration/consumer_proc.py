"""A consumer group member for the integration tests, run as its own process.

``python -m tests.integration.consumer_proc URL ZK PG_DSN GROUP SHARDS [--hold-first S]
[--hold-in-tx] [--decode client|json|protobuf]``: consumes task ``src`` (tables ``cg.*``;
URL ``-``: the readers registered in ZooKeeper) in group GROUP with the SQL checkpoint
store on PostgreSQL; the handler inserts every change into ``applied`` and commits the
batch's checkpoint in the same transaction (exactly once). SIGTERM stops it cleanly (a
clean stop gives up after 20 s, then exit code 3).

``--hold-first S``: before handling its first batch (with ``--hold-in-tx``: after writing
it and its checkpoint, before the commit), write ``holding <shard> <epoch>`` to stdout and
sleep S seconds (the fencing test pauses the process then); every refused ack or checkpoint
prints ``fenced <shard> <epoch>``.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import signal
import sys
import threading
import time
from typing import Any

import psycopg

from headwater.client import Batch, Consumer, ConsumerOptions, SqlStore


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for name in ("url", "zk", "dsn", "group", "shards"):
        parser.add_argument(name)
    parser.add_argument("--hold-first", type=float, default=0.0)
    parser.add_argument("--hold-in-tx", action="store_true")
    parser.add_argument("--decode", default="client")
    args = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test dumps a stuck stop
    url, zk, dsn, group, hold = args.url, args.zk, args.dsn, args.group, args.hold_first
    # one connection per worker thread: a transaction is one batch of one shard. (One
    # connection shared by the shards' threads made one transaction of several shards'
    # batches: a commit or a fenced rollback of one took the others' writes with it, it
    # held several checkpoint rows at once, so it could deadlock with another member's,
    # and a failed statement left it open, its row locks held, for ever.)
    conns: dict[int, psycopg.Connection[Any]] = {}
    conns_lock = threading.Lock()

    def connection() -> psycopg.Connection[Any]:
        with conns_lock:
            conn = conns.get(threading.get_ident())  # a thread that ended left it idle
            if conn is None:
                conn = conns[threading.get_ident()] = psycopg.connect(dsn)
            return conn

    held = threading.Event()

    def hold_once(batch: Batch) -> None:
        if hold and not held.is_set():
            held.set()
            print(f"holding {batch.shard} {batch.epoch}", flush=True)
            time.sleep(hold)

    def handle(batch: Batch) -> None:
        if not args.hold_in_tx:
            hold_once(batch)
        conn = connection()
        try:
            with conn.cursor() as cur:
                for c in batch.changes:
                    image: Any = c.after if c.after is not None else c.before
                    cur.execute(
                        "INSERT INTO applied (seq, shard, pid, tbl, k, op, v) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                        (c.sequence, batch.shard, 0, c.table, json.dumps(c.key), c.op,
                         None if c.after is None else image.get("v")),
                    )  # fmt: skip
                batch.commit_checkpoint(cur)
                if args.hold_in_tx:
                    hold_once(batch)
            conn.commit()
        except BaseException:  # fenced, or any failed statement: nothing of it stays
            conn.rollback()
            raise

    store = SqlStore(lambda: psycopg.connect(dsn))
    options = ConsumerOptions(
        task="src", group=group, readers=() if url == "-" else (url,), tables=("cg.*",),
        shards=int(args.shards),
        zookeeper=zk, session_timeout=3.0, batch_size=50, ddl=False, decode=args.decode,
    )  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer = Consumer(options, handle, store).start()
    print("started", flush=True)
    reported = 0
    while not stop.is_set() and consumer.error is None:  # a failure: stop() raises it
        stop.wait(0.2)
        for shard, epoch in consumer.fenced[reported:]:
            print(f"fenced {shard} {epoch}", flush=True)
            reported += 1
    began = time.monotonic()
    consumer.stop(timeout=20.0)
    print(f"consumer_proc: stop took {time.monotonic() - began:.2f} s", file=sys.stderr, flush=True)
    store.close()
    with conns_lock:
        for conn in conns.values():
            conn.close()
    if time.monotonic() - began > 20.0:
        return 3
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

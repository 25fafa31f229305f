"""``headwater consume``: the consumer SDK from the shell.

``headwater consume run [--reader URL ...] --task T --group G [--tables db.t,...]
[--shards N] [--decode client|json|protobuf] [--start S] (--checkpoints DIR | --postgres DSN
| --zookeeper HOSTS) [--handler module:function | --to kafka|nats|redis --bus ADDRESS
[--format F] [--topic T] | --sink FILE]`` prints each change as one JSON line (or calls the
handler with each batch, or sends each batch to a message bus with the pipeline's bus
sinks' messages and acks it once the bus confirmed it: :mod:`headwater.sinks.bus.direct`)
until SIGTERM/Ctrl-C, then saves the checkpoints; with
``--zookeeper`` it joins the group there (and finds the readers there when no ``--reader``
is given). ``headwater consume reshard --group G --shards N (--checkpoints DIR | --postgres
DSN | --zookeeper HOSTS)`` changes a stopped group's shard count without loss (refused while
a member is alive in ZooKeeper; docs/consumer.md).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from typing import Any

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "consume", help="consume a task with the SDK: JSON lines, a handler or a bus"
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = actions.add_parser("run", help="consume until interrupted (Ctrl-C saves checkpoints)")
    run.add_argument(
        "--reader",
        action="append",
        default=[],
        help="reader URL (repeatable; default: the readers registered in --zookeeper)",
    )
    run.add_argument("--task", required=True)
    run.add_argument("--group", required=True, help="consumer group (checkpoints are per group)")
    run.add_argument("--tables", help="comma-separated db.table or db.* (default: all)")
    run.add_argument("--shards", type=int, default=1)
    run.add_argument("--batch-size", type=int, default=500)
    run.add_argument(
        "--decode",
        choices=("client", "json", "protobuf"),
        default="client",
        help="client: raw records decoded here; json/protobuf: rows decoded by the reader",
    )
    run.add_argument(
        "--start",
        default="earliest",
        help="where a new group starts: earliest, latest, timestamp:T, gtid:SET, FILE:OFFSET, "
        "seq:N (an existing group resumes from its checkpoints)",
    )
    _stores(run)
    # dest differs from "handler": the CLI keeps each command's function there
    run.add_argument(
        "--handler", dest="handler_module", help="module:function called with each batch"
    )
    bus = run.add_argument_group("send to a message bus (docs/sinks-bus.md)")
    bus.add_argument("--to", choices=("kafka", "nats", "redis"), help="the bus to send to")
    bus.add_argument(
        "--bus",
        metavar="ADDRESS",
        help="with --to: Kafka bootstrap servers, a nats:// URL, or Redis HOST[:PORT]",
    )
    bus.add_argument("--format", help="with --to: change_row (default), debezium or ums")
    bus.add_argument("--topic", help="with --to: topic/subject/stream name or template")
    bus.add_argument(
        "--sink",
        metavar="FILE",
        help="YAML file with one bus sink section (type: and the pipeline file's fields)",
    )
    run.set_defaults(handler=_run)
    reshard = actions.add_parser("reshard", help="change a stopped group's shard count")
    reshard.add_argument("--group", required=True)
    reshard.add_argument("--shards", type=int, required=True)
    _stores(reshard)
    reshard.set_defaults(handler=_reshard)


def _stores(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoints", help="directory of the file checkpoint store")
    p.add_argument(
        "--zookeeper",
        help="ZooKeeper hosts: group membership, and the checkpoints unless --postgres",
    )
    p.add_argument(
        "--postgres",
        metavar="DSN",
        help="checkpoints in PostgreSQL (libpq DSN without a password: PGPASSWORD or .pgpass)",
    )


def _store(args: argparse.Namespace) -> tuple[Any, Any]:
    from headwater.client import FileStore, SqlStore, ZkStore
    from headwater.coordination.zk import connect
    from headwater.errors import ConfigError

    if args.postgres and "password" in args.postgres.lower():
        # a command line is visible to every local user (ps): secrets come from libpq's env
        raise ConfigError("no password in the DSN: use PGPASSWORD or .pgpass", field="--postgres")
    zk = connect(args.zookeeper) if args.zookeeper else None
    if args.postgres:
        import psycopg

        dsn = args.postgres
        return SqlStore(lambda: psycopg.connect(dsn)), zk
    if zk is not None:
        return ZkStore(zk), zk
    if args.checkpoints:
        return FileStore(args.checkpoints), None
    raise ConfigError(
        "give --checkpoints DIR, --postgres DSN or --zookeeper HOSTS", field="checkpoints"
    )


def _print_batch(batch: Any) -> None:
    import orjson

    from headwater.binlog.dump import json_default

    out = sys.stdout.buffer
    for c in batch.changes:
        doc = {
            "shard": batch.shard, "sequence": c.sequence, "database": c.database,
            "table": c.table, "op": c.op, "ts_us": c.ts_us, "gtid": c.gtid, "key": c.key,
            "before": c.before, "after": c.after, "sql": c.sql,
        }  # fmt: skip
        out.write(orjson.dumps(doc, default=json_default) + b"\n")
    out.flush()


def _run(args: argparse.Namespace) -> int:
    from headwater.client import Consumer, ConsumerOptions
    from headwater.spark.offsets import parse_start  # pure: imports no pyspark

    handler: Any = _print_batch
    if args.handler_module:
        module, _, name = args.handler_module.partition(":")
        handler = getattr(importlib.import_module(module), name or "handle")
    writer = _bus_writer(args)
    if writer is not None:
        handler = writer
    store, zk = _store(args)
    options = ConsumerOptions(
        task=args.task, group=args.group, readers=tuple(args.reader),
        tables=tuple(args.tables.split(",")) if args.tables else None, shards=args.shards,
        batch_size=args.batch_size, decode=args.decode, start=parse_start(args.start, "--start"),
        zookeeper=args.zookeeper,
    )  # fmt: skip
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer = Consumer(options, handler, store).start()
    try:
        while not stop.is_set() and consumer.error is None:  # a failure: stop() raises it
            stop.wait(0.5)
    except KeyboardInterrupt:
        pass
    consumer.stop()
    store.close()
    if zk is not None:
        zk.stop()
        zk.close()
    return 0


def _bus_writer(args: argparse.Namespace) -> Any:
    """The bus writer of ``--to``/``--sink`` (None without them)."""
    from headwater.errors import ConfigError

    chosen = [o for o, v in (("--handler", args.handler_module), ("--to", args.to),
                             ("--sink", args.sink)) if v]  # fmt: skip
    if len(chosen) > 1:
        raise ConfigError(f"give one of {', '.join(chosen)}", field=chosen[1])
    loose = [o for o, v in (("--bus", args.bus), ("--format", args.format),
                            ("--topic", args.topic)) if v is not None]  # fmt: skip
    if loose and not args.to:
        raise ConfigError("only with --to", field=loose[0])
    if args.sink:
        from headwater.sinks.bus.direct import load_sink_file

        return load_sink_file(args.sink, group=args.group, shards=args.shards)
    if not args.to:
        return None
    from headwater.sinks.bus.direct import BUS_KINDS, bus_writer

    if not args.bus:
        raise ConfigError(f"required with --to {args.to}", field="--bus")
    fields: dict[str, Any] = {BUS_KINDS[args.to]: args.bus}
    if args.to == "redis":
        host, _, port = args.bus.rpartition(":") if ":" in args.bus else (args.bus, "", "")
        if port and not port.isdigit():
            raise ConfigError(f"expected HOST[:PORT], got {args.bus!r}", field="--bus")
        fields = {"host": host, **({"port": int(port)} if port else {})}
    fields.update({k: v for k, v in (("format", args.format), ("topic", args.topic)) if v})
    return bus_writer(args.to, fields, group=args.group, shards=args.shards, where="--to")


def _reshard(args: argparse.Namespace) -> int:
    from headwater.coordination.groups import require_no_members

    store, zk = _store(args)
    if zk is not None:
        require_no_members(zk, args.group)
    state = store.reshard(args.group, args.shards)
    print(f"group {args.group}: {state.count} shards from sequence {min(state.next.values())}")
    store.close()
    if zk is not None:
        zk.stop()
        zk.close()
    return 0

"""``headwater snapshot --config pipeline.yaml --tables db.t1,db.t2 --source mysql://...``.

Runs a snapshot of the given tables into the pipeline's sinks (through its transforms) on
local Spark (or ``--master``), printing a progress line per wave to stderr and the result
as one JSON line on stdout. The source connection is given here (the pipeline
configuration has none): ``--source mysql://USER@HOST:PORT`` and the password from
``--password-file`` or ``HEADWATER_SOURCE_PASSWORD``. The state file (default
``<checkpoint>/snapshot.json``) makes a killed snapshot resume at chunk granularity when
the same command runs again.

``--mode``: ``snapshot_only`` (default: snapshot, exit), ``initial`` / ``when_needed``
(snapshot if needed, then run the pipeline from the record after it, like
``headwater pipeline run``), ``never`` (just run the pipeline).

``--signal``: re-snapshot the tables in a pipeline that is running: nothing is read here;
a snapshot signal is inserted into the source's signal table, and the running pipeline
(whose configuration has a ``snapshot`` section) pauses its stream, snapshots the tables
and resumes (docs/operations.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from types import FrameType
from urllib.parse import urlsplit

import orjson

from headwater.connections import SourceConnection

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    snap = sub.add_parser(
        "snapshot",
        help="snapshot tables into a pipeline's sinks, consistent with the change log",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    snap.add_argument("--config", required=True, metavar="FILE", help="pipeline YAML configuration")
    snap.add_argument("--tables", required=True, metavar="DB.T,...", help="tables to snapshot")
    snap.add_argument(
        "--source", required=True, metavar="URL", help="mysql://USER@HOST:PORT of the source"
    )
    snap.add_argument("--password-file", metavar="PATH", help="source password file (first line)")
    snap.add_argument(
        "--state", metavar="FILE", help="state file (default <checkpoint>/snapshot.json)"
    )
    snap.add_argument("--chunk-rows", type=int, default=50_000, metavar="N", help="rows per chunk")
    snap.add_argument("--wave-chunks", type=int, default=0, metavar="N",
                      help="chunks per wave (default: twice Spark's parallelism)")  # fmt: skip
    snap.add_argument("--timeout", type=float, default=60.0, metavar="S",
                      help="longest wait for the reader to store a chunk's window")  # fmt: skip
    snap.add_argument("--key", action="append", default=[], metavar="DB.T=C1,C2",
                      help="chunk key (a unique key) of a table without a primary key")  # fmt: skip
    snap.add_argument("--mode", default="snapshot_only",
                      choices=("initial", "never", "when_needed", "snapshot_only"))  # fmt: skip
    snap.add_argument(
        "--signal",
        action="store_true",
        help="do not snapshot here: insert a snapshot signal for --tables into the source's"
        " signal table (the config's snapshot.signal_table) for the running pipeline",
    )
    snap.add_argument("--master", metavar="URL", help="Spark master (default: the config's)")
    snap.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    snap.set_defaults(handler=_run)


def _connection(args: argparse.Namespace) -> SourceConnection:
    from headwater.errors import ConfigError

    url = urlsplit(args.source)
    if url.scheme not in ("mysql", "mariadb") or not url.hostname:
        raise ConfigError(f"expected mysql://USER@HOST:PORT, got {args.source!r}", field="--source")
    return SourceConnection(
        host=url.hostname,
        port=url.port or 3306,
        user=url.username or "root",
        password_file=args.password_file,
        password_env=(
            "HEADWATER_SOURCE_PASSWORD"
            if not args.password_file and "HEADWATER_SOURCE_PASSWORD" in os.environ
            else None
        ),
    )


def _run(args: argparse.Namespace) -> int:
    from headwater.errors import ConfigError
    from headwater.pipeline.config import load_pipeline_config
    from headwater.pipeline.runner import PIPELINE_SPARK_CONF, PipelineRunner
    from headwater.pipeline.snapshots import run_snapshot, snapshot_log, stream_config
    from headwater.snapshot.modes import plan_snapshot, stored_position
    from headwater.snapshot.runner import SnapshotOptions
    from headwater.spark.session import build_session, spark_log_level

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # (py4j logs an executor error's whole trace; the one error line says it)
    logging.getLogger("py4j").setLevel(
        logging.WARNING if args.log_level == "debug" else logging.CRITICAL
    )
    config = load_pipeline_config(args.config)
    if args.signal:
        from headwater.snapshot.signals import SIGNAL_TABLE, send_signal

        table = config.snapshot.signal_table if config.snapshot is not None else SIGNAL_TABLE
        tables = [t.strip() for t in args.tables.split(",") if t.strip()]
        ident = send_signal(_connection(args), tables, table=table)
        sys.stdout.write(orjson.dumps({"signal": ident, "table": table, "tables": tables}).decode())
        sys.stdout.write("\n")
        return 0
    if args.mode == "snapshot_only" and stored_position(config.checkpoint) is not None:
        raise ConfigError(
            f"pipeline {config.name} has already streamed (its checkpoint holds offsets): a"
            " snapshot run here would make its SQL sinks skip other tables' changes;"
            " re-snapshot it with --signal (its configuration needs a snapshot section)",
            field="--mode",
        )
    keys = []
    for item in args.key:
        table, eq, cols = item.partition("=")
        if not eq:
            raise ConfigError(f"expected DB.T=C1,C2, got {item!r}", field="--key")
        keys.append((table, tuple(c.strip() for c in cols.split(","))))
    options = SnapshotOptions(args.chunk_rows, args.wave_chunks, args.timeout, tuple(keys))
    master = args.master or config.master
    spark = build_session(
        master,
        f"headwater-snapshot-{config.name}",
        conf={**PIPELINE_SPARK_CONF, **dict(config.spark_conf)},
    )
    spark.sparkContext.setLogLevel(spark_log_level(args.log_level))
    from headwater.pipeline.sharedpaths import check_shared

    check_shared(spark, config)  # on a cluster: file sinks' paths are shared (cluster.md)
    run_config = config
    if plan_snapshot(args.mode, checkpoint=config.checkpoint, log=snapshot_log(config)):
        result = run_snapshot(
            spark, config, connection=_connection(args),
            tables=args.tables, state_path=args.state, options=options,
        )  # fmt: skip
        sys.stdout.write(
            orjson.dumps(
                {"snapshot_id": result.snapshot_id, "rows": result.rows,
                 "starting_position": result.starting_position, "progress": result.progress}
            ).decode() + "\n"
        )  # fmt: skip
        sys.stdout.flush()
        run_config = stream_config(config, result)
    if args.mode == "snapshot_only":
        return 0
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return PipelineRunner(run_config, spark=spark).run(stop=stop)

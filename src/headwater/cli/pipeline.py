"""``headwater pipeline run --config FILE [--master URL] [--available-now]``.

Runs one Spark pipeline (:mod:`headwater.pipeline.runner`) in the foreground: local Spark by
default (the configuration's ``spark.master``, else ``local[2]``), ``--master`` for a
cluster. A progress line goes to stderr every ``progress`` seconds. ``SIGTERM`` or
``SIGINT`` stops the query after the running micro-batch and exits 0; a restart resumes
from the checkpoint location. ``--available-now`` processes what the change log holds at
start, then exits 0. A failing query exits 2 with one ``headwater: error:`` line.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pipeline = sub.add_parser(
        "pipeline",
        help="run Spark pipelines from change logs to sinks",
        description="Spark pipelines: headwater source -> transforms -> sinks.",
    )
    actions = pipeline.add_subparsers(dest="pipeline_command", metavar="COMMAND", required=True)
    run = actions.add_parser(
        "run",
        help="run a pipeline in the foreground (SIGTERM stops it after the current batch)",
    )
    run.add_argument("--config", required=True, metavar="FILE", help="pipeline YAML configuration")
    run.add_argument(
        "--master", metavar="URL", help="Spark master (default: the config's, else local[2])"
    )
    run.add_argument(
        "--available-now",
        action="store_true",
        help="process what the change log holds now, then exit",
    )
    run.add_argument(
        "--log-level",
        default="warning",
        choices=("debug", "info", "warning", "error"),
        help="logging level (default warning)",
    )
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    # First of all: a SIGTERM while Spark and the query start up must stop cleanly too.
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    from headwater.pipeline.config import load_pipeline_config
    from headwater.pipeline.runner import PipelineRunner

    config = load_pipeline_config(args.config)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.log_level != "debug":
        # py4j logs a foreachBatch error with its whole traceback; the command's one
        # headwater: error: line says it (the trace: --log-level debug)
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
    if stop.is_set():
        return 0
    runner = PipelineRunner(config, master=args.master)
    from headwater.spark.session import spark_log_level

    runner.spark.sparkContext.setLogLevel(spark_log_level(args.log_level))
    return runner.run(available_now=args.available_now, stop=stop)

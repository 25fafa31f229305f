"""``headwater demo [--keep] [--rows N] [--seconds S]``: the main job on an embedded default.

Report lines go to stdout, the last one ``demo verified tables=<n> rows=<m>
mismatches=<k>``; progress goes to stderr (one updating line on a terminal). Exit status
0 when every target table equals its source, 1 on a mismatch, 2 when a step fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["register"]

_EPILOG = """\
steps: sandbox MariaDB source (binlog on) and target in a temporary directory; the shop
schema with --rows rows; a reader; a snapshot of the shop through the Spark pipeline
into the target and a Parquet change log while a live workload runs for --seconds; the
stream after it; catch-up; headwater verify of every table; the report.

exit status:
  0    every target table equals its source
  1    a mismatch (the differing keys are printed)
  2    a step failed (its error is printed)
  130  interrupted
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo",
        help="run the whole job on throwaway servers and verify the result (make demo)",
        description=(
            "Run headwater end to end on this machine: capture, snapshot, stream, verify. "
            "Needs mariadbd and Java (make demo installs them); takes one to two minutes."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--keep", action="store_true", help="keep the directory and the servers")
    p.add_argument("--rows", type=int, default=2000, metavar="N", help="initial rows (2000)")
    p.add_argument(
        "--seconds", type=float, default=30.0, metavar="S", help="workload duration (30)"
    )
    p.add_argument(
        "--rate", type=float, default=100.0, metavar="TPS", help="workload transactions/s (100)"
    )
    p.add_argument(
        "--dir", type=Path, metavar="PATH", help="work directory (default: a new temp dir)"
    )
    p.add_argument(
        "--alter-target",
        action="append",
        default=[],
        metavar="SQL",
        help="run SQL on the target's shop database before verifying, behind the "
        "pipeline's back (verify then reports the keys it touched; exit 1)",
    )
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import logging
    import warnings

    from headwater.demo import DemoOptions, run_demo

    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    logging.getLogger("py4j").setLevel(logging.ERROR)
    options = DemoOptions(
        rows=args.rows,
        seconds=args.seconds,
        rate=args.rate,
        keep=args.keep,
        alter_target=tuple(args.alter_target),
        workdir=args.dir,
    )
    return run_demo(options, sys.stdout, sys.stderr)

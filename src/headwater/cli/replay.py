"""``headwater replay --log DIR --tables db.t,... --as-of POS --output DIR``.

Rebuilds the tables' state as of a point of a reader task's change log on Spark (local
mode by default) and writes one Parquet file set per table (:mod:`headwater.replay`),
or, with ``--sink-config PIPELINE.yaml``, into the SQL table of that pipeline file's sink
(its first ``sinks`` entry, or ``--sink N``). Prints one line per table
(``shop.orders rows=1000 -> out/shop.orders``) and, last,
``replay tables=<n> rows=<m> seconds=<s> end_seq=<seq>``.
"""

from __future__ import annotations

import argparse

__all__ = ["register"]

_EPILOG = """\
positions (--as-of, --base-position):
  gtid:SET             after exactly the transactions of SET (MariaDB d-s-n, MySQL uuid:1-n)
  FILE:OFFSET          before the transaction at or after that binlog coordinate
  timestamp:T          before the first transaction committed at or after T (ISO 8601, UTC)
  seq:N                before store record N
  latest               the log's end (default)

a base image (--base DIR --base-position POS): DIR/<db>.<table> holds the table's rows
as Parquet, taken at POS (an earlier replay's output is one: its _replay.json names
end_seq, so --base-position seq:<end_seq>). Without a base the log must hold the
table's whole history.

into a database (--sink-config FILE instead of --output): a pipeline file's sink
(type mysql or postgres; sinks[N] with --sink N, default 0) receives each table's rows
as snapshot (read) rows; give the target a new or empty table (create_tables: true
creates it with the definition at the point).

exit status:
  0    replayed
  2    error: a table unknown at the point or without a primary key, a point past the
       log's end, row images that are not FULL, bad usage
  130  interrupted
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "replay",
        help="rebuild tables as of a point of the change log, in parallel on Spark, to Parquet",
        description=(
            "Rebuild the state of chosen tables as of a position of a reader task's\n"
            "change log (point-in-time recovery without a server): from empty, or from\n"
            "a base image plus the log after it. Primary-key updates (chains, swaps,\n"
            "deletes and reinserts) and schema changes on the way are applied; the\n"
            "apply runs in parallel on Spark, partitioned by key hash (docs/replay.md)."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--log", required=True, metavar="DIR", help="a reader task directory")
    p.add_argument("--tables", required=True, metavar="DB.T,...", help="tables to rebuild")
    p.add_argument("--as-of", default="latest", metavar="POS", help="the point (default latest)")
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--output", metavar="DIR", help="where the Parquet goes")
    out.add_argument(
        "--sink-config", metavar="FILE", help="a pipeline file whose SQL sink receives the rows"
    )
    p.add_argument("--sink", type=int, default=0, metavar="N", help="which sinks[N] (default 0)")
    p.add_argument("--base", metavar="DIR", help="a base image directory (DIR/<db>.<table>)")
    p.add_argument("--base-position", metavar="POS", help="the position the base was taken at")
    p.add_argument("--partitions", type=int, metavar="N", help="parallel partitions")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.set_defaults(handler=_run)


def _sink(path: str, index: int) -> object:
    from headwater.errors import ConfigError
    from headwater.pipeline.config import load_pipeline_config
    from headwater.pipeline.sinks import build_sink

    config = load_pipeline_config(path)
    if not 0 <= index < len(config.sinks):
        raise ConfigError(
            f"the file has {len(config.sinks)} sinks, no sinks[{index}]", file=path, field="sinks"
        )
    section = config.sinks[index]
    if section.type not in ("mysql", "postgres"):
        raise ConfigError(
            f"replay writes into mysql or postgres sinks, not {section.type!r}",
            file=path,
            line=section.line,
            field=f"{section.path}.type",
        )
    return build_sink(section, config)


def _run(args: argparse.Namespace) -> int:
    from headwater.replay import replay_to_parquet, replay_to_sink
    from headwater.spark.session import build_session

    tables = [t.strip() for t in str(args.tables).split(",") if t.strip()]
    sink = None if args.sink_config is None else _sink(args.sink_config, args.sink)
    spark = build_session(args.master, "headwater-replay")
    common = {
        "as_of": args.as_of,
        "base": args.base,
        "base_position": args.base_position,
        "partitions": args.partitions,
    }
    try:
        if sink is None:
            result = replay_to_parquet(spark, args.log, tables, args.output, **common)
        else:
            result = replay_to_sink(spark, args.log, tables, sink, **common)
    finally:
        spark.stop()
    for t in result.tables:
        print(f"{t.table} rows={t.rows} -> {t.path}")
    total = sum(t.rows for t in result.tables)
    print(
        f"replay tables={len(result.tables)} rows={total} seconds={result.seconds} "
        f"end_seq={result.end_seq}"
    )
    return 0

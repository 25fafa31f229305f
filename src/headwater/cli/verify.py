"""``headwater verify --source URL --target URL [--tables db.t1,db.t2] [--map src=dst]``.

Prints one line per table (``shop.orders -> shop_copy.orders: rows=1000 chunks=1 equal``),
then each differing key (``  missing in target: id=5``, ``  extra in target: id=7``,
``  different: id=9 (amount, note)``), and as the last line
``verify tables=<n> rows=<m> mismatches=<k>``. Exit status 0 when every table is equal,
1 when any differs, 2 on errors (unreachable server, no primary key, bad options).
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["EXIT_DIFFERENT", "register"]

EXIT_DIFFERENT = 1

_EPILOG = """\
passwords: never in the URL; --source-password-file / --target-password-file (first line),
else the HEADWATER_SOURCE_PASSWORD / HEADWATER_TARGET_PASSWORD environment variables.

exit status:
  0    every table equal
  1    some table differs (the differing keys are printed)
  2    error: a server refused, a table has no primary key, bad usage
  130  interrupted
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "verify",
        help="compare source and target tables by chunked checksums; print differing keys",
        description=(
            "Compare tables on two servers (MySQL/MariaDB or PostgreSQL) chunk by chunk "
            "over primary key ranges, like pt-table-checksum, and print the keys that are "
            "missing in the target, extra in the target, or different. Values are "
            "compared by a canonical text that is the same across products, so a "
            "MariaDB table and its PostgreSQL copy compare equal when their values are."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--source", required=True, metavar="URL", help="mysql://USER@HOST:PORT[/DB] (the truth)"
    )
    p.add_argument(
        "--target",
        required=True,
        metavar="URL",
        help="mysql://USER@HOST:PORT or postgresql://USER@HOST:PORT/DBNAME",
    )
    p.add_argument(
        "--tables",
        metavar="DB.T,...",
        help="tables to compare (default: every table of the source URL's database)",
    )
    p.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="SRC=DST",
        help="source database -> target database (PostgreSQL: schema); repeatable",
    )
    p.add_argument(
        "--chunk-size", type=int, default=1000, metavar="N", help="rows per chunk (default 1000)"
    )
    p.add_argument(
        "--max-keys",
        type=int,
        default=100,
        metavar="N",
        help="print at most N differing keys per table (default 100)",
    )
    p.add_argument("--source-password-file", metavar="PATH")
    p.add_argument("--target-password-file", metavar="PATH")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from headwater.errors import ConfigError
    from headwater.verify import VerifyOptions, parse_endpoint, verify
    from headwater.verify.report import print_report

    source = parse_endpoint(args.source, role="source", password_file=args.source_password_file)
    target = parse_endpoint(args.target, role="target", password_file=args.target_password_file)
    mapping = []
    for item in args.map:
        a, eq, b = item.partition("=")
        if not eq or not a or not b:
            raise ConfigError(f"expected SRC=DST, got {item!r}", field="map")
        mapping.append((a, b))
    tables = tuple(t.strip() for t in (args.tables or "").split(",") if t.strip())
    options = VerifyOptions(tables=tables, database_map=tuple(mapping), chunk_size=args.chunk_size)
    report = verify(source, target, options)
    print_report(report, sys.stdout, max_keys=args.max_keys)
    return EXIT_DIFFERENT if report.mismatches else 0

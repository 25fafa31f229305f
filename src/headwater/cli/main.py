"""The ``headwater`` command line: argparse with subcommands.

Each command group is a ``_register_*`` function that adds its subparsers and sets
``handler`` (``args -> exit status``) on each leaf; :data:`_COMMAND_GROUPS` lists them, so a
new command plugs in by adding one function. :func:`main` maps outcomes to exit statuses:

* 0: success
* 2: a headwater error (bad input file, server refused, ...) or an unreadable file, shown
  as one ``headwater: error: ...`` line on stderr with no traceback (the traceback too
  with ``--log-level debug``); an error that Spark wraps (raised on an executor) the same
  way, by the headwater error inside it (:mod:`headwater.pipeline.failures`); usage
  errors (argparse) also exit 2
* 130: interrupted (Ctrl-C)

Passwords are never printed: not in errors, not in ``--help`` defaults.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from headwater import __version__
from headwater.errors import HeadwaterError
from headwater.position import BinlogCoordinate, parse_gtid_set

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130

_EPILOG = """\
commands:
  reader run|status      capture changes from MySQL/MariaDB into change logs
  pipeline run           Spark pipeline: change log -> transforms -> sinks
  snapshot               snapshot tables into a pipeline's sinks, consistent with the log
  binlog dump            print binlog events, from files or a live server
  verify                 compare source and target tables; print differing keys
  replay                 rebuild tables as of a point of the change log (to Parquet)
  logs preview           run a log source's rule-operator groups on sample lines
  demo                   the whole job on throwaway servers, verified (make demo)
run 'headwater COMMAND --help' for each.

exit status:
  0    success
  1    verify / demo: a source and target table differ (the keys are printed)
  2    error: unreadable or corrupt input (the message names file, offset and event
       type), a refused connection, or bad usage
  130  interrupted
"""

Handler = Callable[[argparse.Namespace], int]


class _UsageError(Exception):
    """A combination of options argparse cannot check by itself."""


def _register_binlog(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    binlog = sub.add_parser(
        "binlog",
        help="read MySQL/MariaDB binary logs",
        description="Read MySQL/MariaDB binary logs.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = binlog.add_subparsers(dest="binlog_command", metavar="COMMAND", required=True)
    dump = actions.add_parser(
        "dump",
        help="print the events of binlog files (or of a server) one per line",
        description=(
            "Print every event of the given binlog files, in order, one line each; rows "
            "events give one line per changed row (db, table, op, before, after). Like "
            "mysqlbinlog -v, but machine-readable with --json (value rendering: "
            "docs/formats.md, 'binlog dump output'). Gzip-compressed files are read too."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dump.add_argument("files", nargs="*", metavar="FILE", help="binlog or relay log files")
    dump.add_argument(
        "--start",
        type=_offset,
        default=4,
        metavar="POS",
        help="byte offset of the first event to print, in the first FILE (default 4)",
    )
    dump.add_argument(
        "--json", action="store_true", help="one JSON object per line instead of the text format"
    )
    live = dump.add_argument_group(
        "live mode", "read from a server as a replica instead of from files"
    )
    live.add_argument("--source", metavar="URL", help="mysql://user@host:port of the source server")
    live.add_argument(
        "--from",
        dest="from_",
        type=BinlogCoordinate.parse,
        metavar="FILE:POS",
        help="binlog coordinate to start at (default: the server's current)",
    )
    live.add_argument(
        "--gtid",
        type=parse_gtid_set,
        metavar="SET",
        help="start after these GTIDs (MySQL uuid:1-5 or MariaDB domain-server-seq)",
    )
    live.add_argument(
        "--server-id",
        type=_positive,
        metavar="N",
        help="replica server_id to register with (must be unique)",
    )
    live.add_argument(
        "--follow",
        action="store_true",
        help="keep waiting for new events at the end of the log (default: stop there)",
    )
    live.add_argument(
        "--password-file",
        metavar="PATH",
        help="file whose first line is the password (else the "
        "HEADWATER_SOURCE_PASSWORD environment variable)",
    )
    dump.set_defaults(handler=_binlog_dump)


def _register_reader(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from headwater.cli.reader import register

    register(sub)


def _register_pipeline(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from headwater.cli.pipeline import register

    register(sub)


def _register_snapshot(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from headwater.cli.snapshot import register

    register(sub)


def _register_verify(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from headwater.cli.verify import register

    register(sub)


def _register_consume(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from headwater.cli.consume import register

    register(sub)


def _register_replay(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from headwater.cli.replay import register

    register(sub)


def _register_logs(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from headwater.cli.logs import register

    register(sub)


def _register_demo(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from headwater.cli.demo import register

    register(sub)


_COMMAND_GROUPS: list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = [
    _register_binlog,
    _register_reader,
    _register_pipeline,
    _register_snapshot,
    _register_verify,
    _register_consume,
    _register_replay,
    _register_logs,
    _register_demo,
]


def _offset(text: str) -> int:
    if not text.isdigit() or int(text) < 4:
        raise argparse.ArgumentTypeError(f"expected a byte offset >= 4, got {text!r}")
    return int(text)


def _positive(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 2**32:
        raise argparse.ArgumentTypeError(f"expected an integer in 1..4294967295, got {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headwater",
        description="Change data capture for MySQL and MariaDB.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for register in _COMMAND_GROUPS:
        register(sub)
    return parser


def _binlog_dump(args: argparse.Namespace) -> int:
    from headwater.binlog.dump import dump_files

    live_options = [
        name
        for name, value in (
            ("--from", args.from_),
            ("--gtid", args.gtid),
            ("--server-id", args.server_id),
            ("--password-file", args.password_file),
            ("--follow", args.follow or None),
        )
        if value is not None
    ]
    if args.source is not None:
        if args.files:
            raise _UsageError("give FILE arguments or --source, not both")
        _check_source_url(args.source)
        if args.server_id is None:
            raise _UsageError("--source needs --server-id N, unique among the source's replicas")
        if args.from_ is not None and args.gtid is not None:
            raise _UsageError("give --from or --gtid, not both")
        return _binlog_dump_live(args)
    if live_options:
        raise _UsageError(f"{', '.join(live_options)} only apply with --source")
    if not args.files:
        raise _UsageError("give at least one FILE (or --source URL)")
    out = sys.stdout.buffer
    sys.stdout.flush()
    dump_files(args.files, out, start=args.start, as_json=args.json)
    return EXIT_OK


def _binlog_dump_live(args: argparse.Namespace) -> int:
    from headwater.binlog.client import BinlogClient, options_from_url
    from headwater.binlog.dump import dump_live

    options = options_from_url(
        args.source,
        server_id=args.server_id,
        password_file=args.password_file,
        start=args.gtid if args.gtid is not None else args.from_,
        blocking=args.follow,
    )
    sys.stdout.flush()
    with BinlogClient(options) as client:
        dump_live(client, sys.stdout.buffer, as_json=args.json)
    return EXIT_OK


def _check_source_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
        raise _UsageError("--source: expected mysql://user@host:port")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise _UsageError("--source: bad port") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``headwater`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except _UsageError as e:
        parser.exit(EXIT_ERROR, f"headwater: error: {e}\n")
    except HeadwaterError as e:
        _debug_trace(args)
        _error(_one_line(str(e)))
    except OSError as e:
        if isinstance(e, BrokenPipeError):
            # The reader went away (| head): not an error. Keep Python from complaining
            # again when it flushes stdout at exit.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return EXIT_OK
        where = f"{e.filename}: " if e.filename else ""
        _error(f"{where}{e.strerror or e}")
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as e:
        # Spark's wrappers of an executor's error (a snapshot's collect(), a query):
        # one line like every other error; the trace at --log-level debug only.
        from headwater.pipeline.failures import is_spark_error, spark_failure

        if not is_spark_error(e):
            raise
        _debug_trace(args)
        _error(spark_failure(e))
    return EXIT_ERROR


def _debug_trace(args: argparse.Namespace) -> None:
    """The traceback of the error being handled, for commands run with --log-level debug."""
    if getattr(args, "log_level", None) == "debug":
        import traceback

        traceback.print_exc(file=sys.stderr)


def _one_line(message: str) -> str:
    # A SinkError's statement may span lines: the error stays one line.
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def _error(message: str) -> None:
    print(f"headwater: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

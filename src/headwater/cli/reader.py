"""``headwater reader run --config FILE`` and ``headwater reader status --config FILE``.

``run`` runs the reader service in the foreground, logging to stderr, until SIGTERM or
SIGINT; it then stops reading, flushes and acknowledges the change logs, persists each
task's resume point and exits 0. ``status`` reads each task's persisted state from its data
directory (it works while the reader runs, from another process) and prints one line per
task, or a JSON document with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

__all__ = ["register"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reader = sub.add_parser(
        "reader",
        help="capture changes from sources into change logs",
        description="The reader service: one task per source in the configuration file.",
    )
    actions = reader.add_subparsers(dest="reader_command", metavar="COMMAND", required=True)
    run = actions.add_parser(
        "run",
        help="run the reader in the foreground (logs to stderr; SIGTERM stops it cleanly)",
    )
    run.add_argument("--config", required=True, metavar="FILE", help="reader YAML configuration")
    run.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="logging level (default info)",
    )
    run.add_argument(
        "--zookeeper",
        metavar="HOSTS",
        help="run as a member of a reader cluster (host:port,...): one leader per task "
        "captures, the others follow its change log and take over (docs/operations.md)",
    )
    run.add_argument("--member", help="this member's name in the cluster (default: its URL)")
    run.add_argument(
        "--advertise", metavar="URL", help="the URL other members and consumers reach it at"
    )
    run.set_defaults(handler=_run)
    status = actions.add_parser(
        "status", help="show each task's persisted position, GTID set, change id and state"
    )
    status.add_argument("--config", required=True, metavar="FILE", help="reader YAML configuration")
    status.add_argument("--json", action="store_true", help="print one JSON document")
    status.add_argument(
        "--zookeeper", metavar="HOSTS", help="also show each task's cluster: leader, epoch, members"
    )
    status.set_defaults(handler=_status)


def _run(args: argparse.Namespace) -> int:
    from headwater.config import load_reader_config
    from headwater.reader.service import ReaderService

    config = load_reader_config(args.config)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    service = ReaderService(
        config, zookeeper=args.zookeeper, member=args.member, advertise=args.advertise
    )
    return service.run()


def _status(args: argparse.Namespace) -> int:
    from headwater.config import load_reader_config
    from headwater.reader.task import read_task_status

    config = load_reader_config(args.config)
    tasks = [{"name": s.name, **read_task_status(config.task_dir(s.name))} for s in config.sources]
    if args.zookeeper:
        from headwater.coordination.leadership import cluster_view
        from headwater.coordination.zk import connect

        zk = connect(args.zookeeper)
        try:
            for t in tasks:
                t["cluster"] = cluster_view(zk, t["name"])
        finally:
            zk.stop()
            zk.close()
    if args.json:
        print(json.dumps({"tasks": tasks}, indent=2, sort_keys=True))
        return 0
    for t in tasks:
        print(_line(t))
        if t.get("cluster"):
            print(_cluster_lines(t["cluster"]))
    return 0


def _cluster_lines(c: dict[str, Any]) -> str:
    lines = [f"  cluster: leader={c['leader'] or '-'} epoch={c['epoch'] or '-'}"]
    for name, m in c["members"].items():
        lag = "-" if m.get("lag") is None else m["lag"]
        lines.append(f"    {name}: {m.get('role')} seq={m.get('seq')} lag={lag} url={m.get('url')}")
    return "\n".join(lines)


def _line(t: dict[str, Any]) -> str:
    parts = [
        f"{t['name']}: {t.get('state', '?')}",
        f"position={t.get('position')}",
        f"change_id={t.get('change_id', 0)}",
        f"gtid_set={t.get('gtid_set') or '-'}",
        f"stored_seq={t.get('stored_seq', 0)}",
    ]
    if t.get("lag_s") is not None:
        parts.append(f"lag={t['lag_s']:.3f}s")
    if t.get("error"):
        parts.append(f"error={t['error']}")
    return " ".join(parts)

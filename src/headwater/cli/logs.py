"""``headwater logs preview --config PIPELINE.yaml --sample FILE``.

Runs the rule-operator groups of a pipeline file's ``source.logs`` section on the
records of a sample file with the Python engine and prints, for each group and each of
its operators, the table of that operator's output, then which group took each record
(or why it went to the unknown table): :mod:`headwater.logs.preview`. Reads no log
directory, writes nothing, starts no Spark.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["register"]

_EPILOG = """\
output:
  group NAME -> table T          one block per group, in order
    after I:OPERATOR:            the fields after operator I, one row per record that
                                 reached it (records an earlier group took are not there)
    stopped here: N rejected     records that left the group at this operator
  records:                       each record: its table, the group or the reason, values

exit status:
  0    previewed
  2    error: a bad pipeline file or rule (named by file, line and field), no
       source.logs section, an unreadable sample
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    logs = sub.add_parser(
        "logs",
        help="log data as a source: preview the rule-operator groups on sample lines",
        description="Log data as a source (docs/logs.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = logs.add_subparsers(dest="logs_command", metavar="COMMAND", required=True)
    p = actions.add_parser(
        "preview",
        help="run the groups on a sample file and print each operator's output",
        description=(
            "Run the groups of a pipeline file's source.logs section on the records of a\n"
            "sample file (cut into lines or multi-line records as the pipeline cuts them)\n"
            "and print, for each operator, its output table, then which group took each\n"
            "record. The same engine the Spark engine is tested against."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", required=True, metavar="FILE", help="the pipeline file")
    p.add_argument("--sample", required=True, metavar="FILE", help="sample log lines")
    p.add_argument(
        "--limit", type=int, default=200, metavar="N", help="preview the first N records (200)"
    )
    p.set_defaults(handler=_preview)


def _preview(args: argparse.Namespace) -> int:
    from headwater.errors import ConfigError
    from headwater.logs.files import records_of
    from headwater.logs.preview import preview
    from headwater.pipeline.config import load_pipeline_config

    config = load_pipeline_config(args.config)
    logs = config.source.logs
    if logs is None:
        raise ConfigError("the pipeline's source has no logs section", field="source.logs")
    with open(args.sample, "rb") as f:
        data = f.read()
    records: list[tuple[int, str]] = []
    for off, raw in records_of(data, logs.record_start):
        if len(records) >= args.limit:
            break
        records.append((off, raw.decode("utf-8", "replace")))
    _, text = preview(logs.rules, records, file=str(args.sample))
    sys.stdout.write(text)
    return 0

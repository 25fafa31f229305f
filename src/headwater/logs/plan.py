"""The rule-operator groups as Spark SQL: log records in, change rows out.

Input: a DataFrame of records (``file`` string, ``file_num`` int, ``offset`` bigint,
``raw`` string, ``read_us`` bigint), as :mod:`headwater.logs.source` reads them. Output:
change rows (:mod:`headwater.changes.schema`), so the pipeline's transforms and sinks take
them unchanged:

* ``op`` insert; ``source`` the log source's name; ``database`` its configured database;
  ``table`` the table the record was routed to. The UMS namespace of a row is
  ``source.database.table``;
* ``sequence`` = ``ums_id_`` = ``file_num << 40 | offset`` (:mod:`headwater.logs.files`),
  position ``(0, file_num, offset, 0)``; ``key`` is ``{"ums_id_": N}``;
* ``after`` the typed columns as JSON (timestamps as ``YYYY-MM-DD HH:MM:SS.ffffff`` UTC),
  with ``ums_id_`` and ``ums_ts_`` (the group's event time; null when it has none);
* ``ts_us``/``commit_ts``: the event time, else when the batch was cut (``read_us``).

Everything is column expressions (``regexp_extract``, ``split``, ``get_json_object``,
``try_make_timestamp``...): they run in the JVM on every executor, vectorized per
partition, with no Python worker per row. The routing is the Python engine's
(:meth:`headwater.logs.groups.LogRules.route`) step for step: for each group, the first
operator that rejects or fails decides, in operator order.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from headwater.changes.schema import CHANGE_COLUMNS
from headwater.logs.files import OFFSET_BITS
from headwater.logs.groups import Group, LogRules
from headwater.logs.operators import Timestamp, java_regex

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["RECORD_SCHEMA_DDL", "group_outcome", "structure"]

#: The records a log source reads.
RECORD_SCHEMA_DDL = "`file` string, `file_num` int, `offset` bigint, `raw` string, `read_us` bigint"
_TS_FORMAT = "yyyy-MM-dd HH:mm:ss.SSSSSS"
_OK = "OK"
#: nulls are written (a missing column would mean "not in the image" to a sink)
_JSON = {"ignoreNullFields": "false"}
_REJECT = "REJECT"


def group_outcome(df: DataFrame, group: Group, prefix: str) -> tuple[DataFrame, dict[str, Column]]:
    """``df`` with the column ``prefix`` (``OK``, ``REJECT`` or the failure reason: the
    first operator, in order, that rejects or fails decides) and the group's fields.

    Each operator's fields are materialized as columns before the next one reads them:
    Spark does not inline an expensive expression that is used more than once
    (``CollapseProject``), so each regex runs once per record, not once per use."""
    from pyspark.sql import functions as F

    fields: dict[str, Column] = {"raw": F.col("raw")}
    status = F.col(prefix)
    df = df.withColumn(prefix, F.lit(_OK))
    for i, op in enumerate((*group.operators, group.final_cast)):
        fields, reject, fail = op.columns(fields)
        label = f"{i}:{op.kind}" if i < len(group.operators) else "columns"
        new = status
        decide: Any = F.when(status != F.lit(_OK), status)
        if reject is not None:
            decide = decide.when(reject, F.lit(_REJECT))
        for cond, reason in fail or ():
            text = f"group {group.name}, operator {label}: {reason}"
            decide = decide.when(F.coalesce(cond, F.lit(False)), F.lit(text))
        new = decide.otherwise(status)
        names = {n: f"{prefix}_{i}_{n}" for n in fields if n != "raw"}
        df = df.withColumns({**{names[n]: c for n, c in fields.items() if n != "raw"}, prefix: new})
        fields = {"raw": F.col("raw"), **{n: F.col(c) for n, c in names.items()}}
    return df, fields


def _render(value: Column, kind: str) -> Column:
    from pyspark.sql import functions as F

    return F.date_format(value, _TS_FORMAT) if kind == "timestamp" else value


def structure(records: DataFrame, rules: LogRules, *, source: str, database: str) -> DataFrame:
    """Change rows of ``records`` routed through ``rules`` (module docstring)."""
    from pyspark.sql import functions as F

    ums_id = F.shiftleft(F.col("file_num").cast("bigint"), OFFSET_BITS).bitwiseOR(F.col("offset"))
    read_ts = F.timestamp_micros(F.col("read_us"))
    table: Any = F
    after: Any = F
    ums_ts: Any = F
    if rules.heartbeat is not None:
        hb = rules.heartbeat
        pattern = java_regex(hb.regex)
        ts_index = re.compile(hb.regex).groupindex["ts"]
        sent_fields, _, fail = Timestamp("ts", hb.format, "ts").columns(
            {"ts": F.regexp_extract(F.col("raw"), pattern, ts_index)}
        )
        sent = sent_fields["ts"]
        is_beat = F.coalesce(F.col("raw").rlike(pattern), F.lit(False))
        beat_ok = is_beat & ~fail[0][0]
        beat_json = F.to_json(
            F.struct(
                ums_id.alias("ums_id_"),
                _render(sent, "timestamp").alias("sent_ts"),
                _render(read_ts, "timestamp").alias("read_ts"),
                # floor, as the Python engine's // (a line from the future: negative)
                F.floor((F.unix_micros(read_ts) - F.unix_micros(sent)) / 1000)
                .cast("bigint")
                .alias("lag_ms"),
            ),
            _JSON,
        )
        table = table.when(beat_ok, F.lit(hb.table))
        after = after.when(beat_ok, beat_json)
        ums_ts = ums_ts.when(beat_ok, F.lit(None).cast("timestamp"))
        unknown_reason = F.when(is_beat, F.lit(f"heartbeat: {fail[0][1]}"))
    else:
        unknown_reason = None
    reasons: list[tuple[Column, Column]] = []
    for gi, group in enumerate(rules.groups):
        records, fields = group_outcome(records, group, f"_g{gi}")
        outcome = F.col(f"_g{gi}")
        event = fields[group.event_time] if group.event_time else F.lit(None).cast("timestamp")
        cols = [ums_id.alias("ums_id_"), _render(event, "timestamp").alias("ums_ts_")]
        cols += [_render(fields.get(n, F.lit(None)), t).alias(n) for n, t in group.columns]
        ok = outcome == F.lit(_OK)
        failed = outcome != F.lit(_REJECT)
        table = table.when(ok, F.lit(group.table)).when(failed, F.lit(rules.unknown_table))
        after = after.when(ok, F.to_json(F.struct(*cols), _JSON))
        ums_ts = ums_ts.when(ok, event)
        reasons.append((failed & ~ok, outcome))
    table = table.otherwise(F.lit(rules.unknown_table))
    reason: Any = F.when(F.lit(False), F.lit(None))
    if unknown_reason is not None:
        reason = F.when(
            F.coalesce(F.col("raw").rlike(java_regex(rules.heartbeat.regex)), F.lit(False)),  # type: ignore[union-attr]
            unknown_reason,
        )
    for cond, text in reasons:
        reason = reason.when(cond, text)
    reason = reason.otherwise(F.lit("no group matched"))
    unknown_json = F.to_json(
        F.struct(
            ums_id.alias("ums_id_"),
            F.lit(None).cast("string").alias("ums_ts_"),
            F.col("file"),
            F.col("offset"),
            F.col("raw"),
            reason.alias("reason"),
        ),
        _JSON,
    )
    after = after.otherwise(unknown_json)
    ums_ts = ums_ts.otherwise(F.lit(None).cast("timestamp"))
    staged = records.select(
        ums_id.alias("_id"),
        table.alias("_table"),
        after.alias("_after"),
        F.coalesce(F.unix_micros(ums_ts), F.col("read_us")).alias("_ts"),
        F.col("file_num"),
        F.col("offset"),
    )
    values = {
        "source": F.lit(source),
        "database": F.lit(database),
        "table": F.col("_table"),
        "op": F.lit("insert"),
        "ts_us": F.col("_ts"),
        "commit_ts": F.timestamp_micros(F.col("_ts")),
        "change_id": F.lit(0),
        "file_num": F.col("file_num"),
        "offset": F.col("offset"),
        "event_index": F.lit(0),
        "gtid": F.lit(""),
        "txn_id": F.concat_ws(
            ":", F.col("file_num").cast("string"), F.col("offset").cast("string")
        ),
        "sequence": F.col("_id"),
        "key": F.to_json(F.struct(F.col("_id").alias("ums_id_"))),
        "before": F.lit(None).cast("string"),
        "after": F.col("_after"),
        "schema_version": F.lit(1).cast("bigint"),
        "sql": F.lit(None).cast("string"),
        "before_key": F.lit(None).cast("string"),
    }
    return staged.select(*(values[n].cast(t).alias(n) for n, t in CHANGE_COLUMNS))

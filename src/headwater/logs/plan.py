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
``try_make_timestamp``...): they run in the JVM on every executor, in Spark's generated
code, with no Python worker per row. The routing is the Python engine's
(:meth:`headwater.logs.groups.LogRules.route`) step for step: the heartbeat pattern first,
then for each group the first operator that rejects or fails decides, in operator order.

How the plan stays cheap per record (it ran 2-3 times slower than the Python engine when
every group evaluated every operator of every record):

* one status column per group (an int: :data:`_OK`, :data:`_REJECT`, :data:`_SKIP`, or
  the number of a failure reason); every expression of a group is computed only while
  its status is OK (``CASE WHEN``), and a record a group or the heartbeat has taken is
  :data:`_SKIP` for every later group: a record costs the regexes of the groups up to
  the one that takes it, as in Python;
* each operator's outputs are materialized as columns before the next operator reads
  them (Spark does not inline an expensive expression used more than once, so each
  regex runs once per record), and fields no later step reads are dropped: the rows stay
  narrow, under ``spark.sql.codegen.maxFields`` (100), past which Spark gives up
  whole-stage code generation and evaluates the projections one by one;
* an expression several outputs need (a ``split``'s array, a conversion's check) is
  computed once before the step (``share``); a timestamp is one regex test and fixed
  substrings, not one regex per part;
* one generated method per group, not one for the whole plan. Spark compiles a chain of
  projections into a single ``processNext`` (it splits the code by operator only where
  the parent uses every column twice, never for projections). With the heartbeat and two
  groups that method was 176 KB of Java, which C2 gave up on ("out of nodes during
  split", JDK 17's ``MaxNodeLimit`` 80 000): the records ran in C1 code for good, 11
  CPU-seconds per 600 000 records in the executors instead of 6.4. A boundary before
  each group (:data:`STAGE_METRICS`: ``observe``, a ``CollectMetrics`` node, which has
  no generated code, so whole-stage code generation ends there) keeps each stage's
  method small enough for C2 (measured: 63-174 KB of machine code each, compiled in
  1-2.5 s), at the cost of one row copy and a count per record and boundary. Its
  metric (``rows``: the records that reached the group, claimed ones included) is in the
  query's progress reports.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from headwater.changes.schema import CHANGE_COLUMNS
from headwater.logs.files import OFFSET_BITS
from headwater.logs.groups import Group, Heartbeat, LogRules
from headwater.logs.lag import HEARTBEAT_OBSERVED, heartbeat_metrics
from headwater.logs.operators import Operator, Timestamp, java_regex

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["RECORD_SCHEMA_DDL", "STAGE_METRICS", "group_outcome", "structure"]

#: The records a log source reads.
RECORD_SCHEMA_DDL = "`file` string, `file_num` int, `offset` bigint, `raw` string, `read_us` bigint"
_TS_FORMAT = "yyyy-MM-dd HH:mm:ss.SSSSSS"
#: nulls are written (a missing column would mean "not in the image" to a sink)
_JSON = {"ignoreNullFields": "false"}
#: A group's status: it takes the record so far; it rejected it; an earlier group (or
#: the heartbeat) took or failed it, so this group did not look. A failure is > 0.
_OK, _REJECT, _SKIP = 0, -1, -2
#: Set once a group (or the heartbeat pattern) has taken or failed the record.
_CLAIMED = "_claimed"
#: Observed metrics of the stage boundary before group N (module docstring):
#: ``STAGE_METRICS.format(source=..., group=N)``.
STAGE_METRICS = "headwater_logs_{source}_group{group}"


def _json(*cols: Column) -> Column:
    from pyspark.sql import functions as F

    return F.to_json(F.struct(*cols), _JSON)


class _Group:
    """Builds one group's projections on ``df`` (module docstring)."""

    def __init__(self, df: DataFrame, group: Group, gi: int, reasons: list[str]) -> None:
        from pyspark.sql import functions as F

        self.group, self.gi, self.reasons = group, gi, reasons
        self.status = f"_s{gi}"
        self.df = df
        # columns to set in the next projection, columns to leave out of it
        self._pending: dict[str, Column] = {}
        self._drop: set[str] = set()
        self._set(self.status, F.when(F.col(_CLAIMED), F.lit(_SKIP)).otherwise(F.lit(_OK)))
        self.fields: dict[str, str] = {"raw": "raw"}  # field -> its column
        self._n = 0

    def _set(self, name: str, expr: Column) -> None:
        """Set column ``name`` to ``expr``, in the same projection as the columns set
        before it unless ``expr`` reads one of them (then those are projected first):
        each expression reads what it read as a ``withColumn`` of its own, in one
        ``Project`` per dependency level instead of one per column (fewer plan nodes
        for Spark to analyze and optimize in every micro-batch)."""
        text = str(expr)  # names its columns (a literal naming one: a needless level)
        if any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text) for n in self._pending):
            self._flush()
        self._pending[name] = expr

    def _flush(self) -> None:
        """One ``select``: the pending columns set, the dropped ones left out."""
        from pyspark.sql import functions as F

        pending, drop = self._pending, self._drop
        if not pending and not drop:
            return
        have = self.df.columns
        cols = [pending[c].alias(c) if c in pending else F.col(c) for c in have if c not in drop]
        cols += [v.alias(k) for k, v in pending.items() if k not in have and k not in drop]
        self.df = self.df.select(*cols)
        self._pending, self._drop = {}, set()

    def _name(self) -> str:
        self._n += 1
        return f"_g{self.gi}_{self._n}"

    def ok(self) -> Column:
        from pyspark.sql import functions as F

        return F.col(self.status) == F.lit(_OK)

    def step(self, op: Operator, label: str) -> None:
        from pyspark.sql import functions as F

        shared: dict[str, Column] = {}

        def share(expr: Column) -> Column:
            name = self._name()
            shared[name] = expr
            return F.col(name)

        inputs = {k: F.col(c) for k, c in self.fields.items()}
        step = op.columns(inputs, share)
        ok, st = self.ok(), F.col(self.status)
        for k, v in shared.items():  # in order: a shared expression may use the one before
            self._set(k, F.when(ok, v))
        if step.reject is not None:
            self._set(self.status, F.when(ok & step.reject, F.lit(_REJECT)).otherwise(st))
        changed = {k: v for k, v in step.fields.items() if inputs.get(k) is not v}
        made = {k: self._name() for k in changed}
        for k, v in changed.items():
            self._set(made[k], F.when(ok, v))
        after = {k: made.get(k) or self.fields[k] for k in step.fields}
        decide: Any = None
        for before, output, reason in step.fail:
            if before not in self.fields:
                continue  # a field never set: null, which converts
            self.reasons.append(f"group {self.group.name}, operator {label}: {reason}")
            bad = F.col(self.fields[before]).isNotNull() & F.col(after[output]).isNull()
            cond = ok & bad
            code = F.lit(len(self.reasons))
            decide = F.when(cond, code) if decide is None else decide.when(cond, code)
        if decide is not None:
            self._set(self.status, decide.otherwise(st))
        # left out of the next projection (no later expression reads them)
        self._drop |= (set(self.fields.values()) | set(shared)) - set(after.values()) - {"raw"}
        self.fields = after

    def finish(self, ums_id: Column) -> tuple[DataFrame, Column, Column]:
        """The group's rows as JSON (``after``) and its event time, both null unless the
        group took the record; its fields dropped; the records it took or failed marked
        claimed."""
        from pyspark.sql import functions as F

        group, ok = self.group, self.ok()
        col = {k: F.col(c) for k, c in self.fields.items()}
        event = col.get(group.event_time or "", F.lit(None).cast("timestamp"))
        after = _json(
            ums_id.alias("ums_id_"),
            _render(event, "timestamp").alias("ums_ts_"),
            *(_render(col.get(n, F.lit(None)), t).alias(n) for n, t in group.columns),
        )
        a, e = f"_a{self.gi}", f"_e{self.gi}"
        claimed = F.col(_CLAIMED) | (F.col(self.status) != F.lit(_REJECT))
        self._set(a, F.when(ok, after))
        self._set(e, F.when(ok, event))
        self._set(_CLAIMED, claimed)
        self._drop |= set(self.fields.values()) - {"raw"}  # read above, left out below
        self._flush()
        return self.df, F.col(a), F.col(e)


def group_outcome(
    df: DataFrame, group: Group, gi: int, reasons: list[str], ums_id: Column
) -> tuple[DataFrame, Column, Column]:
    """``df`` (with a boolean ``_claimed``) through ``group``: the status column ``_s<gi>``
    (:data:`_OK`, :data:`_REJECT`, :data:`_SKIP` or a failure: the index in ``reasons``
    plus one, appended here), the group's row as JSON and its event time (null unless
    the group took the record); ``_claimed`` also set for the records it took or failed."""
    build = _Group(df, group, gi, reasons)
    for i, op in enumerate((*group.operators, group.final_cast)):
        build.step(op, f"{i}:{op.kind}" if i < len(group.operators) else "columns")
    return build.finish(ums_id)


def _render(value: Column, kind: str) -> Column:
    from pyspark.sql import functions as F

    return F.date_format(value, _TS_FORMAT) if kind == "timestamp" else value


def _heartbeat(
    df: DataFrame, hb: Heartbeat, ums_id: Column, read_ts: Column
) -> tuple[DataFrame, Column, Column, Column, str]:
    """The heartbeat columns: ``_hb`` (the line matches the pattern, so no group sees it),
    ``_hb_sent``, ``_claimed`` (= ``_hb``); returns ``df``, whether the line is a valid
    heartbeat, its row as JSON, its sent time in µs (null otherwise), and the reason of an
    invalid one."""
    from pyspark.sql import functions as F

    pattern = java_regex(hb.regex)
    index = re.compile(hb.regex).groupindex["ts"]
    df = df.withColumn("_hb", F.coalesce(F.col("raw").rlike(pattern), F.lit(False)))
    is_beat = F.col("_hb")
    # (one projection per dependency level: fewer plan nodes to optimize in every batch)
    df = df.withColumns(
        {
            "_hb_ts": F.when(is_beat, F.regexp_extract(F.col("raw"), pattern, index)),
            _CLAIMED: is_beat,  # no group sees a heartbeat line
        }
    )
    shared: dict[str, Column] = {}

    def share(expr: Column) -> Column:
        shared[f"_hb_{len(shared)}"] = expr
        return F.col(f"_hb_{len(shared) - 1}")

    step = Timestamp("ts", hb.format, "ts").columns({"ts": F.col("_hb_ts")}, share)
    ((_, _, reason),) = step.fail
    df = df.withColumns({k: F.when(is_beat, v) for k, v in shared.items()})
    sent_ts = F.when(is_beat, step.fields["ts"]).alias("_hb_sent")
    df = df.select(*(F.col(c) for c in df.columns if c not in shared), sent_ts)
    sent = F.col("_hb_sent")
    beat_ok = is_beat & (F.col("_hb_ts").isNull() | sent.isNotNull())
    row = _json(
        ums_id.alias("ums_id_"),
        _render(sent, "timestamp").alias("sent_ts"),
        _render(read_ts, "timestamp").alias("read_ts"),
        # floor, as the Python engine's // (a line from the future: negative)
        F.floor((F.unix_micros(read_ts) - F.unix_micros(sent)) / 1000)
        .cast("bigint")
        .alias("lag_ms"),
    )
    return df, beat_ok, F.when(beat_ok, row), F.when(beat_ok, F.unix_micros(sent)), reason


def structure(records: DataFrame, rules: LogRules, *, source: str, database: str) -> DataFrame:
    """Change rows of ``records`` routed through ``rules`` (module docstring). With a
    heartbeat pattern, the heartbeats' sent times are observed per batch
    (:data:`headwater.logs.lag.HEARTBEAT_OBSERVED`)."""
    from pyspark.sql import functions as F

    ums_id = F.shiftleft(F.col("file_num").cast("bigint"), OFFSET_BITS).bitwiseOR(F.col("offset"))
    read_ts = F.timestamp_micros(F.col("read_us"))
    df = records
    table: Any = F
    afters: list[Column] = []
    beat_reason: Column | None = None
    sent_us: Column | None = None
    if rules.heartbeat is not None:
        df, beat_ok, beat_row, sent_us, beat_text = _heartbeat(df, rules.heartbeat, ums_id, read_ts)
        table = table.when(beat_ok, F.lit(rules.heartbeat.table))
        afters.append(beat_row)
        beat_reason = F.when(F.col("_hb"), F.lit(f"heartbeat: {beat_text}"))
    else:
        df = df.withColumn(_CLAIMED, F.lit(False))
    reasons: list[str] = []
    events: list[Column] = []
    for gi, group in enumerate(rules.groups):
        # a codegen stage boundary: one generated method per group (module docstring)
        df = df.observe(
            STAGE_METRICS.format(source=source, group=gi), F.count(F.lit(1)).alias("rows")
        )
        df, after, event = group_outcome(df, group, gi, reasons, ums_id)
        table = table.when(F.col(f"_s{gi}") == F.lit(_OK), F.lit(group.table))
        afters.append(after)
        events.append(event)
    table = table.otherwise(F.lit(rules.unknown_table))
    # at most one group's status is a failure (a failed record is claimed)
    failed = F.coalesce(
        *(F.when(F.col(f"_s{gi}") > 0, F.col(f"_s{gi}")) for gi in range(len(rules.groups))),
        F.lit(None).cast("int"),
    )
    reason = F.coalesce(
        *([beat_reason] if beat_reason is not None else []),
        # (element_at with a null index gave the last element on Spark 4.3: a CASE instead)
        F.when(
            failed.isNotNull(), F.get(F.array(*(F.lit(r) for r in reasons or [""])), failed - 1)
        ),
        F.lit("no group matched"),
    )
    unknown = _json(
        ums_id.alias("ums_id_"),
        F.lit(None).cast("string").alias("ums_ts_"),
        F.col("file"),
        F.col("offset"),
        F.col("raw"),
        reason.alias("reason"),
    )
    ums_ts = F.coalesce(*events, F.lit(None).cast("timestamp"))
    staged = df.select(
        ums_id.alias("_id"),
        table.alias("_table"),
        F.coalesce(*afters, unknown).alias("_after"),
        F.coalesce(F.unix_micros(ums_ts), F.col("read_us")).alias("_ts"),
        F.col("file_num"),
        F.col("offset"),
        *([sent_us.alias("_sent_us")] if sent_us is not None else []),
    )
    if sent_us is not None:
        staged = staged.observe(HEARTBEAT_OBSERVED, *heartbeat_metrics(F, F.col("_sent_us")))
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

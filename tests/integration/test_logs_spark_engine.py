"""Differential test: the Spark engine (headwater.logs.plan.structure, real Spark local
mode) against the Python engine (LogRules.route) on the same generated records.

Every operator kind appears in the rules, every outcome is produced (each group taking
lines, a filter rejecting, a cast and a timestamp failing, the unknown table, heartbeats,
an unparsable heartbeat); the table and every column's value of every record must be
the same in both engines.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from typing import Any

import pytest

from headwater.logs.groups import LogRules, parse_rules
from headwater.logs.plan import RECORD_SCHEMA_DDL, STAGE_METRICS, structure

pytestmark = pytest.mark.integration

TS = r"(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"
GROUPS: list[dict[str, Any]] = [
    {
        "name": "req",
        "table": "requests",
        "columns": {
            "at": "timestamp",
            "level": "string",
            "path": "string",
            "ms": "int",
            "bytes": "bigint",
            "user": "string",
        },
        "operators": [
            {
                "extract": {
                    "regex": "^" + TS + r" (?P<level>[A-Z]+) +\[(?P<thread>[^\]]*)\] (?P<msg>.*)$"
                }
            },
            {"filter": {"field": "msg", "regex": "^request "}},
            {"filter": {"field": "level", "in": ["INFO", "DEBUG"]}},
            {"kv": {"field": "msg", "keys": ["path", "ms", "bytes", "user"]}},
            {"replace": {"field": "path", "regex": r"/\d+", "with": "/N"}},
            {"cast": {"ms": "int", "bytes": "bigint"}},
            {"timestamp": {"field": "time", "format": "yyyy-MM-dd HH:mm:ss,SSS", "into": "at"}},
        ],
    },
    {
        "name": "evt",
        "table": "events",
        "columns": {
            "at": "timestamp",
            "kind": "string",
            "amount": "double",
            "ok": "boolean",
            "who": "string",
        },
        "operators": [
            {"filter": {"field": "raw", "not_regex": "DEBUG"}},
            {"extract": {"regex": TS + r" EVENT (?P<payload>\{.*\})$"}},
            {"json": {"field": "payload", "keys": ["kind", "amount", "ok", "who"]}},
            {"trim": ["who"]},
            {"rename": {"kind": "kind_"}},
            {"rename": {"kind_": "kind"}},
            {"select": ["time", "kind", "amount", "ok", "who"]},
            {
                "timestamp": {
                    "field": "time",
                    "format": "yyyy-MM-dd HH:mm:ss,SSS",
                    "into": "at",
                    "offset_minutes": 120,
                }
            },
        ],
    },
    {
        "name": "csv",
        "table": "audits",
        "columns": {"actor": "string", "action": "string", "target": "string", "n": "int"},
        "operators": [
            {"filter": {"field": "raw", "regex": "^AUDIT;"}},
            {
                "split": {
                    "field": "raw",
                    "separator": ";",
                    "into": ["tag", "actor", "action", "rest"],
                }
            },
            {"split": {"field": "rest", "separator": "|", "into": ["target", "n"]}},
            {"filter": {"field": "tag", "equals": "AUDIT"}},
        ],
    },
]
HEARTBEAT = {"regex": r"HEARTBEAT sent=(?P<ts>\S+ \S+)", "format": "yyyy-MM-dd HH:mm:ss,SSS"}
READ_US = 1_714_600_000_123_456


def _ts(rng: random.Random) -> str:
    t = dt.datetime(2024, 5, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=rng.randrange(10**9))
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"


def _record(rng: random.Random) -> str:
    t = _ts(rng)
    kind = rng.randrange(12)
    level = rng.choice(["INFO", "DEBUG", "WARN"])
    if kind <= 3:
        ms = rng.choice([str(rng.randrange(10**6)), "-7", "x1", "99999999999", ""])
        by = rng.choice([str(rng.randrange(10**12)), "12.5", "0"])
        user = rng.choice(["u1", "", "ü-ß"])
        path = f"/a/{rng.randrange(99)}/b"
        return f"{t} {level}  [http-{kind}] request path={path} ms={ms} bytes={by} user={user}"
    if kind <= 6:
        amount = rng.choice(["1.5", "-2e3", '"x"', "7", "null"])
        ok = rng.choice(["true", "false", '"maybe"', "null"])
        who = rng.choice(['"  ann "', '"bob"', "null"])
        payload = f'{{"kind": "k{kind}", "amount": {amount}, "ok": {ok}, "who": {who}}}'
        return f"{t} EVENT {payload}"
    if kind == 7:
        n = rng.choice(["3", "", "z"])
        return f"AUDIT;root;{rng.choice(['drop', 'grant'])};db{rng.randrange(9)}|{n}"
    if kind == 8:
        return f"{t} INFO  [hb] HEARTBEAT sent={rng.choice([t, '2024-13-01 00:00:00,000'])}"
    if kind == 9:
        trace = "\n".join(f"\tat c.C{i}.m(C.java:{i})" for i in range(rng.randrange(3)))
        return f"{t} ERROR [w] java.lang.Error: bad\n{trace}".rstrip("\n")
    if kind == 10:
        return f"{t} {level}  [main] something else {rng.random()}"
    if kind == 11 and rng.random() < 0.3:  # a NUL of its own: extract's slow path
        return f"{t} INFO  [nul\x00] request path=/a/1 ms=3 bytes=4 user=\x00u\x00"
    return rng.choice(["", " ", "garbage", "2024-05-01 bad time EVENT {}", "AUDIT;x"])


def _render(value: Any, kind: str) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return value


def _python_rows(
    rules: LogRules, records: list[tuple[int, str]]
) -> list[tuple[str, dict[str, Any]]]:
    read_ts = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=READ_US)
    tables = rules.tables()
    out = []
    for offset, raw in records:
        routed = rules.route(raw, file="app.log", offset=offset, read_ts=read_ts)
        values = {"ums_id_": offset, "ums_ts_": None, **routed.values}
        row = {n: _render(values.get(n), t) for n, t in tables[routed.table]}
        out.append((routed.table, row))
    return out


def test_spark_engine_agrees_with_the_python_engine(spark: Any) -> None:
    rules = parse_rules(GROUPS, unknown_table="unknown", heartbeat=HEARTBEAT)
    rng = random.Random(22)
    records = []
    offset = 0
    for _ in range(800):
        raw = _record(rng)
        records.append((offset, raw))
        offset += len(raw.encode()) + 1
    df = spark.createDataFrame(
        [("app.log", 0, off, raw, READ_US) for off, raw in records], RECORD_SCHEMA_DDL
    ).repartition(2)
    rows = structure(df, rules, source="app", database="logs").collect()
    got = {r["sequence"]: (r["table"], json.loads(r["after"])) for r in rows}
    want = dict(zip((off for off, _ in records), _python_rows(rules, records), strict=True))
    assert len(rows) == len(records)
    wrong = [(raw, got[off], want[off]) for off, raw in records if got[off] != want[off]]
    assert wrong[:5] == []
    # every outcome happened: the test would prove little otherwise
    tables = [t for t, _ in want.values()]
    assert {t: tables.count(t) > 20 for t in rules.tables()} == dict.fromkeys(rules.tables(), True)
    reasons = {row["reason"] for t, row in want.values() if t == "unknown"}
    assert {
        "no group matched",
        "group req, operator 5:cast: field ms is not a int",
        "group evt, operator columns: field amount is not a double",
        "group evt, operator columns: field ok is not a boolean",
        "group csv, operator columns: field n is not a int",
    } <= reasons
    assert any(r.startswith("heartbeat: ") for r in reasons)
    # records with a NUL (the extract operator's other path) were structured too
    nul = [want[off] for off, raw in records if "\x00" in raw]
    assert len(nul) > 5
    assert {(t, row["user"], row["path"]) for t, row in nul} == {("requests", "\x00u\x00", "/a/N")}
    for r in rows:  # the change rows' other fields
        assert (r["op"], r["source"], r["database"]) == ("insert", "app", "logs")
        assert json.loads(r["key"]) == {"ums_id_": r["sequence"]}


def test_each_group_is_a_generated_stage_of_its_own(spark: Any) -> None:
    """A ``CollectMetrics`` boundary before each group (headwater.logs.plan, STAGE_METRICS):
    no generated method holds the whole plan (one did: 176 KB of Java, too big for C2)."""
    rules = parse_rules(GROUPS, unknown_table="unknown", heartbeat=HEARTBEAT)
    records = spark.createDataFrame(
        [("app.log", 0, 0, "AUDIT;a;b;c|1", READ_US)], RECORD_SCHEMA_DDL
    )
    out = structure(records, rules, source="app", database="logs")
    plan = out._jdf.queryExecution().executedPlan().toString()
    names = re.findall(r"CollectMetrics (\w+),", plan)
    want = ["headwater_heartbeat", *(STAGE_METRICS.format(source="app", group=g) for g in range(3))]
    assert sorted(names) == want
    codegen = out._jdf.queryExecution().debug().codegenToSeq()
    sizes = [len(codegen.apply(i)._2()) for i in range(codegen.size())]
    assert len(sizes) == 5
    assert max(sizes) < 100_000, sizes
    (row,) = out.collect()
    assert (row["table"], json.loads(row["after"])["n"]) == ("audits", 1)

"""Fuzzing ``headwater binlog dump`` (text and JSON): every mutated or truncated input ends
with exit 0 (the events printed) or exit 2 and exactly one ``headwater: error:`` line on
stderr; never exit 1, never a traceback.

The inputs are a real MySQL 8.0.26 binlog (FULL row metadata) with three built events added
after its PREVIOUS_GTIDS: a GTID_TAGGED event and a TABLE_MAP + WRITE_ROWS of a table with
VECTOR columns and a column name that is not UTF-8. Mutations rewrite bytes of one event's
body and then fix the event's size, the log positions and the CRC32 checksum, so that the
damaged TABLE_MAP names and metadata reach the decoders and the renderers instead of
stopping at the checksum. ``main`` runs in-process for speed, plus a few real subprocesses.
"""

from __future__ import annotations

import builtins
import re
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest
from _binlog_encode import enc_prefixed, image, packed_int, rows_body, table_map_body
from _mysql_serialization import gtid_tagged_body
from hypothesis import HealthCheck, given, settings, strategies as st

from headwater.binlog.constants import ColumnType as T, EventType
from headwater.cli.main import main

BASE = Path("/work/shared/fixtures/binlog/mysql/binlog-invisible-columns.000001")
SID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
Event = tuple[bytes, bytes]  # (19-byte header, body without checksum)


def split(data: bytes) -> list[Event]:
    """The events of a CRC32 binlog file."""
    events, pos = [], 4
    while pos < len(data):
        size = struct.unpack_from("<I", data, pos + 9)[0]
        event = data[pos : pos + size]
        assert zlib.crc32(event[:-4]) == struct.unpack_from("<I", event, size - 4)[0]
        events.append((event[:19], event[19:-4]))
        pos += size
    return events


def join(events: list[Event]) -> bytes:
    """A binlog file of ``events``: sizes, log positions and checksums made right."""
    out = bytearray(b"\xfebin")
    for header, body in events:
        size = 19 + len(body) + 4
        head = bytearray(header)
        struct.pack_into("<II", head, 9, size, len(out) + size)
        event = bytes(head) + body
        out += event + struct.pack("<I", zlib.crc32(event))
    return bytes(out)


def _header(type_code: int) -> bytes:
    return struct.pack("<IBIIIH", 1700000000, type_code, 1, 0, 0, 0)


def built_events() -> list[Event]:
    types = [T.LONG, T.VECTOR, T.BLOB, T.VARCHAR]
    metas = [b"", b"\x04", b"\x02", (40).to_bytes(2, "little")]
    names = [b"id", b"vec", b"caf\xe9", b"bar"]  # latin1 bytes: not UTF-8
    optional = [
        (1, b"\x00"),
        (3, b"".join(packed_int(c) for c in (63, 255, 255))),
        (4, b"".join(packed_int(len(n)) + n for n in names)),
        (13, packed_int(3)),
    ]
    tm = table_map_body(200, "db", "t", types, metas, optional=optional)
    row = image(
        [
            struct.pack("<i", 1),
            enc_prefixed(struct.pack("<3f", 1.0, 2.0, 3.0), 4),
            enc_prefixed(b"text", 2),
            enc_prefixed(b"\xff\xfe", 1),  # not UTF-8 in a utf8mb4 column
        ]
    )
    return [
        (_header(EventType.GTID_TAGGED), gtid_tagged_body(uuid_from(SID), 7, "mytag")),
        (_header(EventType.TABLE_MAP), tm),
        (_header(EventType.WRITE_ROWS), rows_body(200, len(types), row)),
    ]


def uuid_from(text: str):  # type: ignore[no-untyped-def]
    import uuid

    return uuid.UUID(text)


def base_events() -> list[Event]:
    events = split(BASE.read_bytes())
    prev = next(i for i, (h, _b) in enumerate(events) if h[4] == EventType.PREVIOUS_GTIDS)
    return events[: prev + 1] + built_events() + events[prev + 1 :]


EVENTS = base_events()
TABLE_MAPS = [i for i, (h, _b) in enumerate(EVENTS) if h[4] == EventType.TABLE_MAP]


def run_dump(data: bytes, as_json: bool, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(data)
        f.flush()
        argv = ["binlog", "dump", *(["--json"] if as_json else []), f.name]
        code = main(argv)
    return code, capsys.readouterr().err


# Every exception class Python has (builtins, struct's and zstandard's) and phrases of the
# helpers' own messages: an error line must speak of the binlog, not of the decoder's code.
_PY_NAMES = [
    *(n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)),
    "struct.error",
    "ZstdError",
    "zlib.error",
]
_INTERNAL = re.compile(
    r"\b(" + "|".join(map(re.escape, _PY_NAMES)) + r")\b"
    r"|unpack_from|requires a buffer|out of bounds on dimension|index out of range"
    r"|codec can't|NoneType|object has no|not subscriptable|invalid literal|positional argument"
    r"|Traceback|range\(0x"
)
# "<file>, offset N[, EVENT_TYPE]: what is wrong"
_SHAPE = re.compile(r"headwater: error: .+, offset \d+(, [A-Z][A-Z0-9_]*)?: \S")


def check(code: int, err: str) -> None:
    assert code in (0, 2), err
    assert "Traceback" not in err
    if code == 0:
        assert err == ""
    else:
        assert err.count("\n") == 1 and err.startswith("headwater: error: "), err
        check_message(err)


def check_message(err: str) -> None:
    """The error names where (file, offset, event type when inside an event) and says what
    is wrong in the format's terms: no Python exception class or helper phrase."""
    assert _SHAPE.match(err), err
    assert not _INTERNAL.search(err), err


def test_the_built_file_dumps_whole(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_dump(join(EVENTS), True, capsys)
    assert (code, err) == (0, "")
    code, err = run_dump(join(EVENTS), False, capsys)
    assert (code, err) == (0, "")


_FUZZ = settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    events = list(EVENTS)
    i = draw(st.sampled_from(TABLE_MAPS) | st.integers(1, len(events) - 1))
    header, body = events[i]
    body = bytearray(body)
    for _ in range(draw(st.integers(1, 4))):
        if not body:
            break
        pos = draw(st.integers(0, len(body) - 1))
        body[pos] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        body = body[: draw(st.integers(0, len(body)))]
    events[i] = (header, bytes(body))
    return join(events)


@_FUZZ
@given(data=mutated(), as_json=st.booleans())
def test_mutated_events_exit_0_or_2_with_one_line(
    data: bytes, as_json: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    check(*run_dump(data, as_json, capsys))


@_FUZZ
@given(cut=st.integers(0, len(join(EVENTS))), as_json=st.booleans())
def test_truncated_files_exit_0_or_2_with_one_line(
    cut: int, as_json: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    check(*run_dump(join(EVENTS)[:cut], as_json, capsys))


@pytest.mark.parametrize("as_json", [True, False])
def test_subprocess_with_a_non_utf8_name_and_a_damaged_table_map(
    as_json: bool, tmp_path: Path
) -> None:
    events = list(EVENTS)
    i = TABLE_MAPS[0]
    header, body = events[i]
    events[i] = (header, body[:-3])  # cut inside the optional metadata
    for name, data in (("whole", join(EVENTS)), ("damaged", join(events))):
        path = tmp_path / f"{name}.bin"
        path.write_bytes(data)
        exe = Path(sys.executable).parent / "headwater"
        cmd = [str(exe), "binlog", "dump", *(["--json"] if as_json else []), str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        check(proc.returncode, proc.stderr)
        if name == "whole":
            assert proc.returncode == 0
            assert "caf\\\\xe9" in proc.stdout if as_json else "caf" in proc.stdout
            assert "mytag:7" in proc.stdout


def _with_table_map(body: bytes) -> bytes:
    events = list(EVENTS)
    events[TABLE_MAPS[0]] = (events[TABLE_MAPS[0]][0], body)
    return join(events)


def test_column_names_fewer_than_columns_is_a_format_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Found by fuzzing: a COLUMN_NAME field naming fewer columns than the TABLE_MAP has
    made the renderer index past the names (IndexError, exit 1)."""
    types = [T.LONG, T.LONG, T.LONG]
    names = [b"a", b"b"]
    optional = [(4, b"".join(packed_int(len(n)) + n for n in names))]
    tm = table_map_body(200, "db", "t", types, [b"", b"", b""], optional=optional)
    for as_json in (True, False):
        code, err = run_dump(_with_table_map(tm), as_json, capsys)
        assert code == 2
        check(code, err)
        assert "TABLE_MAP: COLUMN_NAME metadata names 2 columns, the TABLE_MAP has 3" in err


def test_row_and_table_map_truncations_say_what_ran_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Messages that used to quote struct ("unpack_from requires a buffer of ...") and
    memoryview ("index out of bounds on dimension 1")."""
    events = list(EVENTS)
    rows_at = TABLE_MAPS[0] + 1
    header, body = events[rows_at]
    events[rows_at] = (header, body[:-3])  # the last value is cut
    code, err = run_dump(join(events), True, capsys)
    check(code, err)
    assert "WRITE_ROWS: row image runs past the end of the event" in err
    header, body = EVENTS[TABLE_MAPS[0]]
    assert body[8:12] == b"\x02db\x00"  # table id (6), flags (2), schema length, name, NUL
    code, err = run_dump(_with_table_map(body[:12]), True, capsys)  # no table name length
    check(code, err)
    assert "TABLE_MAP: TABLE_MAP ends early: a length or count in its 12-byte body" in err

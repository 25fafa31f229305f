"""Every file in ../shared/fixtures/binlog/corrupt gives a typed error naming the file, the
event's offset and (where one was read) its type, through ``iter_events``/``parse_event``
and through the CLI (exit 2, one line on stderr, no traceback).

What is wrong with each file:

* ``binlog_truncated_event.000001``: 14 bytes, the magic and 10 bytes of a header.
* ``binlog_truncated_prev_gtid_event.000001``: a FORMAT_DESCRIPTION, then 9 bytes of the
  PREVIOUS_GTIDS event's header.
* ``corrupt-relay-bin.000624`` (MySQL 5.0 relay log): frames cleanly, but the QUERY event at
  offset 91204 (event_size 171, the one rust_mysql_common's ``binlog_event_roundtrip`` expects
  to fail with UnexpectedEof) has bytes of another statement's text from its 4th body byte
  on: its status_vars_len reads 16949 (``"5B"``), more than the 139 bytes after its
  post-header, which MySQL's ``Query_event`` constructor rejects the same way.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from headwater.binlog.events import iter_events
from headwater.cli.main import main
from headwater.errors import BinlogFormatError, TruncatedError

CORRUPT = Path("/work/shared/fixtures/binlog/corrupt")

EXPECTED = {
    "binlog_truncated_event.000001": (TruncatedError, 4, None),
    "binlog_truncated_prev_gtid_event.000001": (TruncatedError, 120, None),
    "corrupt-relay-bin.000624": (TruncatedError, 91204, "QUERY"),
}


def test_every_corrupt_file_is_covered() -> None:
    assert sorted(p.name for p in CORRUPT.iterdir() if p.name != "SOURCES.md") == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_iter_events_raises_typed_located_error(name: str) -> None:
    kind, offset, event_type = EXPECTED[name]
    path = CORRUPT / name
    with pytest.raises(BinlogFormatError) as info:
        for _ in iter_events(path):
            pass
    err = info.value
    assert type(err) is kind
    assert err.source == str(path)
    assert err.offset == offset
    assert err.event_type == event_type


def test_corrupt_relay_query_reason() -> None:
    with pytest.raises(TruncatedError, match="status_vars_len 16949 exceeds the 139 bytes"):
        for _ in iter_events(CORRUPT / "corrupt-relay-bin.000624"):
            pass


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cli_exits_2_with_one_line(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    _kind, offset, _event_type = EXPECTED[name]
    path = CORRUPT / name
    assert main(["binlog", "dump", "--json", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"headwater: error: {path}, offset {offset}")
    assert "Traceback" not in err


def test_cli_subprocess_corrupt_relay_log() -> None:
    exe = Path(sys.executable).parent / "headwater"
    path = CORRUPT / "corrupt-relay-bin.000624"
    proc = subprocess.run(
        [str(exe), "binlog", "dump", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == (
        f"headwater: error: {path}, offset 91204, QUERY: status_vars_len 16949 exceeds the "
        "139 bytes after the post-header\n"
    )
    # everything before the broken event was printed
    assert proc.stdout.splitlines()[-1].startswith("#91176 INTVAR")

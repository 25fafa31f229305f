"""Tagged GTID sets (MySQL 8.3+ ``uuid:1-5:tag:1-2``) in the reader's start: configuration,
the first-start decision, and reconciling a cut log whose sealed segments hold tagged
transactions (their store summary keys are digests, named from the state's tags)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from headwater.binlog.preflight import SourceInfo
from headwater.config import StartConfig, parse_reader_config
from headwater.errors import ConfigError
from headwater.position import BinlogCoordinate, MysqlGtidSet, Position
from headwater.reader.start import (
    choose_start,
    gtid_key_of,
    read_log_end,
    reconcile,
    summary_key,
    tagged_names,
)
from headwater.store import ChangeIdInfo, ChangeLog, Durability, ReaderState, Record, StoreOptions
from headwater.store.index import gtid_key
from headwater.store.segment import segment_name

U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
BASE = "data_dir: d\nsources:\n  - name: a\n    user: u\n    host: h\n    server_id: 1\n"
IDENT = f"mysql:{U}"
FIRST_ID = (ChangeIdInfo(0, IDENT, Position(0, 3, 4), "", 1),)


def _source() -> SourceInfo:
    return SourceInfo(
        address="db:3306",
        flavor="mysql",
        version="9.6.0",
        server_id=1,
        server_uuid=U,
        gtid_domain_id=None,
        hostname="db",
        user="'r'@'%'",
        binlog_format="ROW",
        binlog_row_image="FULL",
        binlog_row_metadata="FULL",
        binlog_checksum="CRC32",
        current=BinlogCoordinate("bin.000004", 900),
        binary_logs=(("bin.000003", 1000), ("bin.000004", 1000)),
        gtid_position=f"{U}:1-50:tag:1-9",
        gtid_purged="",
    )


def test_config_start_gtid_takes_a_tagged_set() -> None:
    (src,) = parse_reader_config(
        BASE + f"    start: {{gtid: '{U}:1-5:MyTag:1-3:7'}}\n", env={}
    ).sources
    assert src.start.kind == "gtid"
    assert src.start.gtid_set == MysqlGtidSet({(uuid.UUID(U), "mytag"): [(1, 4), (7, 8)]}).union(
        MysqlGtidSet({(uuid.UUID(U), ""): [(1, 6)]})
    )
    assert str(src.start.gtid_set) == f"{U}:1-5:mytag:1-3:7"


@pytest.mark.parametrize("bad", [f"{U}:1-5:9tag:1", f"{U}:tag", f"{U}:tag:tag2:1"])
def test_config_bad_tag_names_the_field(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"start\.gtid"):
        parse_reader_config(BASE + f"    start: {{gtid: '{bad}'}}\n", env={})


def test_first_start_by_a_tagged_set_dumps_from_it() -> None:
    g = MysqlGtidSet.parse(f"{U}:1-20:tag:1-4")
    d = choose_start(StartConfig("gtid", gtid_set=g), ReaderState(), _source())
    assert d.start == g and d.start.is_tagged  # type: ignore[union-attr]
    assert d.state.gtid_set == f"{U}:1-20:tag:1-4"
    assert d.state.change_ids[0].start_gtid_set == f"{U}:1-20:tag:1-4"


def test_tagged_keys_of_texts_and_of_store_summaries_agree() -> None:
    gtid = f"{U}:Tag_1:12"
    k = gtid_key(gtid)
    assert k is not None and k[0] == 3
    names = tagged_names(f"{U}:1-3:tag_1:1-20", "0-1-5", "junk")
    assert gtid_key_of(gtid) == (summary_key(k[0], k[1], names), k[2]) == (f"{U}:tag_1", 12)
    assert summary_key(k[0], k[1]) is None  # an unnamed digest gives no key


def test_a_cut_log_caps_a_tag_seen_only_in_sealed_segments(tmp_path: Path) -> None:
    """Tag ``t`` appears only in the sealed segments (its cap comes from their summaries,
    by digest); the untagged GTIDs also in the active one, whose tail is cut."""
    opts = StoreOptions(durability=Durability.NONE, segment_bytes=64 * 1024)
    payload = b"x" * 500
    with ChangeLog.open(str(tmp_path), opts) as log:
        for i in range(1, 401):
            gtid = f"{U}:t:{(i + 1) // 2}" if i <= 100 and i % 2 else f"{U}:{i}"
            log.append(Record(Position(0, 3, 100 * i), payload, 1000 + i, gtid))
        active = log.active_base()
    assert active > 101
    seg = tmp_path / segment_name(active)
    os.truncate(seg, seg.stat().st_size // 2)
    state = ReaderState(Position(0, 3, 40000), f"{U}:1-400:t:1-50", 1400, 400, FIRST_ID)
    with ChangeLog.open(str(tmp_path), opts) as log:
        end = read_log_end(log, state)
        last = log.acked_seq
    assert active <= last < 400
    assert end.caps[f"{U}:t"] == (50, "")
    assert end.caps[U] == (last, f"{U}:{last}")
    got, lost = reconcile(state, end)
    # Without the tag's cap the tagged GTIDs would be dropped and read again as new.
    assert got.gtid_set == f"{U}:1-{last}:t:1-50"
    assert lost is not None and (lost.first_seq, lost.last_seq) == (last + 1, 400)

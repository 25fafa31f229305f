"""Where a snapshot reads the change log (:class:`~headwater.snapshot.changelog.LogRef`)
and what its state file records: the token travels inside a pickled task but never shows
in a repr, a message or the state file; state files written before server sources load."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from headwater.errors import ConfigError
from headwater.snapshot.changelog import LogRef
from headwater.snapshot.state import SnapshotState
from headwater.spark.offsets import parse_options

TABLES = {"d.t": {"key": [], "method": "even", "chunks": [{"id": "d.t#0", "lo": None, "hi": None}]}}


def test_a_server_ref_carries_its_token_when_pickled_and_never_shows_it() -> None:
    ref = LogRef(server="http://reader:8080", task="shop", token="s3cret-token")
    assert pickle.loads(pickle.dumps(ref)).token == "s3cret-token"
    assert "s3cret-token" not in repr(ref)
    assert ref.where() == "task shop at http://reader:8080"
    assert ref == LogRef(server="http://reader:8080", task="shop")  # the token is no identity


def test_the_ref_of_parsed_source_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HW_TEST_TOKEN", "tok-1")
    parsed = parse_options({"server": "http://r:1/", "task": "shop", "tokenEnv": "HW_TEST_TOKEN"})
    ref = LogRef.of(parsed)
    assert (ref.task_dir, ref.server, ref.task, ref.token) == (None, "http://r:1", "shop", "tok-1")
    assert LogRef.of(parse_options({"path": "/var/lib/hw/shop"})) == LogRef(
        task_dir="/var/lib/hw/shop"
    )


def test_a_ref_names_exactly_one_log() -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        LogRef()
    with pytest.raises(ConfigError, match="exactly one"):
        LogRef(task_dir="/t", server="http://r:1", task="x")
    with pytest.raises(ConfigError) as e:
        LogRef(server="http://r:1")
    assert e.value.field == "source.task"


def test_a_server_snapshot_state_records_server_and_task_not_a_directory(tmp_path: Path) -> None:
    state = SnapshotState("abc", "shop", None, TABLES, server="http://r:1", task="shop")
    path = tmp_path / "s.json"
    state.save(str(path))
    doc = json.loads(path.read_text())
    assert (doc["server"], doc["task"]) == ("http://r:1", "shop") and "task_dir" not in doc
    loaded = SnapshotState.load(str(path))
    assert loaded is not None and loaded.to_json() == state.to_json()
    assert (loaded.task_dir, loaded.server, loaded.task) == (None, "http://r:1", "shop")


def test_a_state_file_written_before_server_sources_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"version": 1, "snapshot_id": "old", "source": "shop",
                                "task_dir": "/var/lib/hw/shop", "tables": TABLES,
                                "done": {"d.t#0": {"wave": 1, "rows": 3}}, "wave": 1,
                                "emitted_seq": 7, "started_us": 1, "finished_us": 2}))  # fmt: skip
    loaded = SnapshotState.load(str(path))
    assert loaded is not None
    assert (loaded.task_dir, loaded.server, loaded.task) == ("/var/lib/hw/shop", None, None)
    assert loaded.emitted_seq == 7 and loaded.pending() == []
    assert loaded.to_json()["task_dir"] == "/var/lib/hw/shop" and "server" not in loaded.to_json()

"""Connections carry their password from the driver to executors inside the pickled task
(issue #16): a process that has neither the variable nor the file gets it; repr never
shows it; a password the driver cannot read fails the pickling with a ConfigError."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.connections import SourceConnection, TargetConnection
from headwater.errors import ConfigError

SECRET = "pw-6c1d0e9b5a"


def unpickle_elsewhere(data: bytes, cwd: Path) -> str:
    """``password()`` of the pickled connection in a new process with a clean environment
    (no HEADWATER_* variables) and another working directory: what an executor sees."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HW_")}
    code = (
        "import pickle, sys; c = pickle.loads(sys.stdin.buffer.read());"
        " print(c.password()); print(repr(c))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], input=data, capture_output=True, env=env, cwd=cwd,
        check=True,
    ).stdout.decode()  # fmt: skip


def test_password_env_travels_inside_the_pickle(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HW_SECRET_PW", SECRET)
    conn = TargetConnection(host="db", user="u", password_env="HW_SECRET_PW", session=(("a", 1),))
    data = pickle.dumps(conn)
    monkeypatch.delenv("HW_SECRET_PW")
    out = unpickle_elsewhere(data, tmp_path).splitlines()
    assert out[0] == SECRET
    assert SECRET not in out[1] and "TargetConnection(" in out[1]
    back = pickle.loads(data)
    assert back == conn and hash(back) == hash(conn)  # the carried secret is not compared
    assert back.password() == SECRET
    assert dataclasses.replace(back, database=None).password() == SECRET
    assert SECRET not in repr(back) and SECRET not in str(back)


def test_password_file_read_on_the_driver_only(tmp_path: Path) -> None:
    secret_file = tmp_path / "driver-only" / "pw"
    secret_file.parent.mkdir()
    secret_file.write_text(SECRET + "\nsecond line\n")
    data = pickle.dumps(SourceConnection(host="db", password_file=str(secret_file)))
    secret_file.unlink()  # gone, as on a worker that never had it
    assert unpickle_elsewhere(data, tmp_path).splitlines()[0] == SECRET


def test_unreadable_password_fails_the_pickling_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HW_MISSING_PW", raising=False)
    with pytest.raises(ConfigError) as info:
        pickle.dumps(SourceConnection(password_env="HW_MISSING_PW"))
    assert "HW_MISSING_PW" in str(info.value) and info.value.field == "password_env"


def test_no_password_configured_is_empty_everywhere(tmp_path: Path) -> None:
    data = pickle.dumps(SourceConnection(host="db"))
    assert unpickle_elsewhere(data, tmp_path).splitlines()[0] == ""

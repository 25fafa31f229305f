"""The Redis sink's password is read on the driver and travels inside the pickled sink
(issue #16): an executor needs neither the variable nor the file, and ``repr`` never
shows it."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from headwater.errors import ConfigError
from headwater.sinks.redis import RedisConfig, RedisSink


def test_password_from_the_driver_environment_travels_in_the_pickle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HW_REDIS_PW", "pw-from-driver")
    shipped = pickle.dumps(RedisSink(RedisConfig(host="h", password_env="HW_REDIS_PW")))
    monkeypatch.delenv("HW_REDIS_PW")  # the executor's environment lacks it
    sink = pickle.loads(shipped)
    assert sink.config.password() == "pw-from-driver"
    assert "pw-from-driver" not in repr(sink)
    assert sink == RedisSink(RedisConfig(host="h", password_env="HW_REDIS_PW"))


def test_password_file_is_read_on_the_driver_only(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("pw-in-file\n")
    shipped = pickle.dumps(RedisConfig(host="h", password_file=str(secret)))
    secret.unlink()  # not on the executor's machine
    config = pickle.loads(shipped)
    assert config.password() == "pw-in-file"
    assert "pw-in-file" not in repr(config)


def test_missing_variable_fails_the_pickling_with_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("HW_REDIS_NOPE", raising=False)
    with pytest.raises(ConfigError, match="password_env: environment variable HW_REDIS_NOPE"):
        pickle.dumps(RedisSink(RedisConfig(host="h", password_env="HW_REDIS_NOPE")))


def test_no_password_configured_is_none_after_pickling() -> None:
    assert pickle.loads(pickle.dumps(RedisConfig(host="h"))).password() is None

"""The Spark source's ``server`` option naming a reader cluster (issue #19): one URL, a
comma list of the members' URLs, or ``zookeeper://hosts`` (discovery); and the pipeline
file's ``server:`` as a YAML list of URLs."""

from __future__ import annotations

import pytest

from headwater.errors import ConfigError
from headwater.pipeline.config import parse_pipeline_config
from headwater.spark.offsets import parse_options, parse_server


def test_one_url_is_a_list_of_one() -> None:
    assert parse_server("http://r1:8700/") == (("http://r1:8700",), None)


def test_a_comma_list_names_every_member() -> None:
    urls, zk = parse_server("http://r1:8700, https://r2:8700/api/")
    assert (urls, zk) == (("http://r1:8700", "https://r2:8700/api"), None)


def test_zookeeper_hosts_mean_discovery() -> None:
    assert parse_server("zookeeper://zk1:2181, zk2:2181") == ((), "zk1:2181,zk2:2181")


@pytest.mark.parametrize(
    "text", ["r1:8700", "http://r1:8700,", "http://r1,ftp://r2", "zookeeper://", "zookeeper://a/b"]
)
def test_anything_else_is_a_config_error_naming_server(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^server: expected"):
        parse_server(text)


def test_the_option_keeps_its_normalised_text() -> None:
    options = parse_options({"server": "http://r1:1/ ,http://r2:2", "task": "shop"})
    assert options.server == "http://r1:1,http://r2:2"
    options = parse_options({"server": "ZooKeeper://zk:2181", "task": "shop"})
    assert options.server == "zookeeper://zk:2181"


def test_a_pipeline_server_list_becomes_the_option() -> None:
    text = (
        "name: n\nsource:\n  server: [http://r1:1, http://r2:2]\n  task: shop\n"
        "checkpoint: ck\nsinks:\n  - type: parquet_mirror\n    path: m\n"
    )
    config = parse_pipeline_config(text, env={})
    assert dict(config.source.options)["server"] == "http://r1:1,http://r2:2"


def test_a_pipeline_server_list_item_must_be_a_string() -> None:
    text = (
        "name: n\nsource:\n  server: [http://r1:1, {a: b}]\n  task: shop\n"
        "checkpoint: ck\nsinks:\n  - type: parquet_mirror\n    path: m\n"
    )
    with pytest.raises(ConfigError, match=r"source\.server\[1\]"):
        parse_pipeline_config(text, env={})

"""The user docs cannot go stale: the generated reference and the examples.

``docs/reference.md`` must equal what ``tools/gen_reference.py`` writes from the config
models, and every file of ``examples/`` must load with the real loaders (the reader's
``load_reader_config``, the pipeline's ``load_pipeline_config``, and each pipeline sink
through the runner's sink factory). No server, no Spark session.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from headwater.config import load_reader_config
from headwater.pipeline.config import load_pipeline_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ENV = {
    "HEADWATER_SHOP_PASSWORD": "x",
    "HEADWATER_ORDERS_PASSWORD": "x",
    "HEADWATER_API_TOKEN": "t",
    "HEADWATER_SALT": "s",
}


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "tools/gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_reference_is_generated_from_the_models() -> None:
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    assert text == _generator().render(), "run: .venv/bin/python tools/gen_reference.py"


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES.glob("*.yaml")}
    assert {
        "reader-mariadb.yaml",
        "reader-mysql8.yaml",
        "pipeline-mariadb-to-mariadb.yaml",
        "pipeline-mysql8-to-postgres.yaml",
        "pipeline-to-parquet.yaml",
    } <= names


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("reader-*.yaml")), ids=lambda p: p.name)
def test_reader_example_loads(path: Path) -> None:
    config = load_reader_config(path, env=ENV)
    assert config.sources
    text = path.read_text(encoding="utf-8")
    assert "password:" not in text, "passwords come from files or the environment"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("pipeline-*.yaml")), ids=lambda p: p.name)
def test_pipeline_example_loads(path: Path) -> None:
    from headwater.pipeline.sinks import build_sink

    config = load_pipeline_config(path, env=ENV)
    assert config.sinks
    for sink in config.sinks:
        assert build_sink(sink, config) is not None
    assert "password:" not in path.read_text(encoding="utf-8")


def test_cli_doc_holds_the_current_help_of_every_command() -> None:
    spec = importlib.util.spec_from_file_location("gen_cli_doc", ROOT / "tools/gen_cli_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert text.count("```\nusage: headwater") == 11  # every command has its block
    assert text == module.render(text), "run: .venv/bin/python tools/gen_cli_doc.py"

"""Reading YAML configuration files so that every error names file, line and field.

Files are parsed with ``yaml.compose``: every value keeps the line it was written on. The
helpers here turn nodes into typed values and raise :class:`~headwater.errors.ConfigError`
naming the file, that line and the dotted field path (``sources[1].filters.include[0]``).
Mappings reject unknown fields: a typo must not silently fall back to a default. Used by
the reader configuration (:mod:`headwater.config`) and the pipeline configuration.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import yaml

from headwater.errors import ConfigError

__all__ = [
    "YamlContext",
    "boolean",
    "compose",
    "integer",
    "mapping",
    "number",
    "path_value",
    "read_config",
    "scalar",
    "size",
    "string",
    "string_list",
]

T = TypeVar("T")

_SIZE = re.compile(r"^\s*(\d+)\s*(b|kib|mib|gib|kb|mb|gb|k|m|g)?\s*$", re.IGNORECASE)
_UNITS = {
    None: 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
}


class YamlContext:
    """The file being read: its name (for errors), the directory relative paths are
    relative to, and the environment secrets may be read from."""

    def __init__(self, file: str, base: Path, env: dict[str, str]) -> None:
        self.file = file
        self.base = base
        self.env = env

    def error(self, node: yaml.Node | None, path: str, message: str) -> ConfigError:
        line = node.start_mark.line + 1 if node is not None else None
        return ConfigError(message, file=self.file, line=line, field=path or None)


def read_config(path: str | os.PathLike[str]) -> tuple[str, str, Path]:
    """A configuration file's text, its name for errors, and the directory relative paths
    in it are relative to; an unreadable file is a ConfigError naming it."""
    file = os.fspath(path)
    try:
        data = Path(file).read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read the configuration: {e.strerror}", file=file) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(
            f"not UTF-8: byte 0x{data[e.start]:02x} at byte offset {e.start} ({e.reason}); "
            "save the file as UTF-8",
            file=file,
            line=line,
        ) from None
    return text, file, Path(file).resolve().parent


def compose(text: str, file: str) -> yaml.Node:
    """The node tree of ``text``; invalid YAML or an empty file is a ConfigError."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"not valid YAML: {problem}", file=file, line=line) from None
    if root is None:
        raise ConfigError("the configuration is empty", file=file, line=1)
    return root


def mapping(
    ctx: YamlContext,
    node: yaml.Node,
    path: str,
    allowed: set[str],
    required: set[str] = frozenset(),  # type: ignore[assignment]
) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise ctx.error(node, path, "must be a mapping of field: value")
    out: dict[str, yaml.Node] = {}
    for key_node, value_node in node.value:
        key = str(key_node.value)
        where = f"{path}.{key}" if path else key
        if key not in allowed:
            raise ctx.error(
                key_node, where, f"unknown field; expected one of {', '.join(sorted(allowed))}"
            )
        if key in out:
            raise ctx.error(key_node, where, "given twice")
        out[key] = value_node
    for key in sorted(required - out.keys()):
        raise ctx.error(node, f"{path}.{key}" if path else key, "missing (required)")
    return out


def scalar(
    ctx: YamlContext, node: yaml.Node, path: str, what: str, convert: Callable[[str, str], T]
) -> T:
    if not isinstance(node, yaml.ScalarNode):
        raise ctx.error(node, path, f"must be {what}")
    try:
        return convert(str(node.value), node.tag)
    except (ValueError, TypeError):
        raise ctx.error(node, path, f"must be {what}, got {node.value!r}") from None


def string(ctx: YamlContext, node: yaml.Node, path: str) -> str:
    def conv(v: str, tag: str) -> str:
        if tag != "tag:yaml.org,2002:str" or not v:
            raise ValueError(v)
        return v

    return scalar(ctx, node, path, "a non-empty string", conv)


def integer(ctx: YamlContext, node: yaml.Node, path: str, lo: int, hi: int) -> int:
    def conv(v: str, tag: str) -> int:
        if tag != "tag:yaml.org,2002:int":
            raise ValueError(v)
        return int(v.replace("_", ""), 0)

    value = scalar(ctx, node, path, "an integer", conv)
    if not lo <= value <= hi:
        raise ctx.error(node, path, f"must be in {lo}..{hi}, got {value}")
    return value


def number(ctx: YamlContext, node: yaml.Node, path: str, lo: float, hi: float) -> float:
    def conv(v: str, tag: str) -> float:
        if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
            raise ValueError(v)
        return float(v.replace("_", ""))

    value = scalar(ctx, node, path, "a number (seconds)", conv)
    if not lo <= value <= hi:
        raise ctx.error(node, path, f"must be in {lo:g}..{hi:g}, got {value:g}")
    return value


def boolean(ctx: YamlContext, node: yaml.Node, path: str) -> bool:
    def conv(v: str, tag: str) -> bool:
        if tag != "tag:yaml.org,2002:bool":
            raise ValueError(v)
        return v.lower() in ("true", "yes", "on")

    return scalar(ctx, node, path, "true or false", conv)


def size(ctx: YamlContext, node: yaml.Node, path: str, lo: int, hi: int) -> int:
    def conv(v: str, tag: str) -> int:
        m = _SIZE.match(v)
        if m is None:
            raise ValueError(v)
        return int(m.group(1)) * _UNITS[m.group(2).lower() if m.group(2) else None]

    value = scalar(ctx, node, path, "a size in bytes (8388608, 8MiB, 512KiB)", conv)
    if not lo <= value <= hi:
        raise ctx.error(node, path, f"must be in {lo}..{hi} bytes, got {value}")
    return value


def path_value(ctx: YamlContext, node: yaml.Node, path: str) -> Path:
    p = Path(string(ctx, node, path)).expanduser()
    return p if p.is_absolute() else ctx.base / p


def string_list(ctx: YamlContext, node: yaml.Node, path: str) -> list[tuple[str, yaml.Node]]:
    if not isinstance(node, yaml.SequenceNode):
        raise ctx.error(node, path, "must be a list of strings")
    return [(string(ctx, item, f"{path}[{i}]"), item) for i, item in enumerate(node.value)]

"""User rule scripts: Python functions over one change, listed in the pipeline config.

A rule file is a Python module that defines::

    def rule(change: dict) -> dict | None: ...

``change`` has the keys of the change row (:data:`headwater.changes.schema.CHANGE_COLUMNS`):
``source``, ``database``, ``table``, ``op``, ``ts_us``, ``commit_ts`` (an aware UTC
``datetime``), ``change_id``, ``file_num``, ``offset``, ``event_index``, ``gtid``,
``txn_id``, ``sequence``, ``schema_version``, ``sql``, and ``key``, ``before``, ``after`` as
dicts of column name to value (or ``None``; values as in docs/formats.md, "Values"). The
rule returns the change to keep, changed in place or as a new dict (a key it leaves out
keeps its input value; a key that is not a change column is an error), or ``None`` to drop
the change. Rules run on the Spark executors, once per change, in the configured order with
the other transforms; a module is executed once per Python worker, so module-level state
is per worker and must not be relied on for correctness.

Any exception a rule raises (and a wrong return type) becomes a :class:`RuleError` naming
the rule file, the table, the operation and the change's position and sequence, with the
original error's type and message.

The file is read once, on the driver, when the configuration is loaded (so executors need
no access to it) and compiled there to report syntax errors and a missing ``rule`` early.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headwater.changes.schema import CHANGE_COLUMNS
from headwater.errors import HeadwaterError

__all__ = ["RuleError", "RuleScript", "load_rule_script", "position_text"]

#: The form a rule sees a change in: a dict of the change-row columns with the images
#: as dicts (user code's contract; the pipeline's change type is
#: :class:`headwater.changes.ChangeRow`, columnar as Arrow on the hot path).
ChangeDict = dict[str, Any]
RowOp = Callable[[ChangeDict], "ChangeDict | None"]

_COLUMNS = frozenset(name for name, _ in CHANGE_COLUMNS)


class RuleError(HeadwaterError):
    """A transform failed on one change; the message names the rule file (or transform)
    and the change's table, operation, position and sequence."""


@dataclass(frozen=True, slots=True)
class RuleScript:
    """A rule file's path (for messages) and its source text (shipped to executors)."""

    path: str
    source: str = field(repr=False)

    def load(self) -> RowOp:
        """Execute the module and return its ``rule`` function (raises RuleError)."""
        namespace: dict[str, Any] = {"__name__": f"headwater_rule_{Path(self.path).stem}"}
        try:
            code = compile(self.source, self.path, "exec")
            exec(code, namespace)
        except Exception as e:
            raise RuleError(f"rule {self.path}: cannot load: {type(e).__name__}: {e}") from e
        fn = namespace.get("rule")
        if not callable(fn):
            raise RuleError(f"rule {self.path}: defines no function rule(change) -> dict | None")
        return _checked(self.path, fn)


def load_rule_script(path: str | Path) -> RuleScript:
    """Read and check a rule file now (on the driver); raises RuleError or OSError."""
    script = RuleScript(str(path), Path(path).read_text(encoding="utf-8"))
    script.load()
    return script


def position_text(change: ChangeDict) -> str:
    """``db.table op at position C:F:O:E (sequence N)`` for messages about a change."""
    return (
        f"{change.get('database')}.{change.get('table')} {change.get('op')} at position "
        f"{change.get('change_id')}:{change.get('file_num')}:{change.get('offset')}:"
        f"{change.get('event_index')} (sequence {change.get('sequence')})"
    )


def _checked(path: str, fn: Callable[[ChangeDict], Any]) -> RowOp:
    def run(change: ChangeDict) -> ChangeDict | None:
        where = position_text(change)
        try:
            result = fn(change)
        except Exception as e:
            raise RuleError(f"rule {path} failed on {where}: {type(e).__name__}: {e}") from e
        if result is None:
            return None
        if not isinstance(result, dict):
            raise RuleError(
                f"rule {path} returned {type(result).__name__} on {where}; expected a dict or None"
            )
        unknown = result.keys() - _COLUMNS
        if unknown:
            raise RuleError(
                f"rule {path} returned unknown keys {sorted(unknown)} on {where}; "
                "a change has only the change-row columns"
            )
        if result is change:
            return result
        merged = dict(change)
        merged.update(result)
        return merged

    return run

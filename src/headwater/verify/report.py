"""The verifier's report as text: what ``headwater verify`` and the demo print.

One line per table (``shop.orders -> shop_copy.orders: rows=1000 chunks=1 equal``), then
each differing key (``  missing in target: id=5``, ``  extra in target: id=7``,
``  different: id=9 (amount, note)``), and as the last line
``<prefix> tables=<n> rows=<m> mismatches=<k>``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from headwater.verify import VerifyReport

__all__ = ["print_report"]

_LABELS = {"missing": "missing in target", "extra": "extra in target", "different": "different"}


def print_report(
    report: VerifyReport, out: TextIO, *, max_keys: int = 100, prefix: str = "verify"
) -> None:
    """Write the per-table lines, the differing keys and the summary line to ``out``."""
    for t in report.tables:
        state = "equal" if not t.mismatches else f"{t.mismatches} mismatches"
        if t.problem:
            state = f"{t.problem} ({state})"
        out.write(f"{t.source} -> {t.target}: rows={t.rows} chunks={t.chunks} {state}\n")
        for d in t.differences[:max_keys]:
            cols = f" ({', '.join(d.columns)})" if d.columns else ""
            out.write(f"  {_LABELS[d.kind]}: {t.key_text(d.key)}{cols}\n")
        if len(t.differences) > max_keys:
            out.write(f"  ... and {len(t.differences) - max_keys} more\n")
    out.write(
        f"{prefix} tables={len(report.tables)} rows={report.rows} mismatches={report.mismatches}\n"
    )
    out.flush()

"""Rewrite the ``--help`` blocks of docs/cli.md from the parser (80 columns).

    .venv/bin/python tools/gen_cli_doc.py            # rewrite docs/cli.md in place
    .venv/bin/python tools/gen_cli_doc.py --check    # exit 1 if a block is out of date

Each section ``## `headwater CMD...` `` is followed by a fenced block holding exactly what
``headwater CMD... --help`` prints at 80 columns; the prose around the blocks is kept.
``tests/unit/test_docs.py`` fails when a block differs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli.md"
_BLOCK = re.compile(r"^(## `headwater ?([^`]*)`\n\n```\n)(.*?)(```)", re.M | re.S)


def help_text(words: list[str]) -> str:
    """What ``headwater WORDS --help`` prints, at 80 columns."""
    from headwater.cli.main import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            build_parser().parse_args([*words, "--help"])
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return out.getvalue()


def render(text: str) -> str:
    """``text`` with every help block replaced by the parser's current output."""
    return _BLOCK.sub(lambda m: m.group(1) + help_text(m.group(2).split()) + m.group(4), text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    text = DOC.read_text()
    new = render(text)
    if args.check:
        if new != text:
            print("docs/cli.md is out of date: run tools/gen_cli_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The demo's progress display: one updating line on a terminal, plain lines otherwise."""

from __future__ import annotations

import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Shows ``line``s on ``out``: rewritten in place (``\\r``) when ``out`` is a TTY, else
    one line every ``plain_every`` seconds (so logs and CI output stay readable)."""

    def __init__(self, out: TextIO, *, plain_every: float = 2.0) -> None:
        self.out = out
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.plain_every = plain_every
        self._last = 0.0
        self._width = 0

    def show(self, line: str, *, force: bool = False) -> None:
        if self.tty:
            self.out.write("\r" + line.ljust(self._width))
            self._width = max(self._width, len(line))
        elif force or time.monotonic() - self._last >= self.plain_every:
            self.out.write(line + "\n")
            self._last = time.monotonic()
        self.out.flush()

    def done(self) -> None:
        """End the updating line (a TTY's cursor goes to the next line)."""
        if self.tty and self._width:
            self.out.write("\n")
            self.out.flush()
            self._width = 0

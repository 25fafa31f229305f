from typing_extensions import Buffer

EV_DONE: int
EV_SLOW: int
EV_ODD: int
EV_FULL: int

class Plan:
    """How one row image shape fills the Arrow columns (made by :func:`plan`)."""

def plan(
    targets: tuple[tuple[str, int, int], ...],
    widths: tuple[int, ...],
    sources: tuple[tuple[str, int, int, object], ...],
    where: tuple[int, ...],
    /,
) -> Plan | None:
    """``targets``: (Arrow kind, precision, scale) per column; ``widths``: value_width
    per present column; ``sources``: (native kind, a, b, charmap or None) per present
    column; ``where``: per column its present column or -1. None: a pair the module does
    not type."""

class Columns:
    """Arrow columns being filled from row images (survivors.c)."""

    rows: int
    def __init__(self, targets: tuple[tuple[str, int, int], ...], /) -> None: ...
    def add(self, plan: Plan, buf: Buffer, offsets: Buffer, /) -> bool: ...
    def add_events(
        self,
        plans: tuple[Plan | None, ...],
        payloads: list[bytes],
        firsts: Buffer,
        events: Buffer,
        seqs: Buffer,
        offsets: Buffer,
        start: int,
        limit: int,
        /,
    ) -> tuple[int, int]:
        """:meth:`add` over a run of events: (the first survivor not added, EV_*)."""
    def take(self) -> tuple[tuple[int, int, bytes | None, bytes, bytes | None], ...]: ...

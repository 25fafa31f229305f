"""Reader HA, the parts without a server (issue #19): where a follower's log leaves its
leader's (``divergence``, bisection against a linear scan), rebuilding a log up to a seq
(``cut_log``, byte-identical records), and the lease's arithmetic (``Lease``).

The "leader" of the divergence tests is a second real change log read through the same two
calls a LeaderLink answers (its end, its records from a seq), so the bisection runs over
real stored records; the HTTP side of LeaderLink is covered by tests/integration."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.store.conftest import make_record, tiny_options

from headwater.coordination.leadership import LEASE_FRACTION, Lease
from headwater.reader.follow import FollowError, cut_log, divergence, same_record
from headwater.store import AtSeq, ChangeLog, Record


class LogAsLeader:
    """A change log answering like LeaderLink: ``end()`` and ``records(seq)``; a fetch past
    the end + 1 fails as the server's does (HTTP 400)."""

    def __init__(self, log: ChangeLog) -> None:
        self.log = log
        self.asked: list[int] = []

    def end(self) -> int:
        return self.log.acked_seq

    def records(self, seq: int, *, max_rows: int = 2000, wait_ms: int = 500) -> list[Record]:
        self.asked.append(seq)
        if seq > self.log.acked_seq + 1:
            raise FollowError(f"seq {seq} is beyond the log's end ({self.log.acked_seq})")
        out: list[Record] = []
        with self.log.reader(AtSeq(seq)) as r:
            while len(out) < max_rows and (rec := r.next(0)) is not None:
                out.append(rec)
        return out


def _log(path: Path, records: list[Record]) -> ChangeLog:
    log = ChangeLog.open(str(path), tiny_options())
    if records:
        log.append_many(records)
        log.flush()
    return log


def _records(n: int, *, differ_from: int | None = None) -> list[Record]:
    """Records 1..n; from ``differ_from`` on their payloads differ from ``_records(n)``'s."""
    out = []
    for i in range(1, n + 1):
        rec = make_record(i)
        if differ_from is not None and i >= differ_from:
            rec = make_record(i, size=61)
        out.append(rec)
    return out


def _first_difference(mine: ChangeLog, theirs: ChangeLog) -> int | None:
    """The independent answer: a linear scan from seq 1."""
    for seq in range(1, mine.acked_seq + 1):
        with mine.reader(AtSeq(seq)) as a, theirs.reader(AtSeq(seq)) as b:
            x, y = a.next(0), b.next(0)
        assert x is not None
        if y is None or y.seq != seq or not same_record(x, y):
            return seq
    return None


@pytest.mark.parametrize(
    ("leader_n", "mine_n", "differ_from"),
    [
        (40, 25, None),  # a prefix: nothing to cut
        (40, 40, None),  # equal
        (20, 35, None),  # longer than the leader (a deposed leader's tail): cut after 20
        (40, 40, 1),  # differs from the first record
        (40, 40, 17),
        (40, 40, 40),  # only the last record
        (30, 45, 12),  # differs and is longer
        (40, 0, None),  # an empty log
    ],
)
def test_divergence_agrees_with_a_linear_scan(
    tmp_path: Path, leader_n: int, mine_n: int, differ_from: int | None
) -> None:
    with (
        _log(tmp_path / "leader", _records(leader_n)) as theirs,
        _log(tmp_path / "mine", _records(mine_n, differ_from=differ_from)) as mine,
    ):
        link = LogAsLeader(theirs)
        got = divergence(link, mine)  # type: ignore[arg-type]
        assert got == _first_difference(mine, theirs)
        # never asks past the leader's end + 1 (the server refuses: the old bug)
        assert all(seq <= theirs.acked_seq + 1 for seq in link.asked)
        if mine_n:  # bisection: about log2(n) questions, not n
            assert len(link.asked) <= 2 + mine_n.bit_length()


@pytest.mark.parametrize("keep_to", [0, 1, 13, 39, 40])
def test_cut_log_keeps_records_up_to_a_seq_byte_for_byte(tmp_path: Path, keep_to: int) -> None:
    records = _records(40)
    with _log(tmp_path / "changes", records) as log:
        assert log.acked_seq == 40
    cut_log(tmp_path / "changes", keep_to, tiny_options())
    with (
        ChangeLog.open(str(tmp_path / "changes"), tiny_options()) as cut,
        _log(tmp_path / "reference", _records(40)) as reference,
    ):
        assert cut.acked_seq == keep_to
        for seq in range(1, keep_to + 1):
            with cut.reader(AtSeq(seq)) as a, reference.reader(AtSeq(seq)) as b:
                x, y = a.next(0), b.next(0)
            assert x is not None and y is not None and same_record(x, y), seq
        # the cut log goes on at keep_to + 1, as the leader's next record will
        nxt = make_record(99)
        assert cut.append_many([nxt]) == keep_to + 1
    assert not list(tmp_path.glob("changes.*")), "no .cut or .old directory left behind"


def test_lease_runs_a_fraction_of_the_session_from_when_the_request_was_sent() -> None:
    lease = Lease()
    assert not lease.valid(0.0)  # nothing granted yet
    lease.grant(sent=100.0, session_timeout_s=10.0)
    end = 100.0 + 10.0 * LEASE_FRACTION
    assert lease.valid(100.0) and lease.valid(end - 1e-6)
    assert not lease.valid(end)  # at the limit, no more appends
    # an answer to an older request never shortens a newer grant
    lease.grant(sent=99.0, session_timeout_s=10.0)
    assert lease.until == end
    lease.grant(sent=103.0, session_timeout_s=10.0)
    assert lease.valid(end) and not lease.valid(103.0 + 10.0 * LEASE_FRACTION)
    lease.revoke()  # the session expired or the epoch moved on
    assert not lease.valid(103.0)


def test_lease_always_ends_before_the_session_could_expire() -> None:
    for timeout in (0.5, 4.0, 6.0, 30.0):
        lease = Lease()
        lease.grant(sent=0.0, session_timeout_s=timeout)
        assert lease.until < timeout
    for bad in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="lease fraction"):
            Lease(bad)

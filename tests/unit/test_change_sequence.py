"""The row sequence helpers (headwater.changes.sequence) against the documented layout."""

from __future__ import annotations

from hypothesis import given, strategies as st

from headwater.changes.sequence import ROW_LIMIT, record_of, row_of, sequence_of
from headwater.snapshot.watermarks import READ_MARK, read_sequence

records = st.integers(0, (1 << 39) - 1)
rows = st.integers(0, ROW_LIMIT - 1)


def test_layout_is_record_times_two_to_the_24_plus_row() -> None:
    # docs/formats.md: sequence = seq << 24 | row
    assert ROW_LIMIT == 16_777_216
    assert sequence_of(1, 0) == 16_777_216
    assert sequence_of(3, 5) == 3 * 16_777_216 + 5
    assert (record_of(50_331_653), row_of(50_331_653)) == (3, 5)


@given(records, rows)
def test_round_trip(record: int, row: int) -> None:
    seq = sequence_of(record, row)
    assert (record_of(seq), row_of(seq)) == (record, row)


@given(records, rows, records, rows)
def test_order_is_record_then_row(r1: int, n1: int, r2: int, n2: int) -> None:
    assert (sequence_of(r1, n1) < sequence_of(r2, n2)) == ((r1, n1) < (r2, n2))


@given(records, st.integers(0, 1000))
def test_snapshot_reads_sit_between_records(record: int, wave: int) -> None:
    seq = read_sequence(record, wave)
    assert sequence_of(record, READ_MARK - 1) < seq < sequence_of(record + 1, 0)

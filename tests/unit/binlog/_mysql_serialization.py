"""Test-side encoders for MySQL 8.3+ formats, written from the MySQL source independently of
the decoders under test:

* variable-length integers: ``libs/mysql/serialization/readme.md`` ("Variable-length
  integers") — the byte count is the number of trailing one bits of the first byte plus
  one; written here by trying lengths one by one, not with MySQL's 575/4096 slope that
  ``headwater._varlen`` uses;
* the GTID_TAGGED_LOG_EVENT body: ``Gtid_event::define_fields() const`` in
  ``libs/mysql/binlog/event/control_events.h``, serialized by ``Serializer_default``
  (``libs/mysql/serialization/serializer_default_impl.hpp``): version 1, the message size,
  the last non-ignorable field id (0: every field uses the default ``ignore`` policy), then
  ``field id, value`` for each field whose encode predicate holds;
* tagged GTID sets: ``Gtid_set::encode`` and ``encode_nsids_format`` (sql/rpl_gtid_set.cc),
  ``Tsid::encode_tsid`` and ``Tag::encode_tag`` (libs/mysql/gtid/tsid.cpp, tag.cpp).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence


def varlen_u(value: int) -> bytes:
    assert 0 <= value < 1 << 64
    for n in range(1, 9):
        if value < 1 << (7 * n):  # n bytes keep 8n - n value bits
            word = (value << n) | ((1 << (n - 1)) - 1)  # n - 1 trailing ones, then a 0
            return word.to_bytes(n, "little")
    return b"\xff" + value.to_bytes(8, "little")


def varlen_s(value: int) -> bytes:
    return varlen_u(value * 2 if value >= 0 else (-value - 1) * 2 + 1)


def gtid_tagged_body(
    sid: uuid.UUID,
    gno: int,
    tag: str,
    *,
    flags: int = 0,
    last_committed: int = 0,
    sequence_number: int = 1,
    immediate_ts: int = 0,
    original_ts: int | None = None,
    transaction_length: int = 0,
    immediate_version: int = 90600,
    original_version: int | None = None,
    ticket: int = 0,
    extra_fields: Sequence[tuple[int, bytes]] = (),
    last_non_ignorable: int = 0,
) -> bytes:
    """The event body (after the common header, before the checksum)."""
    original_ts = immediate_ts if original_ts is None else original_ts
    original_version = immediate_version if original_version is None else original_version
    fields: list[tuple[int, bytes]] = [
        (0, varlen_u(flags)),
        (1, b"".join(varlen_u(b) for b in sid.bytes)),  # an array: one varlen per byte
        (2, varlen_s(gno)),
        (3, varlen_u(len(tag)) + tag.encode()),
        (4, varlen_s(last_committed)),
        (5, varlen_s(sequence_number)),
        (6, varlen_u(immediate_ts)),
    ]
    if original_ts != immediate_ts:
        fields.append((7, varlen_u(original_ts)))
    fields += [(8, varlen_u(transaction_length)), (9, varlen_u(immediate_version))]
    if original_version != immediate_version:
        fields.append((10, varlen_u(original_version)))
    if ticket:
        fields.append((11, varlen_u(ticket)))
    fields += list(extra_fields)
    payload = b"".join(varlen_u(fid) + data for fid, data in fields)
    head = varlen_u(1)  # serialization_format_version
    tail = varlen_u(last_non_ignorable) + payload
    size = len(head) + len(tail) + 1
    while len(head) + len(varlen_u(size)) + len(tail) != size:  # the size counts itself
        size = len(head) + len(varlen_u(size)) + len(tail)
    return head + varlen_u(size) + tail


def gtid_set_bytes(entries: Sequence[tuple[uuid.UUID, str, Sequence[tuple[int, int]]]]) -> bytes:
    """An encoded set; entries are (uuid, tag, [(start, end exclusive)]) in MySQL's order.

    Tagged format when any tag is set (``analyze_encoding_format``)."""
    tagged = any(tag for _sid, tag, _iv in entries)
    n = len(entries)
    head = (1 << 56 | n << 8 | 1) if tagged else n
    out = struct.pack("<Q", head)
    for sid, tag, intervals in entries:
        out += sid.bytes
        if tagged:
            out += varlen_u(len(tag)) + tag.encode()
        out += struct.pack("<Q", len(intervals))
        for lo, hi in intervals:
            out += struct.pack("<qq", lo, hi)
    return out

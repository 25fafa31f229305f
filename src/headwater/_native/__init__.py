"""Compiled fast paths (C extension ``_ingest``, built by setup.py with the package).

The reader's ingest loop has a Python reference implementation (``headwater.binlog``
framing, ``headwater.reader.grouping.Grouper``, ``headwater.store.ChangeLog.append_many``)
and, for the common transaction shape, this compiled one; both produce byte-identical
records (tests/unit/reader/test_native_differential.py).

``Scanner.scan`` takes the dump's receive buffer at a transaction boundary and turns every
MariaDB transaction of the form ``MARIADB_GTID [ANNOTATE_ROWS | TABLE_MAP | rows]* XID``
whose TABLE_MAP shapes were registered (``add_shape``: the body, ``db.table`` and the
columns' value widths, :func:`headwater.binlog._columns.value_width`) into a store record
frame with seq and CRC left 0. It returns ``(status, stop, seq, size, records,
events, last)``:

* ``status``: :data:`SLOW` -- the transaction at ``stop`` (or the packet there, between
  transactions) is for the Python path; :data:`MORE` -- the buffer ends inside the
  transaction at ``stop`` (the scanner keeps what it read of it: call again with the same
  ``stop`` once more bytes are in, or ``reset()`` and hand it to Python); :data:`LIMIT` --
  ``max_out`` bytes of frames are out, call again; :data:`SHAPE` -- the transaction at
  ``stop`` goes on (``resume`` bytes after its first packet) with a TABLE_MAP whose shape
  is not registered: register it (or ``reset()``) and call again;
* ``stop``, ``seq``: the first byte not consumed and the packet sequence number expected
  there (always a transaction's first packet or a packet between transactions);
* ``size``, ``records``: ``out[:size]`` (``out``, a bytearray the scan writes into and
  grows) holds that many record frames; ``events`` how many events they hold;
* ``last``: ``(offset, log_pos, ts_s, domain, server_id, seq_no)`` of the last record's
  transaction, or None.

The scan never skips: a transaction at or before ``(after_file, after_offset)`` or with a
GTID of ``gtid_domain`` not above ``gtid_floor`` (or of another domain, when ``gtid_domain``
is not -1) is returned to Python, which asks the task whether to skip it.

``stamp`` assigns seqs and CRC32Cs to the frames when the store appends them (see
``ChangeLog.append_frames``).
"""

from headwater._native._ingest import LIMIT, MORE, SHAPE, SLOW, Scanner, crc32, crc32c, stamp

__all__ = ["LIMIT", "MORE", "SHAPE", "SLOW", "Scanner", "crc32", "crc32c", "stamp"]

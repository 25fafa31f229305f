"""Framing a live binlog dump: headwater's fast path against a bare socket drain.

Starts a sandbox MariaDB, writes a binlog of wide rows (about 300 MB; 50 MB with
``--quick``), then drains the same non-blocking dump from the first binlog file several
times, alternating:

* ``raw``: a PyMySQL connection registers, sends the same COM_BINLOG_DUMP, and loops
  ``sock.recv_into`` into one reused buffer until the EOF packet -- the ceiling of any
  Python reader (no framing at all);
* ``headwater``: :class:`headwater.binlog.client.BinlogClient`, which frames every packet
  and event, verifies each CRC32 and yields a ClientEvent with its coordinates; once more
  with ``verify_checksums=False``.

Both are timed from just after the dump command is sent to the EOF packet (the best of
the rounds is kept). The last line is ``framing_vs_raw_socket=<headwater MB/s / raw MB/s>``;
the target is at least 0.7.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from headwater.binlog._packets import (
    BINLOG_DUMP_NON_BLOCK,
    BINLOG_SEND_ANNOTATE_ROWS_EVENT,
    COM_BINLOG_DUMP,
    COM_REGISTER_SLAVE,
    EventFramer,
    binlog_dump,
    register_slave,
)
from headwater.binlog.client import BinlogClient, ClientOptions
from headwater.position import BinlogCoordinate
from headwater.sandbox import MariadbSandbox, SandboxOptions

MB = 1024 * 1024


def generate(server: MariadbSandbox, target_mb: int) -> int:
    """Fill the binlog with ~target_mb of row events; returns the binlog bytes written."""
    server.execute(
        "CREATE DATABASE bench",
        "CREATE TABLE bench.wide (id INT PRIMARY KEY, a VARCHAR(600), b VARCHAR(600),"
        " n BIGINT, d DATETIME(6))",
    )
    first = 0
    batch = 20000
    while True:
        total = sum(int(size) for _, size in server.query("SHOW BINARY LOGS"))
        if total >= target_mb * MB:
            server.execute("FLUSH BINARY LOGS")
            return total
        server.execute(
            "INSERT INTO bench.wide SELECT seq, RPAD(MD5(seq), 500, 'x'), "
            "RPAD(SHA1(seq), 500, 'y'), seq * 7919, NOW(6) - INTERVAL seq SECOND "
            f"FROM seq_{first + 1}_to_{first + batch}",
            database="bench",
        )
        first += batch


def raw_drain(server: MariadbSandbox, file: str, buffer_size: int) -> tuple[int, int, float]:
    """Bytes of the dump, recv calls and seconds, reading the socket and nothing else."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            cur.execute("SET @mariadb_slave_capability = 4")
            cur.execute("SET @master_heartbeat_period = 5000000000")  # as ClientOptions
        conn._execute_command(COM_REGISTER_SLAVE, register_slave(9001, host="bench-raw"))
        conn._read_packet()
        flags = BINLOG_DUMP_NON_BLOCK | BINLOG_SEND_ANNOTATE_ROWS_EVENT
        conn._execute_command(COM_BINLOG_DUMP, binlog_dump(file, 4, 9001, flags))
        sock = conn._sock
        sock.settimeout(30)
        buf = bytearray(buffer_size)
        view = memoryview(buf)
        recv_into = sock.recv_into
        total = last = reads = 0
        began = ended = time.perf_counter()
        while True:
            n = recv_into(view)
            if n == 0:
                # MariaDB closes the connection after the EOF packet that ends a
                # non-blocking dump; the clock stops at the EOF packet, as for headwater.
                if bytes(view[last - 5 : last - 3]) != b"\xfe\x00":
                    raise RuntimeError("the dump did not end with an EOF packet")
                return total, reads, ended - began
            total += n
            last = n
            reads += 1
            if view[n - 5] == 0xFE:  # perhaps the EOF packet: note the time
                ended = time.perf_counter()
    finally:
        conn._force_close()


def headwater_drain(
    server: MariadbSandbox, file: str, buffer_size: int, *, verify: bool
) -> tuple[int, int, int, float]:
    """Bytes, recv calls, events and seconds of the same dump through BinlogClient."""
    options = ClientOptions(
        host=server.host,
        port=server.port,
        server_id=9002,
        start=BinlogCoordinate(file, 4),
        blocking=False,
        buffer_size=buffer_size,
        verify_checksums=verify,
        replica_host="bench-headwater",
    )
    with BinlogClient(options) as client:
        client.connect()  # preflight, register; its last step sends the dump command
        events = 0
        began = time.perf_counter()
        for _ in client.events():
            events += 1
        elapsed = time.perf_counter() - began
        if client.heartbeats:
            print(f"  ({client.heartbeats} heartbeat(s) in the dump, {client.last_heartbeat})")
        assert client.framer is not None
        if client.framer.buffers_allocated > 4:
            print(f"  ({client.framer.buffers_allocated} buffers allocated)")
        return client.bytes_received, client.framer.reads, events, elapsed


def in_memory(
    server: MariadbSandbox, file: str, buffer_size: int, rounds: int
) -> tuple[float, float]:
    """MB/s of copying the captured dump in 4 MiB reads, and of framing it the same way.

    Without a server to wait for, this is the CPU cost of framing alone: the live ratio
    can be close to 1 because the raw loop waits for the server most of the time.
    """
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
            cur.execute("SET @mariadb_slave_capability = 4")
        conn._execute_command(COM_REGISTER_SLAVE, register_slave(9003, host="bench-capture"))
        conn._read_packet()
        flags = BINLOG_DUMP_NON_BLOCK | BINLOG_SEND_ANNOTATE_ROWS_EVENT
        conn._execute_command(COM_BINLOG_DUMP, binlog_dump(file, 4, 9003, flags))
        chunks = []
        while chunk := conn._sock.recv(4 * MB):
            chunks.append(chunk)
    finally:
        conn._force_close()
    stream = memoryview(b"".join(chunks))
    size = len(stream)

    def reader() -> Callable[[memoryview], int]:
        at = 0

        def recv_into(view: memoryview) -> int:
            nonlocal at
            n = min(len(view), 4 * MB, size - at)
            view[:n] = stream[at : at + n]
            at += n
            return n

        return recv_into

    copy_best = frame_best = 0.0
    for _ in range(rounds):
        recv_into, buf = reader(), memoryview(bytearray(buffer_size))
        began = time.perf_counter()
        while recv_into(buf):
            pass
        copy_best = max(copy_best, size / MB / (time.perf_counter() - began))
        framer = EventFramer(reader(), buffer_size=buffer_size)
        began = time.perf_counter()
        for _ in framer.events():
            pass
        frame_best = max(frame_best, size / MB / (time.perf_counter() - began))
    return copy_best, frame_best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="~50 MB, finishes under a minute")
    parser.add_argument("--mb", type=int, help="binlog size to generate (default 300, quick 50)")
    parser.add_argument("--rounds", type=int, help="timed rounds of each reader")
    parser.add_argument("--buffer-mb", type=int, default=8)
    args = parser.parse_args()
    target = args.mb or (50 if args.quick else 300)
    rounds = args.rounds or (3 if args.quick else 5)
    buffer_size = args.buffer_mb * MB

    server = MariadbSandbox(SandboxOptions()).start()
    try:
        began = time.perf_counter()
        written = generate(server, target)
        print(f"binlog: {written / MB:.0f} MB written in {time.perf_counter() - began:.1f} s")
        file = str(server.query("SHOW BINARY LOGS")[0][0])
        raw_best = hw_best = nover_best = 0.0
        raw_bytes = events = 0
        for r in range(rounds):
            raw_bytes, raw_reads, raw_s = raw_drain(server, file, buffer_size)
            hw_bytes, hw_reads, events, hw_s = headwater_drain(
                server, file, buffer_size, verify=True
            )
            nv_bytes, _, _, nv_s = headwater_drain(server, file, buffer_size, verify=False)
            # the same bytes, give or take a heartbeat (the server sends one when its
            # dump thread waited a heartbeat period for the disk)
            assert abs(raw_bytes - hw_bytes) < 100 > abs(raw_bytes - nv_bytes), (
                raw_bytes,
                hw_bytes,
            )
            raw_best = max(raw_best, raw_bytes / MB / raw_s)
            hw_best = max(hw_best, hw_bytes / MB / hw_s)
            nover_best = max(nover_best, nv_bytes / MB / nv_s)
            print(
                f"round {r + 1}: raw {raw_bytes / MB / raw_s:5.0f} MB/s "
                f"({raw_bytes // raw_reads // 1024} KiB/read)   "
                f"headwater {hw_bytes / MB / hw_s:5.0f} MB/s "
                f"({hw_bytes // hw_reads // 1024} KiB/read)   "
                f"without CRC {nv_bytes / MB / nv_s:5.0f} MB/s"
            )
        print(f"dump: {raw_bytes / MB:.0f} MB, {events} events ({raw_bytes / events:.0f} B/event)")
        copy_rate, frame_rate = in_memory(server, file, buffer_size, rounds)
        print(f"raw recv_into loop:            {raw_best:7.0f} MB/s")
        print(f"headwater framing + CRC32:     {hw_best:7.0f} MB/s")
        print(f"headwater framing, no CRC:     {nover_best:7.0f} MB/s")
        print(
            f"in memory, no server: framing + CRC32 {frame_rate:.0f} MB/s (the framer's "
            f"ceiling; a plain copy of the same bytes runs at {copy_rate:.0f} MB/s)"
        )
        print(f"framing_no_crc_vs_raw_socket={nover_best / raw_best:.2f}")
        print(f"framing_vs_raw_socket={hw_best / raw_best:.2f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()

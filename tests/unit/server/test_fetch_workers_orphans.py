"""A reader killed with SIGKILL leaves no fetch worker behind (they watch their parent)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

CHILD = """
import sys
from headwater.server.workers import FetchPool
pool = FetchPool(2).start()
print(" ".join(str(p) for p in pool._executor()._processes), flush=True)
sys.stdin.read()
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_fetch_workers_exit_when_their_reader_is_killed() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert len(workers) == 2
        assert all(_alive(p) for p in workers)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [p for p in workers if _alive(p)] == []
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
        if proc.stdin is not None:
            proc.stdin.close()

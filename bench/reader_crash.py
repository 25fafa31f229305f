"""Soak of the reader's crash test: N rounds of SIGKILL + a damaged log tail + restart.

Runs ``tests/integration/test_reader_crash_tail.py`` (the CI version runs 20 rounds) with
``--rounds N`` (default 100; ``--quick``: 5, under a minute): a reader with
``durability: none`` is killed during a workload, the tail of its active segment truncated
or a byte flipped, and restarted; in the end every source transaction must be in the log
once, in order, and no seq a consumer saw may name another transaction. Last line:
``reader_crash rounds=N passed=1`` (0 if the test failed; its output is above).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="5 rounds")
    args = parser.parse_args()
    rounds = 5 if args.quick else args.rounds
    env = dict(os.environ, HEADWATER_CRASH_ROUNDS=str(rounds))
    test = (
        "tests/integration/test_reader_crash_tail.py"
        "::test_lost_tails_are_read_again_and_no_seq_is_reused"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", test, "-q", "-p", "no:cacheprovider", "-o", "timeout=0"],
        cwd=ROOT,
        env=env,
        check=False,
    )
    print(f"reader_crash rounds={rounds} passed={int(done.returncode == 0)}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())

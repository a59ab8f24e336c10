"""Start-up time of the ``veritune`` command line: ``--help`` at each level, in a fresh process.

    python benchmarks/bench_cli_help.py [--repeats 5]

Top-level and group help must answer without importing torch (target: under a second); a command's own
``--help`` imports only that command's module.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMANDS = [
    ["--help"],
    ["build", "--help"],
    ["eval", "--help"],
    ["build", "oric", "--help"],
    ["eval", "run", "--help"],
]


def time_command(argv: list[str], repeats: int) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "veritune.cli", *argv], cwd=REPO, env=env, check=True, capture_output=True
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("| command | median (s) | best (s) |")
    print("| --- | --- | --- |")
    for argv in COMMANDS:
        median, best = time_command(argv, args.repeats)
        print(f"| veritune {' '.join(argv)} | {median:.2f} | {best:.2f} |")


if __name__ == "__main__":
    main()

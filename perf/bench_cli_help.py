"""Start-up time of the ``veritune`` command line: ``--help`` at each level, in a fresh process.

    python perf/bench_cli_help.py [--repeats 5]

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


# What every `--help` cost before commands were imported lazily: building the parser with every command wired.
EAGER = ["-c", "from veritune.cli import build_parser; build_parser().format_help()"]


def time_command(argv: list[str], repeats: int) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, *argv] if argv[0] == "-c" else [sys.executable, "-m", "veritune.cli", *argv]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("| command | median (s) | best (s) |")
    print("| --- | --- | --- |")
    medians = {}
    for argv in [*COMMANDS, EAGER]:
        median, best = time_command(argv, args.repeats)
        medians[argv[0]] = medians.get(argv[0], median)
        label = "every command wired (what each --help cost before)" if argv is EAGER else f"veritune {' '.join(argv)}"
        print(f"| {label} | {median:.2f} | {best:.2f} |")
    lazy, eager = medians["--help"], medians["-c"]
    print(
        f"\nveritune --help: {lazy:.2f} s lazily vs {eager:.2f} s with every command wired ({eager / lazy:.0f}x); "
        "a command's own --help still imports that command's module (torch for most)"
    )


if __name__ == "__main__":
    main()

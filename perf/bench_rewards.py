"""Reward throughput: ORIC completions scored per second by ``accuracy + format``.

    python perf/bench_rewards.py [--completions 100000]

A GRPO step of the ORIC recipe scores 16 completions; the reward must stay far below 1% of a step.
"""

from __future__ import annotations

import argparse
import random
import time

from rewards import accuracy_reward, format_reward


def make_completions(count: int, seed: int = 0) -> tuple[list[list[dict[str, str]]], list[str]]:
    rng = random.Random(seed)
    shapes = [
        "<REASONING>{r}</REASONING><SOLUTION>{a}</SOLUTION>",
        "<REASONING>{r}</REASONING>\n<SOLUTION> {a}. </SOLUTION>",
        "{r} The answer is {a}.",
        "<SOLUTION>{a}</SOLUTION><SOLUTION>{a}</SOLUTION>",
    ]
    reasoning = "I look at the image and check every object against the question. " * 8  # ~256 tokens
    completions = [
        [{"role": "assistant", "content": rng.choice(shapes).format(r=reasoning, a=rng.choice(["yes", "no", "Yes"]))}]
        for _ in range(count)
    ]
    return completions, [rng.choice(["yes", "no"]) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=100_000)
    args = parser.parse_args()
    completions, solutions = make_completions(args.completions)
    start = time.perf_counter()
    accuracy_reward(completions, solutions)
    format_reward(completions)
    elapsed = time.perf_counter() - start
    per_second = args.completions / elapsed
    print(f"completions scored per second (accuracy + format, ~600-character completions): {per_second:,.0f}")
    print(f"time to score one ORIC GRPO step (16 completions): {16 / per_second * 1e6:.1f} us")


if __name__ == "__main__":
    main()

"""Answer extraction cost: the shared graders over 10,000 benchmark answers.

python perf/bench_answer_extraction.py
"""

from __future__ import annotations

import random
import time

from eval_hooks.answers import extract_count, extract_option
from eval_hooks.benchmarks.pope import pope_yes_no
from rewards.graders import extract_yes_no, grade_tagged_yes_no


def main() -> None:
    rng = random.Random(0)
    shapes = [
        "Yes.",
        "No, there is not.",
        "Yes, there is a {o} on the table.",
        "I don't see any {o} in the image.",
        "<REASONING>The {o} is small but visible.</REASONING><SOLUTION>yes</SOLUTION>",
        "There might be a {o}.",
    ]
    answers = [rng.choice(shapes).format(o=rng.choice(["cup", "dog", "traffic light"])) for _ in range(10_000)]
    print("| grader | ms per 10,000 answers |\n| --- | --- |")
    for name, grader in (
        ("extract_yes_no", extract_yes_no),
        ("pope_yes_no", pope_yes_no),
        ("grade_tagged_yes_no", grade_tagged_yes_no),
    ):
        start = time.perf_counter()
        for answer in answers:
            grader(answer)
        print(f"| {name} | {(time.perf_counter() - start) * 1000:.1f} |")

    options = {
        letter: f"{'Yes, I can' if letter == 'A' else 'No, but I can'} see a {o} in this image."
        for letter, o in zip("ABCDE", ["red cup", "blue cup", "dog", "wooden bench", "cat"])
    }
    mcq_shapes = [
        "B",
        "(c)",
        "The answer is D.",
        "E. No, but I can see a cat in this image.",
        "no, but I can see a dog in this image",
        "I am not sure.",
    ]
    mcq = [rng.choice(mcq_shapes) for _ in range(10_000)]
    start = time.perf_counter()
    for answer in mcq:
        extract_option(answer, options)
    print(f"| extract_option (five options) | {(time.perf_counter() - start) * 1000:.1f} |")
    count_shapes = [
        "3 [cup, cup, plate]",
        "There are seven chairs.",
        "IV",
        "I count 12 of them",
        "none",
        "I cannot tell.",
    ]
    counts = [rng.choice(count_shapes) for _ in range(10_000)]
    start = time.perf_counter()
    for answer in counts:
        extract_count(answer)
    print(f"| extract_count | {(time.perf_counter() - start) * 1000:.1f} |")


if __name__ == "__main__":
    main()

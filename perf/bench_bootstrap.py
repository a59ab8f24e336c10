"""The paired bootstrap of the demo's before/after rows: summed per-unit tallies against scoring each draw.

python perf/bench_bootstrap.py [--repeats 3]

``eval_hooks.bootstrap.metric_difference_intervals`` on items of the demo's sizes (the FINER yes/no probe's 1,654
pairs, ORIC-Bench's 120 questions asked with 4 paraphrases, 1,312 POPE questions; two models' answers drawn at
random), 1,000 resamples as the demo and ``veritune report`` draw them, one torch-free process: a benchmark with
additive counts (``Benchmark.counts``) sums each unit's tallies per draw; the other path, which a benchmark
without them takes, builds each drawn copy and scores it. The two are run alternately, and their rows compared
for equality (the same floats).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from figures import figures_table

from eval_hooks import bootstrap
from eval_hooks.base import EvalItem

ANSWERS = ["Yes.", "No", "yes, there is", "no.", "I cannot tell"]


def cases(rng: random.Random) -> dict[str, tuple[list[EvalItem], list[str]]]:
    """Items in each benchmark's shape at the demo's sizes, with the metrics the demo's table reads."""
    image = [Path("x.jpg")]
    finer = []
    for pair in range(1654):
        level, kind = pair % 7 + 1, ("obj", "attr", "rel")[pair % 3]
        for polarity in ("pos", "neg"):
            meta = {"label": "yes" if polarity == "pos" else "no", "level": level, "polarity": polarity}
            meta |= {"pair": f"p/{pair}/L{level}", "sample": f"p/{pair}", "negated": kind}
            finer.append(EvalItem(f"p/{pair}/L{level}/{polarity}", "Is ...?", image, 3, meta))
    oric = []
    for question in range(120):
        label = "yes" if question % 2 else "no"
        for paraphrase in range(4):
            meta = {"label": label, "paraphrase": paraphrase, "object_size": "small", "target_object": "cup"}
            oric.append(EvalItem(f"{question}/p{paraphrase}", "Question: ...", image, 8, meta))
    pope = [
        EvalItem(
            str(i), "Is there a cup in the image?", image, 16, {"label": rng.choice(["yes", "no"]), "subset": "random"}
        )
        for i in range(1312)
    ]
    return {
        "finer_yn": (finer, ["paired_accuracy_l3_l7", "pos_accuracy", "neg_accuracy_l3_l7"]),
        "oric_bench": (oric, ["macro/f1", "yes_proportion"]),
        "pope": (pope, ["accuracy"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(0)
    summed_statistic = bootstrap._summed_statistic
    times: dict[tuple[str, str], list[float]] = {}
    same = True
    for name, (items, metrics) in cases(rng).items():
        base = {item.id: rng.choice(ANSWERS) for item in items}
        trained = {item.id: rng.choice(ANSWERS) for item in items}
        for _ in range(args.repeats):
            rows = {}
            for side in ("summed tallies", "scored draws"):  # alternately
                bootstrap._summed_statistic = summed_statistic if side == "summed tallies" else lambda *a: None
                start = time.perf_counter()
                rows[side] = bootstrap.metric_difference_intervals(name, items, base, trained, metrics)
                times.setdefault((name, side), []).append(time.perf_counter() - start)
            bootstrap._summed_statistic = summed_statistic
            same &= rows["summed tallies"] == rows["scored draws"]
    print("| benchmark (items) | summed tallies, s (min / median) | scored draws, s (min / median) | times faster |")
    print("| --- | --- | --- | --- |")
    figures = []
    for name, (items, _) in cases(random.Random(0)).items():
        fast, slow = times[name, "summed tallies"], times[name, "scored draws"]
        ratio = statistics.median(slow) / statistics.median(fast)
        print(
            f"| {name} ({len(items)}) | {min(fast):.2f} / {statistics.median(fast):.2f} | "
            f"{min(slow):.2f} / {statistics.median(slow):.2f} | {ratio:.1f} |"
        )
        figures.append((f"{name} bootstrap, summed tallies (median)", statistics.median(fast), "s", "lower"))
    print(f"\nthe same rows, float for float, on every repeat: {same}\n")
    print(figures_table(figures))


if __name__ == "__main__":
    main()

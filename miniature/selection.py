"""``veritune demo-select``: choose the miniature GRPO recipe's replay ratio on the world's dev split.

The demo's benchmarks (ORIC-Bench and the POPE-random-style questions of the val split) must never pick a
hyperparameter. This command draws the same world with a third split, ``dev`` (images from the same scenes
that neither training nor the benchmarks see), builds ORIC-Bench's questions on it, and runs the demo's
GRPO stage once per candidate ``replay_ratio`` and seed, evaluating on dev only. The rule is fixed before
looking: keep the ratios whose mean dev POPE-random-style accuracy drops by at most ``--max-pope-drop``
points, and of those take the one with the largest mean dev ORIC-Bench macro-F1 gain (if none keeps POPE,
the one that loses least). The table and the choice go to ``OUT/selection.json`` and ``OUT/selection.txt``;
the recipe's ``replay_ratio`` is then set by hand, and the lab notebook records the run.

    veritune demo-select --seeds 0 1 2 --ratios 0 0.25 0.5 1

``--set KEY=VALUE`` (repeatable) overrides further GRPO recipe keys in every run of the sweep, so another
setting is compared on dev the same way: e.g. ``--ratios 0.5 --set dynamic_sampling=true --out
outputs/selection-ds`` against ``--ratios 0.5``, the comparison behind the demo recipe's DAPO dynamic sampling
(docs/LAB_NOTEBOOK_ARCHIVE.md#dynamic-sampling-rule).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from core.errors import UserError

RATIOS = (0.0, 0.25, 0.5, 1.0)
SEEDS = (0, 1, 2)
MAX_POPE_DROP = 2.0  # points of POPE-random-style accuracy (the bound)
DEV_TABLE = [("oric_bench", "macro/f1"), ("oric_bench", "yes_proportion"), ("pope", "accuracy")]


def choose_ratio(results: list[dict[str, Any]], max_pope_drop: float = MAX_POPE_DROP) -> float:
    """The selection rule on per-ratio means: the largest ORIC-Bench gain among the ratios whose POPE change
    is at least ``-max_pope_drop``; if there are none, the ratio with the smallest POPE drop.

    ``results`` holds one dict per ratio with ``ratio``, ``oric_gain`` and ``pope_change`` (means over seeds).
    """
    if not results:
        raise UserError("demo-select: no ratios to choose from")
    keeping = [row for row in results if row["pope_change"] >= -max_pope_drop]
    if keeping:
        return max(keeping, key=lambda row: (row["oric_gain"], -row["ratio"]))["ratio"]
    return max(results, key=lambda row: (row["pope_change"], -row["ratio"]))["ratio"]


def _ratio_name(ratio: float) -> str:
    return f"{ratio:g}".replace(".", "p")


def select_replay_ratio(
    out: Path,
    seeds: tuple[int, ...] = SEEDS,
    ratios: tuple[float, ...] = RATIOS,
    max_pope_drop: float = MAX_POPE_DROP,
    steps: int | None = None,
    overrides: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Run the dev-split sweep under ``out`` (one directory per seed, one GRPO run per ratio) and choose.
    ``overrides`` are ``KEY=VALUE`` recipe settings applied to every run."""
    from finetune.training import use_cpu_accelerator_without_gpu
    from miniature.stages import (
        announce_stage,
        build_oric,
        build_tiny_models,
        build_world,
        claim_demo_dir,
        demo_paths,
        pin_threads,
        results_table,
        train_grpo,
        warm_start,
    )

    use_cpu_accelerator_without_gpu()
    pin_threads()
    if any(ratio < 0 for ratio in ratios):
        raise UserError(f"--ratios: expected values >= 0, got {list(ratios)}")
    extra_keys: list[str] = []
    for item in overrides:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UserError(f"--set: expected KEY=VALUE, got {item!r}")
        extra_keys += [f"--{key}", value]
    out = out.resolve()
    for seed in seeds:
        claim_demo_dir(out / f"seed{seed}")
    runs: list[dict[str, Any]] = []
    for seed in seeds:
        seed_out = out / f"seed{seed}"
        paths = demo_paths(seed_out)
        announce_stage(f"seed {seed}: world (with its dev split), tiny models, base model, ORIC data, dev questions")
        build_world(paths, seed)
        build_tiny_models(paths, seed)
        warm_start(paths, seed_out, seed, use_cache=True)
        build_oric(paths, seed_out, seed, dev=True)
        for ratio in ratios:
            announce_stage(f"seed {seed}: GRPO with replay_ratio {ratio:g}, evaluated on the dev split")
            run = seed_out / f"grpo-replay{_ratio_name(ratio)}"
            extra = ("--replay_ratio", f"{ratio:g}", "--report_to", "none", *extra_keys)
            train_grpo(paths, steps, seed, split="dev", run=run, extra=extra)
            rows = {row["benchmark"] + " " + row["metric"]: row for row in results_table({"grpo": run}, DEV_TABLE)}
            runs.append(
                {
                    "seed": seed,
                    "ratio": ratio,
                    "oric_base": rows["oric_bench macro/f1"]["base"],
                    "oric_gain": rows["oric_bench macro/f1"]["difference"],
                    "yes_proportion": [rows["oric_bench yes_proportion"][key] for key in ("base", "trained")],
                    "pope_base": rows["pope accuracy"]["base"],
                    "pope_change": rows["pope accuracy"]["difference"],
                }
            )
    means = [
        {
            "ratio": ratio,
            "oric_gain": statistics.mean(run["oric_gain"] for run in runs if run["ratio"] == ratio),
            "pope_change": statistics.mean(run["pope_change"] for run in runs if run["ratio"] == ratio),
        }
        for ratio in ratios
    ]
    chosen = choose_ratio(means, max_pope_drop)
    return {
        "runs": runs,
        "means": means,
        "chosen": chosen,
        "max_pope_drop": max_pope_drop,
        "seeds": list(seeds),
        "overrides": list(overrides),
    }


def format_selection(selection: dict[str, Any]) -> str:
    """The per-seed dev table and the choice, as plain text."""
    lines = ["ratio  seed  dev ORIC-Bench macro-F1 (base, gain)  yes-proportion  dev POPE (base, change)"]
    for run in selection["runs"]:
        yes_base, yes_after = run["yes_proportion"]
        lines.append(
            f"{run['ratio']:<5g}  {run['seed']:<4}  {run['oric_base']:5.1f} {run['oric_gain']:+6.1f}"
            f"{'':20}{yes_base:5.1f} -> {yes_after:5.1f}  {run['pope_base']:5.1f} {run['pope_change']:+5.1f}"
        )
    lines.append("means over seeds:")
    for row in selection["means"]:
        lines.append(
            f"  ratio {row['ratio']:g}: ORIC-Bench gain {row['oric_gain']:+.1f}, POPE {row['pope_change']:+.1f}"
        )
    if selection.get("overrides"):
        lines.append(f"every run with: {' '.join(selection['overrides'])}")
    lines.append(
        f"chosen replay_ratio: {selection['chosen']:g} (largest mean gain with a mean POPE drop of at most "
        f"{selection['max_pope_drop']:g} points)"
    )
    return "\n".join(lines)

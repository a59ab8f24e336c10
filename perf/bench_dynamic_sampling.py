"""Cost of DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476, Sec. 3.2; ``dynamic_sampling`` in
``finetune/grpo_trainer.py``): GRPO with and without it, run alternately in one process tree, one torch thread.

    python perf/bench_dynamic_sampling.py [--repeats 3] [--steps 6] [--max-rounds 3]

The configuration is the miniature's GRPO batch (``recipes/miniature/tiny_oric_miniature.yaml``: 8 prompts x G = 8
completions of at most 8 tokens per optimizer step, plain prompts) on the tiny random-initialised Qwen3-VL
and the tests' ORIC fixture (32 questions). A tiny random model earns ORIC's accuracy reward by chance only,
so the reward is the tests' ``constant_on_yes_reward``: constant (zero spread) on the half of the questions
whose answer is "yes", 0 or 1 by a hash of the completion elsewhere; the miniature's own zero-spread share
is 41 to 71% (docs/LAB_NOTEBOOK_ARCHIVE.md#dynamic-sampling), so the figures here are of the same order, not the
miniature's.

Per side it prints, over the steps after the first of each run (warm-up): seconds per optimizer step
(TRL's logged ``step_time``, generation included), min and median; completions generated per step (the
configured 64 without; ``prompts_drawn`` x G with); informative groups trained per step (groups x (1 -
``frac_reward_zero_std``), TRL's own share of what was trained on); and the ratio of informative groups
per second, with over without.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))

PROMPTS, GENERATIONS = 8, 8


def grpo_run(model: Path, data: tuple[Path, Path], output_dir: Path, steps: int, extra: list[str]) -> None:
    command = [
        sys.executable,
        str(REPO_ROOT / "finetune" / "grpo.py"),
        "recipes/miniature/tiny_oric_miniature.yaml",
        "--model_name_or_path",
        str(model),
        "--dataset_path",
        str(data[0]),
        "--image_root",
        str(data[1]),
        "--replay_path",
        "",
        "--output_dir",
        str(output_dir),
        "--max_steps",
        str(steps),
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--reward_funcs",
        "learning_rewards.constant_on_yes_reward",
        "--reward_weights",
        "1.0",
        *extra,
    ]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests")]),
        WANDB_MODE="disabled",
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
    )
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"benchmark run failed: {' '.join(command)}\n{result.stderr[-3000:]}")


def step_rows(output_dir: Path) -> list[dict[str, float]]:
    """The per-step logs after the first step (warm-up)."""
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return [row for row in state["log_history"] if "step_time" in row][1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="runs per side, alternating")
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per run (the first is warm-up)")
    parser.add_argument("--max-rounds", type=int, default=3, help="dynamic_sampling_max_rounds")
    args = parser.parse_args()

    from conftest import write_oric_fixture

    from miniature.tiny.models import build_tiny_model

    sides = {
        "without": ["--dynamic_sampling", "false"],
        "with": ["--dynamic_sampling", "true", "--dynamic_sampling_max_rounds", str(args.max_rounds)],
    }
    rows: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_tiny_model("qwen3vl", root / "model", seed=0)
        data = write_oric_fixture(root / "data", num_items=32)
        for repeat in range(args.repeats):
            for side, extra in sides.items():
                output_dir = root / f"{side}-{repeat}"
                grpo_run(model, data, output_dir, args.steps, [*extra, "--seed", str(repeat)])
                rows[side] += step_rows(output_dir)

    print(
        f"GRPO, {PROMPTS} prompts x G = {GENERATIONS} completions per optimizer step, tiny Qwen3-VL, 1 torch thread; "
        f"{args.repeats} alternating runs of {args.steps} steps per side, the first step of each run excluded; "
        f"dynamic_sampling_max_rounds {args.max_rounds}\n"
    )
    print(
        "| dynamic sampling | s/step min | s/step median | completions generated/step (mean) | zero-spread share "
        "trained (mean) | informative groups/step (mean) | informative groups/s | rounds (mean, max) | steps at "
        "the round limit | measured |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    rates, medians = {}, {}
    for side, logged in rows.items():
        seconds = [row["step_time"] for row in logged]
        completions = [row.get("dynamic_sampling/prompts_drawn", PROMPTS) * GENERATIONS for row in logged]
        zero = [row["frac_reward_zero_std"] for row in logged]
        informative = [PROMPTS * (1 - share) for share in zero]
        rates[side], medians[side] = sum(informative) / sum(seconds), statistics.median(seconds)
        rounds = [row.get("dynamic_sampling/rounds", 1.0) for row in logged]
        limited = sum(row.get("dynamic_sampling/filled_groups", 0) > 0 for row in logged)
        print(
            f"| {side} | {min(seconds):.3f} | {medians[side]:.3f} | {statistics.mean(completions):.1f} | "
            f"{statistics.mean(zero):.2f} | {statistics.mean(informative):.2f} | {rates[side]:.3f} | "
            f"{statistics.mean(rounds):.2f}, {max(rounds):g} | {limited if side == 'with' else '-'} | {len(logged)} |"
        )
    print(f"\ninformative groups per second, with / without: {rates['with'] / rates['without']:.2f}")
    print(f"seconds per step, with / without (median): {medians['with'] / medians['without']:.2f}")


if __name__ == "__main__":
    main()

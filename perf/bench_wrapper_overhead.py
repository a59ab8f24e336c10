"""Wrapper overhead: the tiny GRPO configuration through ``finetune/grpo.py`` and through a minimal
plain-TRL script (``perf/plain_trl_grpo.py``), same model, data, seed and steps, run alternately.

    python perf/bench_wrapper_overhead.py [--steps 8] [--repeats 2]

Prints the mean optimizer-step time of each (TRL's logged ``step_time``, first step excluded as warm-up)
and their ratio; the target is a ratio within 1.05.
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


def step_times(output_dir: Path) -> list[float]:
    """Per-step times: TRL's logged ``step_time`` for GRPO; for DPO (which logs none), the mean step time
    from the run's train_runtime (first-step warm-up included on both sides)."""
    state = json.loads((output_dir / "trainer_state.json").read_text())
    times = [row["step_time"] for row in state["log_history"] if "step_time" in row][1:]
    if times:
        return times
    runtime = next(row["train_runtime"] for row in state["log_history"] if "train_runtime" in row)
    return [runtime / state["global_step"]]


def run(command: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), WANDB_MODE="disabled", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"benchmark run failed: {' '.join(command)}\n{result.stderr[-2000:]}")


def commands(
    model: Path, data: Path, images: Path, finer: Path, tmp_path: Path, repeat: int, steps: int
) -> dict[str, tuple[list[str], Path]]:
    """The four runs of one repeat, in the order they run: runner name -> (command, output directory)."""
    common = ["--max_steps", str(steps), "--save_strategy", "no", "--report_to", "none"]
    grpo = [
        sys.executable,
        "finetune/grpo.py",
        "recipes/miniature/tiny_oric_demo.yaml",
        "--model_name_or_path",
        str(model),
    ]
    grpo += [
        "--dataset_path",
        str(data),
        "--image_root",
        str(images),
        "--output_dir",
        str(tmp_path / f"veritune-{repeat}"),
    ]
    grpo += [*common, "--max_prompt_length", "100000"]
    dpo = [
        sys.executable,
        "finetune/dpo.py",
        "recipes/miniature/tiny_finer_demo.yaml",
        "--model_name_or_path",
        str(model),
    ]
    dpo += ["--dataset_path", str(finer), "--output_dir", str(tmp_path / f"veritune-dpo-{repeat}"), *common]
    plain_grpo = [sys.executable, "perf/plain_trl_grpo.py", str(model), str(data), str(images)]
    plain_dpo = [sys.executable, "perf/plain_trl_dpo.py", str(model), str(finer)]
    return {
        "veritune GRPO": (grpo, tmp_path / f"veritune-{repeat}"),
        "plain TRL GRPO": ([*plain_grpo, str(tmp_path / f"plain-{repeat}"), str(steps)], tmp_path / f"plain-{repeat}"),
        "veritune DPO": (dpo, tmp_path / f"veritune-dpo-{repeat}"),
        "plain TRL DPO": (
            [*plain_dpo, str(tmp_path / f"plain-dpo-{repeat}"), str(steps)],
            tmp_path / f"plain-dpo-{repeat}",
        ),
    }


def print_report(times: dict[str, list[float]]) -> None:
    """The table of mean step times and the veritune / plain TRL ratios."""
    mean = {name: statistics.mean(values) for name, values in times.items()}
    print("| runner | mean step time (s) | steps measured |\n| --- | --- | --- |")
    for name, values in times.items():
        print(f"| {name} | {mean[name]:.3f} | {len(values)} |")
    print(f"\nGRPO ratio veritune / plain TRL: {mean['veritune GRPO'] / mean['plain TRL GRPO']:.3f} (target <= 1.05)")
    print(f"DPO ratio veritune / plain TRL: {mean['veritune DPO'] / mean['plain TRL DPO']:.3f} (target <= 1.05)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from conftest import write_oric_fixture

    from miniature.tiny.models import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        model = build_tiny_model("qwen3vl", tmp_path / "model", seed=0)
        data, images = write_oric_fixture(tmp_path / "data", num_items=16)
        sys.path.insert(0, str(REPO_ROOT / "tests"))
        from helpers import write_finer_fixture

        finer = write_finer_fixture(tmp_path / "finer", num_images=16)
        times: dict[str, list[float]] = {}
        for repeat in range(args.repeats):
            for name, (command, out) in commands(model, data, images, finer, tmp_path, repeat, args.steps).items():
                run(command)
                times.setdefault(name, []).extend(step_times(out))
    print_report(times)


if __name__ == "__main__":
    main()

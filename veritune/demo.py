"""``veritune demo``: the embedded default main job, end to end on a CPU, offline.

1. a tiny random-initialised Qwen3-VL (``veritune tiny-model``) and a tiny CLIP for negative mining;
2. a synthetic COCO-format image world (``veritune build synthetic-world``);
3. ORIC training and benchmark files from it (``veritune build oric`` / ``oric-bench``);
4. GRPO on ``recipes/tiny_oric_demo.yaml`` through ``finetune/grpo.py`` (accelerate, one CPU process);
5. ORIC-Bench on the base and the trained model (``veritune eval run``).

Every step is skipped when its output already exists, so an interrupted demo resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from veritune.errors import UserError

REPO_ROOT = Path(__file__).resolve().parent.parent
RECIPE = "recipes/tiny_oric_demo.yaml"
ACCELERATE_CONFIG = "recipes/accelerate/single.yaml"


def _step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def _run(command: list[str]) -> None:
    print("$ " + " ".join(command), flush=True)
    env = dict(os.environ)
    env.setdefault("WANDB_MODE", "offline")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(command, cwd=REPO_ROOT, env=env)
    if result.returncode != 0:
        raise UserError(f"demo step failed (exit {result.returncode}): {' '.join(command)}")


def _veritune(*args: str) -> None:
    _run([sys.executable, "-m", "veritune.cli", *args])


def run_demo(out: Path, steps: int | None = None) -> dict[str, Path]:
    """Run the whole demo under ``out`` (the recipe expects ``outputs/demo``) and return where things went."""
    from veritune.tiny_clip import build_tiny_clip
    from veritune.tiny_models import build_tiny_model

    out = out if out.is_absolute() else REPO_ROOT / out
    paths = {
        "model": out / "tiny-qwen3vl",
        "clip": out / "tiny-clip",
        "world": out / "world",
        "oric_train": out / "oric" / "oric_train.json",
        "oric_bench": out / "oric-bench" / "oric_bench.json",
        "run": out / "grpo",
        "eval": out / "eval",
    }

    _step("1/5 tiny models (random-initialised, built offline)")
    if not (paths["model"] / "model.safetensors").is_file():
        build_tiny_model("qwen3vl", paths["model"], seed=0)
    if not (paths["clip"] / "config.json").is_file():
        build_tiny_clip(paths["clip"], seed=0)
    print(f"tiny Qwen3-VL: {paths['model']}\ntiny CLIP: {paths['clip']}")

    _step("2/5 synthetic COCO-format image world")
    if not (paths["world"] / "val" / "instances.json").is_file():
        _veritune("build", "synthetic-world", "--out", str(paths["world"]))

    _step("3/5 ORIC training and benchmark files (co-occurrence judge, CLIP-guided negatives)")
    if not paths["oric_train"].is_file():
        _veritune(
            "build", "oric",
            "--annotations", str(paths["world"] / "train" / "instances.json"),
            "--image-root", str(paths["world"] / "train" / "images"),
            "--out", str(paths["oric_train"]),
            "--num-yes", "32", "--num-no", "32", "--yes-per-image", "1", "--no-per-image", "1",
            "--judge", "cooccurrence", "--judge-threshold", "0.5", "--clip-model", str(paths["clip"]),
            "--clip-cache", str(out / "cache" / "clip"), "--review-html", str(out / "oric" / "review.html"),
        )  # fmt: skip
    if not paths["oric_bench"].is_file():
        _veritune(
            "build", "oric-bench",
            "--annotations", str(paths["world"] / "val" / "instances.json"),
            "--image-root", str(paths["world"] / "val" / "images"),
            "--out", str(paths["oric_bench"]),
            "--num-yes", "24", "--num-no", "24", "--yes-per-image", "1", "--no-per-image", "1",
            "--judge", "cooccurrence", "--judge-threshold", "0.5", "--clip-model", str(paths["clip"]),
            "--clip-cache", str(out / "cache" / "clip"),
        )  # fmt: skip
    _veritune("build", "check-leakage", str(paths["oric_train"]), str(paths["oric_bench"]))

    _step("4/5 GRPO Visual-RFT on the tiny model")
    overrides = [
        "--model_name_or_path", str(paths["model"]),
        "--dataset_path", str(paths["oric_train"]),
        "--image_root", str(paths["world"] / "train" / "images"),
        "--output_dir", str(paths["run"]),
        "--resume_from_checkpoint", "auto",
        # the eval hook: ORIC-Bench (R1 prompt) on a few questions after every checkpoint save
        "--eval_on_save", "true", "--eval_benchmarks", "oric_bench_r1", "--eval_limit", "12",
        "--eval_data", f"oric_bench_r1={paths['oric_bench']}", "--eval_image_root", str(paths["world"] / "val" / "images"),
    ]  # fmt: skip
    if steps is not None:
        overrides += ["--max_steps", str(steps)]
    launcher = [sys.executable, "-m", "veritune.launch"]  # accelerate launch, without its traceback on failure
    if (REPO_ROOT / ACCELERATE_CONFIG).is_file():
        launcher += ["--config_file", ACCELERATE_CONFIG]
    else:
        launcher += ["--num_processes", "1", "--cpu", "--mixed_precision", "no"]
    _run([*launcher, "finetune/grpo.py", RECIPE, *overrides])

    _step("5/5 ORIC-Bench before and after training")
    for name, model in (("base", paths["model"]), ("trained", paths["run"])):
        _veritune(
            "eval", "run", "--model", str(model), "--benchmarks", "oric_bench_r1",
            "--data", f"oric_bench_r1={paths['oric_bench']}", "--image-root", str(paths["world"] / "val" / "images"),
            "--out", str(paths["eval"] / name),
            "--force",  # a rerun after further training replaces the earlier model's answers (a same-model rerun resumes)
        )  # fmt: skip
    _veritune("report", str(paths["run"]))
    _summarise(paths)
    return paths


def _summarise(paths: dict[str, Path]) -> None:
    state = json.loads((paths["run"] / "trainer_state.json").read_text())
    rewards = [row["reward"] for row in state["log_history"] if "reward" in row]
    print("\n==> done")
    print(f"checkpoint:        {paths['run']}")
    print(f"training log:      {paths['run'] / 'trainer_state.json'}  (W&B offline run under {paths['run'] / 'wandb'})")
    if rewards:
        head, tail = rewards[: max(1, len(rewards) // 4)], rewards[-max(1, len(rewards) // 4) :]
        print(f"reward (acc+fmt):  {sum(head) / len(head):.2f} in the first steps -> {sum(tail) / len(tail):.2f} in the last")
    for name in ("base", "trained"):
        metrics_file = paths["eval"] / name / "oric_bench_r1" / "metrics.json"
        if metrics_file.is_file():
            metrics = json.loads(metrics_file.read_text())["metrics"]
            shown = ", ".join(f"{k}={metrics[k]:.1f}" for k in ("macro/f1", "yes/f1", "no/f1", "yes_proportion"))
            print(f"ORIC-Bench {name:8s} {shown}  ({metrics_file})")
    print(f"eval hook results: {paths['run'] / 'eval'} (one folder per checkpoint)")
    print(f"report:            {paths['run'] / 'report.html'} (open it in a browser; works offline)")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune demo``."""
    parser = subparsers.add_parser("demo", help="the embedded default: tiny model + generated data -> GRPO -> eval")
    parser.add_argument("--out", type=Path, default=Path("outputs/demo"), help="where everything is written")
    parser.add_argument("--steps", type=int, default=None, help="override the recipe's max_steps")
    parser.set_defaults(handler=lambda args: run_demo(args.out, args.steps) and 0)

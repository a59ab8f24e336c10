"""Shared helpers for tests that run the real entry points in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def entry_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess entry point: offline, quiet, importing this checkout and tests/."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests"), env.get("PYTHONPATH", "")])
    env.setdefault("WANDB_MODE", "offline")
    env.setdefault("WANDB_SILENT", "true")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def run_entry(script: str, *args: str | Path, timeout: int = 600, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python finetune/<script> args...`` from the repository root."""
    command = [sys.executable, str(REPO_ROOT / "finetune" / script), *map(str, args)]
    return subprocess.run(command, cwd=REPO_ROOT, env=entry_env(**env), capture_output=True, text=True, timeout=timeout)


def log_history(output_dir: Path) -> list[dict[str, Any]]:
    """The trainer's log history, from the newest checkpoint's ``trainer_state.json``."""
    states = sorted(output_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    return json.loads(states[-1].read_text())["log_history"]


def write_finer_fixture(out_dir: Path, num_images: int = 8) -> Path:
    """A small `veritune build finer` dataset directory from the hand-written scene graph of test_finer_builder."""
    from PIL import Image
    from test_finer_builder import GRAPH

    from data_builders.finer.build import build_finer_from_scene_graphs

    images = out_dir.parent / f"{out_dir.name}-images"
    images.mkdir(parents=True)
    for index in range(num_images):
        Image.new("RGB", (48, 48), (index * 30, 60, 90)).save(images / f"{index}.jpg")
    graphs = out_dir.parent / f"{out_dir.name}-graphs.json"
    graphs.write_text(json.dumps([{**GRAPH, "image": f"{i}.jpg"} for i in range(num_images)]))
    build_finer_from_scene_graphs(graphs, images, out_dir)
    return out_dir


class _AnswerBackend:
    """A generation backend with fixed answers (the runner's protocol, no model): the eval files of a run
    as the eval hook writes them, without the cost of generating."""

    name = "fixed"
    model_name = "fixed-answers"

    def __init__(self, answer: Any) -> None:
        self.answer = answer  # item -> text
        self.tokenizer = lambda texts: {"input_ids": [text.split() for text in texts]}

    def generate(self, batch: list[Any]) -> list[str]:
        return [self.answer(item) for item in batch]


def write_report_run(run_dir: Path, steps: tuple[int, ...] = (0, 10, 20)) -> Path:
    """A GRPO run directory as training and the eval hook leave it: ``trainer_state.json`` with TRL's GRPO
    keys (``beta: 0``: a loss of about 1e-9, a constant learning rate of 1e-4, per-function rewards with long
    names), and ``eval/checkpoint-N/{oric_bench,pope}/`` written by the real scorers on a few images, the
    answers improving with the step; one image is deleted after scoring, as when a data folder moves."""
    from PIL import Image

    from eval_hooks.evaluate import evaluate_prepared
    from eval_hooks.prepare import prepare_benchmark

    images = run_dir.parent / f"{run_dir.name}-images"
    images.mkdir(parents=True, exist_ok=True)
    colours = ["red", "green", "blue", "orange", "purple", "gray"]
    for index, colour in enumerate(colours):
        Image.new("RGB", (96 + 8 * index, 72), colour).save(images / f"COCO_val2014_{index:012d}.jpg")
    oric = [
        {
            "id": index,
            "image": f"COCO_val2014_{index:012d}.jpg",
            "target_object": colour,
            "problem": [
                f"Is there a {colour} object in the image?",
                f"Does the image contain a {colour} object?",
                f"Can you see a {colour} object here?",
            ],
            "solution": "<SOLUTION>yes</SOLUTION>" if index % 2 == 0 else "<SOLUTION>no</SOLUTION>",
            "object_size": ("small", "medium", "large")[index % 3],
        }
        for index, colour in enumerate(colours)
    ]
    (images.parent / f"{run_dir.name}-oric.json").write_text(json.dumps(oric))
    pope = [
        {
            "question_id": 2 * index + k + 1,
            "image": f"COCO_val2014_{index:012d}.jpg",
            "text": f"Is there a {c}?",
            "label": label,
        }
        for index, c in enumerate(colours)
        for k, label in enumerate(("yes", "no"))
    ]
    pope_file = images.parent / f"{run_dir.name}-coco_pope_random.json"
    pope_file.write_text("\n".join(json.dumps(record) for record in pope))
    for step in steps:

        def answer(item: Any, step: int = step) -> str:
            right = (sum(map(ord, item.id)) + step) % 4 != 0 or step == steps[-1]
            label = item.meta["label"]
            said = label if right else ("no" if label == "yes" else "yes")
            return f"{said.capitalize()}, there is {'a' if said == 'yes' else 'no'} such object in the image."

        for name, data in (("oric_bench", images.parent / f"{run_dir.name}-oric.json"), ("pope", pope_file)):
            prepared = prepare_benchmark(name, data={name: data}, image_root=images)
            evaluate_prepared(_AnswerBackend(answer), prepared, run_dir / "eval" / f"checkpoint-{step}")
    history = []
    for step in range(1, steps[-1] + 1):
        progress = step / steps[-1]
        history.append(
            {
                "step": step,
                "epoch": progress,
                "loss": (-1) ** step * 4e-8 * (1 - progress) + 1e-9,
                "grad_norm": 0.8 - 0.3 * progress,
                "learning_rate": 1e-4,
                "num_tokens": 900.0 * step,
                "completions/mean_length": 40 + 10 * progress,
                "rewards/plain_accuracy_reward/mean": 0.3 + 0.5 * progress,
                "rewards/plain_accuracy_reward/std": 0.4,
                "rewards/tagged_format_reward/mean": 0.6 + 0.3 * progress,
                "reward": 0.9 + 0.8 * progress,
                "reward_std": 0.5,
                "kl": 0.0,
                "entropy": 1.2 - 0.2 * progress,
            }
        )
    (run_dir / "trainer_state.json").write_text(json.dumps({"log_history": history, "global_step": steps[-1]}))
    (images / "COCO_val2014_000000000005.jpg").unlink()  # a sample whose image has gone: its name is shown
    return run_dir


WORKER_SITECUSTOMIZE = """\
import json, os, sys
if os.path.basename(sys.argv[0]) in ("grpo.py", "dpo.py", "sft.py"):
    with open(os.environ["VERITUNE_TEST_WORKERS"], "a") as handle:
        handle.write(sys.argv[0] + "\\n")
    if os.environ.get("VERITUNE_TEST_WORKER_ARGV"):
        with open(os.environ["VERITUNE_TEST_WORKER_ARGV"], "a") as handle:
            handle.write(json.dumps({"argv": sys.argv, "hf_token": os.environ.get("HF_TOKEN")}) + "\\n")
"""


def run_launch(tmp_path: Path, *argv: str | Path, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``veritune launch argv`` from the repository root, and the training scripts its workers started (recorded by
    a ``sitecustomize`` every Python process of the launch runs at start-up). ``DS_ACCELERATOR`` is left for the
    launcher to set, as in a user's shell."""
    hooks = tmp_path / "worker-hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(WORKER_SITECUSTOMIZE)
    workers = tmp_path / "workers.txt"
    environment = entry_env(**env)
    environment.pop("DS_ACCELERATOR", None)
    environment["PYTHONPATH"] = os.pathsep.join([str(hooks), environment["PYTHONPATH"]])
    environment["VERITUNE_TEST_WORKERS"] = str(workers)
    command = [sys.executable, "-m", "veritune.cli", "launch", *map(str, argv)]
    result = subprocess.run(command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=600)
    return result, workers.read_text().splitlines() if workers.is_file() else []

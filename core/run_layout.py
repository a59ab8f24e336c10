"""The layout of a training run directory, shared by training, ``eval watch``, the eval hook and the report.

::

    RUN_DIR/
      checkpoint-N/              a Trainer checkpoint (CHECKPOINT_NAME)
      trainer_state.json         written when training ends
      wandb_run.json             the W&B run to log into (WANDB_RUN_FILE)
      eval/checkpoint-N/<benchmark>/{predictions.jsonl,metrics.json}   (checkpoint_eval_dir)

A checkpoint has two levels of completeness: it is *saved* once its ``trainer_state.json`` exists (the
Trainer writes it last, so its weights are there: enough to evaluate it), and *resumable* once its
optimizer state is saved as well (enough to continue training from it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")
WANDB_RUN_FILE = "wandb_run.json"  # written by finetune/model_card.py's RunConfigCallback
# In eval/checkpoint-N/: that checkpoint's metrics reached the training's W&B run (written by the eval hook and
# by `eval watch`; `eval watch` counts a checkpoint as done only with it when the run logs to W&B).
WANDB_LOGGED_FILE = "wandb_logged.json"
TRAINER_STATE_FILE = "trainer_state.json"
EVAL_DIR = "eval"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors", "pytorch_model.bin")


def checkpoint_name(step: int) -> str:
    return f"checkpoint-{step}"


def checkpoint_step(path: str | Path) -> int | None:
    """N of a ``checkpoint-N`` path; None for any other name."""
    match = CHECKPOINT_NAME.match(Path(path).name)
    return int(match.group(1)) if match else None


def checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Every ``checkpoint-N`` directory of ``run_dir`` with its step, oldest first (complete or not)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [
        (step, path) for path in run_dir.iterdir() if path.is_dir() and (step := checkpoint_step(path)) is not None
    ]
    return sorted(found)


def is_saved_checkpoint(path: str | Path) -> bool:
    """The checkpoint is completely written: the Trainer saves ``trainer_state.json`` last."""
    return (Path(path) / TRAINER_STATE_FILE).is_file()


def is_complete_checkpoint(path: str | Path) -> bool:
    """A checkpoint can be resumed from when its weights, trainer state and optimizer state were all saved."""
    path = Path(path)
    has_weights = any((path / name).exists() for name in WEIGHT_FILES)
    has_optimizer = (path / "optimizer.pt").is_file() or any(path.glob("global_step*"))
    return has_weights and is_saved_checkpoint(path) and has_optimizer


def checkpoint_eval_dir(run_dir: str | Path, step: int) -> Path:
    """Where the evaluation of checkpoint ``step`` goes: ``RUN_DIR/eval/checkpoint-N``."""
    return Path(run_dir) / EVAL_DIR / checkpoint_name(step)


def collect_eval(run_dir: Path) -> dict[str, dict[int, dict[str, Any]]]:
    """``{benchmark: {step: metrics.json content}}`` from ``RUN_DIR/eval/checkpoint-N/<benchmark>/``."""
    from collections import defaultdict

    from core.errors import UserError

    results: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for step, checkpoint in checkpoints(run_dir / EVAL_DIR):
        for metrics_file in checkpoint.glob("*/metrics.json"):
            try:
                content = json.loads(metrics_file.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, OSError) as err:
                raise UserError(f"{metrics_file}: not a readable metrics file ({err})") from None
            if not isinstance(content, dict) or not isinstance(content.get("metrics"), dict):
                raise UserError(f"{metrics_file}: expected a JSON object with a 'metrics' object")
            results[metrics_file.parent.name][step] = content
    return {name: dict(sorted(by_step.items())) for name, by_step in sorted(results.items())}

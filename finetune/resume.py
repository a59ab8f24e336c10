"""Resuming a run: the checkpoint to resume from, a finished run recognised (a rerun is a no-op), and a
run resumed from the checkpoint of its last step stopped before it steps past it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainingArguments

from core.errors import UserError
from core.run_layout import WEIGHT_FILES, is_complete_checkpoint
from core.run_layout import checkpoints as run_checkpoints

logger = logging.getLogger("veritune")


def find_resumable_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete ``checkpoint-N`` under ``output_dir``; incomplete ones are skipped with a warning.

    Raises:
        UserError: checkpoints exist but none is complete.
    """
    output_dir = Path(output_dir)
    checkpoints = [path for _, path in reversed(run_checkpoints(output_dir))]
    for checkpoint in checkpoints:
        if is_complete_checkpoint(checkpoint):
            return checkpoint
        logger.warning(
            "skipping incomplete checkpoint %s (weights, trainer state or optimizer state missing)", checkpoint
        )
    if checkpoints:
        raise UserError(
            f"{output_dir}: no complete checkpoint to resume from ({len(checkpoints)} incomplete); "
            "remove them or choose a fresh output_dir to start over"
        )
    return None


def resume_checkpoint(training_args: TrainingArguments) -> str | None:
    """What to pass to ``trainer.train(resume_from_checkpoint=...)``.

    ``auto`` resumes from the newest complete checkpoint in ``output_dir`` and starts fresh when there is
    none yet; any other value is a checkpoint path, used as given.
    """
    value = training_args.resume_from_checkpoint
    if value is None:
        return None
    if value == "auto":
        found = find_resumable_checkpoint(training_args.output_dir)
        if found is None:
            logger.info(
                "resume_from_checkpoint: auto found no checkpoint in %s; starting fresh", training_args.output_dir
            )
            return None
        logger.info("resuming from %s", found)
        return str(found)
    if not Path(value).is_dir():
        raise UserError(f"resume_from_checkpoint: {value} is not a checkpoint directory")
    return value


class AtLastStep(Exception):
    """Raised before a resumed run would step past its last step (its checkpoint already is the end)."""


class StopAtLastStep(TrainerCallback):
    """Stop a run resumed from the checkpoint of its last step before it takes a step past ``max_steps``.

    The Trainer only checks ``max_steps`` after a step, so a run resumed from ``checkpoint-<max_steps>``
    (killed between its last checkpoint and its final save) would otherwise train one step too many.
    """

    def on_step_begin(self, args: TrainingArguments, state: Any, control: Any, **kwargs: Any) -> None:
        if state.max_steps > 0 and state.global_step >= state.max_steps:
            raise AtLastStep


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def finished_run(training_args: TrainingArguments) -> dict[str, Any] | None:
    """The final trainer state of ``output_dir`` when it already holds this run, finished: final weights,
    train metrics and a state at the last step (``max_steps``, or the same number of epochs); else None.
    Only a run asked to resume (``resume_from_checkpoint``) is recognised as finished."""
    if training_args.resume_from_checkpoint is None:
        return None
    output_dir = Path(training_args.output_dir)
    state = _read_state(output_dir)
    if (
        state is None
        or not (output_dir / "train_results.json").is_file()
        or not any((output_dir / n).exists() for n in WEIGHT_FILES)
    ):
        return None
    step, last = state.get("global_step", 0), state.get("max_steps", -1)
    if training_args.max_steps > 0:
        done = step >= training_args.max_steps
    else:
        done = step >= last > 0 and state.get("num_train_epochs") == training_args.num_train_epochs
    return state if done else None


def report_finished_run(training_args: TrainingArguments) -> bool:
    """True, after saying so, when ``output_dir`` already holds this run finished (entry scripts call this
    before loading a model: rerunning a finished run is a no-op)."""
    state = finished_run(training_args)
    if state is None:
        return False
    logger.warning(
        "%s already holds this run, finished at step %d of %d: nothing to do (choose another output_dir, or remove it, "
        "to train again)",
        training_args.output_dir,
        state["global_step"],
        state.get("max_steps", state["global_step"]),
    )
    return True


def train_loss(log_history: list[dict[str, Any]]) -> float:
    """The mean loss over every step of the run, from its logged losses (each the mean of its interval)."""
    total, previous, last = 0.0, 0, 0
    for row in log_history:
        if "loss" in row and "step" in row:
            total += row["loss"] * (row["step"] - previous)
            previous = last = row["step"]
    return total / last if last else 0.0

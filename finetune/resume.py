"""Resuming a run: a rerun of the same settings resumes from its newest complete checkpoint (with or without
``resume_from_checkpoint: auto``, as open-r1's scripts do), reports a finished run and does nothing, or, stopped
before its first complete checkpoint, starts over in one line; a run resumed from the checkpoint of its last step
stops before it steps past it. Starting over a run that could resume takes ``overwrite_output_dir: true``."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainingArguments

from core.errors import UserError
from core.io import atomic_write_text
from core.run_layout import WEIGHT_FILES, checkpoint_step, is_complete_checkpoint, is_saved_checkpoint
from core.run_layout import checkpoints as run_checkpoints
from finetune.console import TRAIN_LOG_FILE
from finetune.run_dir import holds_run

logger = logging.getLogger("veritune")

START_OVER = "--overwrite_output_dir true"  # the one way to start over a run that could resume or is finished


def find_resumable_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete ``checkpoint-N`` under ``output_dir``; incomplete ones are skipped with a warning.
    None when there is none: no checkpoint, or only ones cut off mid-save (no ``trainer_state.json``, which the
    Trainer writes last), which a rerun removes before it starts over.

    Raises:
        UserError: checkpoints were saved but none can be resumed from (no optimizer state: ``save_only_model``).
    """
    output_dir = Path(output_dir)
    checkpoints = [path for _, path in reversed(run_checkpoints(output_dir))]
    for checkpoint in checkpoints:
        if is_complete_checkpoint(checkpoint):
            return checkpoint
        logger.warning(
            "skipping incomplete checkpoint %s (weights, trainer state or optimizer state missing)", checkpoint
        )
    saved = [checkpoint for checkpoint in checkpoints if is_saved_checkpoint(checkpoint)]
    if saved:
        raise UserError(
            f"{output_dir}: no checkpoint to resume from ({len(saved)} saved without optimizer state); "
            f"add {START_OVER} to start over, or choose another output_dir"
        )
    return None


def _checkpoint_step(checkpoint: Path) -> int:
    """The step a checkpoint was saved at: its trainer state's, else its name's."""
    state = _read_state(checkpoint) or {}
    step = state.get("global_step")
    return step if isinstance(step, int) else (checkpoint_step(checkpoint) or 0)


def keep_train_log_until(output_dir: Path, step: int | None) -> None:
    """Cut ``train_log.jsonl`` back to the rows of steps up to ``step`` (the checkpoint a run resumes from), so
    that the resumed run's rows follow them once; ``step`` None removes it (a run that starts over)."""
    log = output_dir / TRAIN_LOG_FILE
    if not log.is_file():
        return
    if step is None:
        log.unlink()
        return
    kept = []
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            row_step = json.loads(line).get("step")
        except (ValueError, AttributeError):
            continue  # a line cut off by the kill
        if isinstance(row_step, int) and row_step <= step:
            kept.append(line + "\n")
    atomic_write_text(log, "".join(kept))


def last_logged_step(output_dir: str | Path) -> int:
    """The newest step ``train_log.jsonl`` holds (0 without one): how far the run's logs, W&B's included, got
    before it stopped (read before :func:`resume_checkpoint` cuts the log back to the checkpoint's step)."""
    log = Path(output_dir) / TRAIN_LOG_FILE
    if not log.is_file():
        return 0
    last = 0
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            step = json.loads(line).get("step")
        except (ValueError, AttributeError):
            continue  # a line cut off by the kill
        if isinstance(step, int):
            last = max(last, step)
    return last


_NO_RESUME = frozenset({"false", "no", "none", "off"})


def resume_checkpoint(training_args: TrainingArguments) -> str | None:
    """What to pass to ``trainer.train(resume_from_checkpoint=...)``, decided before anything is written (every
    entry script calls this through :func:`finetune.training.start_run`, after the run-directory check, which
    stopped a run with other settings and a finished run). The decision is stored back in
    ``training_args.resume_from_checkpoint``.

    Unset or ``auto``: resume from the newest complete checkpoint of ``output_dir`` (this run's: the check made
    sure of it); without one, start fresh, and where ``output_dir`` holds this run stopped before a complete
    checkpoint, start over, its train log and cut-off checkpoints removed. Any other value is a checkpoint path,
    used as given. ``train_log.jsonl`` keeps the rows up to the step resumed from. To start over a run that can
    resume, ``overwrite_output_dir: true`` (:func:`finetune.run_dir.claim_run_dir`).

    Raises:
        UserError: a value that names no checkpoint directory (``false`` and the like included: a run resumes
            by default, ``overwrite_output_dir`` starts it over), or saved checkpoints none of which can resume.
    """
    value = training_args.resume_from_checkpoint
    output_dir = Path(training_args.output_dir)
    main = training_args.process_index == 0
    if value not in (None, "auto"):
        if str(value).strip().lower() in _NO_RESUME:
            raise UserError(
                f"resume_from_checkpoint: {value!r} is not a checkpoint directory; a rerun resumes its run by default, "
                f"add {START_OVER} to start over"
            )
        if not Path(value).is_dir():
            raise UserError(f"resume_from_checkpoint: {value} is not a checkpoint directory")
        if main:
            keep_train_log_until(output_dir, _checkpoint_step(Path(value)))
        return value
    found = find_resumable_checkpoint(output_dir)  # every process finds the same before the main one tidies up
    if main and found is not None:
        step = _checkpoint_step(found)
        logger.info("%s holds this run: resuming from %s (step %d)", output_dir, found, step)
        keep_train_log_until(output_dir, step)
    elif main and (holds_run(output_dir) or (output_dir / TRAIN_LOG_FILE).is_file()):
        # only the main process writes the log; the others train with it, so they cannot reach a save first
        logger.warning("%s holds this run, stopped before a complete checkpoint: starting over", output_dir)
        for _, checkpoint in run_checkpoints(output_dir):
            shutil.rmtree(checkpoint)  # cut off mid-save (find_resumable_checkpoint): nothing to keep
        keep_train_log_until(output_dir, None)
    training_args.resume_from_checkpoint = str(found) if found is not None else None
    return training_args.resume_from_checkpoint


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
    (A run asked to start over never gets here finished: ``overwrite_output_dir`` cleared its directory.)"""
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
        "%s already holds this run, finished at step %d of %d: nothing to do (add %s to train it again, or choose "
        "another output_dir)",
        training_args.output_dir,
        state["global_step"],
        state.get("max_steps", state["global_step"]),
        START_OVER,
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

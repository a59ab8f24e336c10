"""A resumed run continues its W&B run: a GRPO run killed after a checkpoint and rerun logs into the run id
``RUN_DIR/wandb_run.json`` records (offline: a second run folder of the same id), and the steps the killed run
logged already are not logged again."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_entry
from test_resume import grpo_command, kill_after_checkpoint
from wandb_offline import run_file_history

from core.run_layout import WANDB_RUN_FILE
from finetune.resume import last_logged_step

STEPS = 3


def logged_steps(run_file: Path) -> list[int]:
    """The training steps a run file's history holds (its rows with a loss)."""
    return [row["train/global_step"] for row in run_file_history(run_file) if "train/loss" in row]


def test_a_killed_run_rerun_continues_its_wandb_run_without_logging_a_step_twice(
    tiny_qwen3vl: Path, tmp_path: Path
) -> None:
    from conftest import write_oric_fixture

    data = write_oric_fixture(tmp_path / "data")
    run = tmp_path / "run"
    command = [*grpo_command(tiny_qwen3vl, data, run), "--max_steps", str(STEPS), "--report_to", "wandb"]
    kill_after_checkpoint(command, run, step=1)
    run_id = json.loads((run / WANDB_RUN_FILE).read_text())["id"]
    logged = last_logged_step(run)  # the steps the killed run logged (train_log.jsonl; W&B the same)
    assert logged >= 1

    result = run_entry("grpo.py", *command)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((run / WANDB_RUN_FILE).read_text())["id"] == run_id
    first, second = sorted((run / "wandb").glob("offline-run-*"))
    assert first.name.endswith(f"-{run_id}") and second.name.endswith(f"-{run_id}"), "the rerun started a new run"

    before, after = logged_steps(next(first.glob("run-*.wandb"))), logged_steps(next(second.glob("run-*.wandb")))
    assert set(before) <= set(range(1, logged + 1))
    assert after == list(range(logged + 1, STEPS + 1)), "a step the killed run logged was logged again"

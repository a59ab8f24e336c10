"""Crash-safe resume: a GRPO run killed with SIGKILL resumes from its newest complete checkpoint and ends
exactly where an uninterrupted run ends; the same command rerun resumes with or without
``resume_from_checkpoint: auto``, and a run stopped before its first complete checkpoint starts over in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import REPO_ROOT, entry_env, run_entry
from safetensors.torch import load_file

from core.errors import UserError
from core.run_layout import is_complete_checkpoint
from finetune.console import TRAIN_LOG_FILE
from finetune.resume import find_resumable_checkpoint, keep_train_log_until, resume_checkpoint

STEPS = 4


def grpo_command(
    model: Path, data: tuple[Path, Path], output_dir: Path, *extra: str, resume: tuple[str, ...] = ("auto",)
) -> list[str]:
    """The tiny GRPO run's arguments; ``resume=()`` leaves ``resume_from_checkpoint`` out."""
    return [
        "recipes/miniature/tiny_oric_demo.yaml",
        "--model_name_or_path",
        str(model),
        "--dataset_path",
        str(data[0]),
        "--image_root",
        str(data[1]),
        "--output_dir",
        str(output_dir),
        "--max_steps",
        str(STEPS),
        "--save_steps",
        "1",
        "--report_to",
        "none",
        *(("--resume_from_checkpoint", *resume) if resume else ()),
        "--data_seed",
        "0",
        *extra,
    ]


def kill_after_checkpoint(args: list[str], output_dir: Path, step: int) -> None:
    """Start a run and SIGKILL it as soon as ``checkpoint-<step>`` is completely written."""
    process = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "finetune" / "grpo.py"), *args],
        cwd=REPO_ROOT,
        env=entry_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and process.poll() is None:
            checkpoint = output_dir / f"checkpoint-{step}"
            if checkpoint.is_dir() and is_complete_checkpoint(checkpoint):
                break
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL, "the run finished before it could be killed"


def final_weights(output_dir: Path, name: str) -> dict[str, torch.Tensor]:
    return load_file(output_dir / name)


# Dynamic sampling (finetune/grpo_trainer.py) with a reward that is constant on half the questions, so steps
# draw extra prompts: the resumed run must draw the ones the uninterrupted run drew.
DYNAMIC_SAMPLING = [
    "--dynamic_sampling",
    "true",
    "--reward_funcs",
    "learning_rewards.constant_on_yes_reward",
    "--reward_weights",
    "1.0",
    "--log_completions",
    "true",
    "--num_completions_to_print",
    "0",
]


def trained_questions(output_dir: Path) -> dict[int, list[str]]:
    """Per step, the question ids of the completions trained on (the reward logs them to the completion table)."""
    import pandas as pd

    return {
        int(path.stem.split("_")[1]): pd.read_parquet(path)["question_id"].astype(str).tolist()
        for path in sorted((output_dir / "completions").glob("completions_*.parquet"))
    }


@pytest.mark.parametrize(
    ("lora", "dynamic"),
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["full", "lora", "full-dynamic-sampling", "lora-dynamic-sampling"],
)
def test_killed_run_resumes_to_the_same_result(tiny_qwen3vl: Path, tmp_path: Path, lora: bool, dynamic: bool) -> None:
    from conftest import write_oric_fixture

    data = write_oric_fixture(tmp_path / "data")
    extra = ["--use_peft", "true", "--lora_r", "4", "--lora_target_modules", "q_proj", "v_proj"] if lora else []
    extra += DYNAMIC_SAMPLING if dynamic else []
    weights = "adapter_model.safetensors" if lora else "model.safetensors"

    reference = tmp_path / "reference"
    result = run_entry("grpo.py", *grpo_command(tiny_qwen3vl, data, reference, *extra))
    assert result.returncode == 0, result.stderr[-3000:]

    resumed = tmp_path / "resumed"
    kill_after_checkpoint(grpo_command(tiny_qwen3vl, data, resumed, *extra), resumed, step=2)
    result = run_entry("grpo.py", *grpo_command(tiny_qwen3vl, data, resumed, *extra))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming from" in result.stderr

    state = json.loads((resumed / "trainer_state.json").read_text())
    logged_steps = [row["step"] for row in state["log_history"] if "loss" in row]
    assert state["global_step"] == STEPS
    assert logged_steps == list(range(1, STEPS + 1)), "a step was logged twice or skipped"

    expected, actual = final_weights(reference, weights), final_weights(resumed, weights)
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=1e-5, atol=1e-6, msg=name)

    # Optimizer and scheduler state were restored, not restarted: the last learning rate matches.
    reference_state = json.loads((reference / "trainer_state.json").read_text())
    assert state["log_history"][-2]["learning_rate"] == reference_state["log_history"][-2]["learning_rate"]

    if dynamic:  # the steps after the resume drew and trained on the same questions as the uninterrupted run
        expected_questions, actual_questions = trained_questions(reference), trained_questions(resumed)
        assert set(expected_questions) == set(range(1, STEPS + 1))
        for step in range(3, STEPS + 1):
            assert actual_questions[step] == expected_questions[step], step
        rounds = [row["dynamic_sampling/rounds"] for row in reference_state["log_history"] if "loss" in row]
        assert max(rounds) > 1, "no step drew extra prompts"
        drawn = [row["dynamic_sampling/prompts_drawn"] for row in state["log_history"] if "loss" in row]
        assert drawn == [
            row["dynamic_sampling/prompts_drawn"] for row in reference_state["log_history"] if "loss" in row
        ]


def files_of(output_dir: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in output_dir.rglob("*") if path.is_file()}


def test_the_same_command_rerun_resumes_without_the_flag_then_reports_the_finished_run(
    tiny_qwen3vl: Path, tmp_path: Path
) -> None:
    from conftest import write_oric_fixture

    data = write_oric_fixture(tmp_path / "data")
    run = tmp_path / "run"
    command = grpo_command(tiny_qwen3vl, data, run, resume=())
    kill_after_checkpoint(command, run, step=2)
    resumed_from = find_resumable_checkpoint(run)
    assert resumed_from is not None

    result = run_entry("grpo.py", *command)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"{run} holds this run: resuming from {resumed_from}" in result.stderr
    state = json.loads((run / "trainer_state.json").read_text())
    assert state["global_step"] == STEPS
    assert [row["step"] for row in state["log_history"] if "loss" in row] == list(range(1, STEPS + 1))
    rows = [json.loads(line) for line in (run / TRAIN_LOG_FILE).read_text().splitlines()]
    assert [row["step"] for row in rows if "loss" in row] == list(range(1, STEPS + 1)), "a second run was appended"
    assert [row["step"] for row in rows if "train_runtime" in row] == [STEPS]

    before = files_of(run)
    finished = run_entry("grpo.py", *command)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert f"already holds this run, finished at step {STEPS} of {STEPS}: nothing to do" in finished.stderr
    assert files_of(run) == before, "the finished run was touched"


def training_args(output_dir: Path, resume: str | None = None) -> object:
    from transformers import TrainingArguments

    return TrainingArguments(output_dir=str(output_dir), resume_from_checkpoint=resume, use_cpu=True, report_to="none")


def complete_checkpoint(path: Path, step: int) -> Path:
    path.mkdir(parents=True)
    (path / "model.safetensors").write_text("x")
    (path / "optimizer.pt").write_text("x")
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


def write_train_log(output_dir: Path, steps: list[int]) -> None:
    lines = [json.dumps({"loss": 1.0, "step": step}) for step in steps]
    (output_dir / TRAIN_LOG_FILE).write_text("\n".join(lines) + '\n{"loss": 1.0, "st')  # the kill cut the last line


def test_a_resumed_run_keeps_the_train_log_up_to_its_checkpoint(tmp_path: Path) -> None:
    checkpoint = complete_checkpoint(tmp_path / "checkpoint-2", step=2)
    write_train_log(tmp_path, [1, 2, 3])  # step 3 was logged, then the run was killed before checkpoint-3
    args = training_args(tmp_path)
    assert resume_checkpoint(args) == str(checkpoint) == args.resume_from_checkpoint
    assert [json.loads(line)["step"] for line in (tmp_path / TRAIN_LOG_FILE).read_text().splitlines()] == [1, 2]


def test_a_run_stopped_before_a_complete_checkpoint_starts_over_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "veritune_run.json").write_text(json.dumps({"settings": {}}))
    (tmp_path / "checkpoint-1").mkdir()  # cut off mid-save: no trainer state
    (tmp_path / "checkpoint-1" / "model.safetensors").write_text("x")
    write_train_log(tmp_path, [1])
    with caplog.at_level("INFO", logger="veritune"):
        assert resume_checkpoint(training_args(tmp_path, "auto")) is None
    assert [record.getMessage() for record in caplog.records if "starting over" in record.getMessage()] == [
        f"{tmp_path} holds this run, stopped before a complete checkpoint: starting over"
    ]
    assert not (tmp_path / "checkpoint-1").exists() and not (tmp_path / TRAIN_LOG_FILE).exists()


def test_an_empty_output_dir_starts_fresh_silently(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with caplog.at_level("INFO", logger="veritune"):
        assert resume_checkpoint(training_args(tmp_path)) is None
    assert not caplog.records and (tmp_path / "notes.txt").is_file()


@pytest.mark.parametrize("value", ["false", "None"])
def test_no_resume_is_refused_with_the_way_to_start_over(tmp_path: Path, value: str) -> None:
    with pytest.raises(
        UserError,
        match=f"resume_from_checkpoint: '{value}' is not a checkpoint directory; a rerun "
        "resumes its run by default, add --overwrite_output_dir true to start over",
    ):
        resume_checkpoint(training_args(tmp_path, value))


def test_keep_train_log_until_none_removes_it(tmp_path: Path) -> None:
    write_train_log(tmp_path, [1, 2])
    keep_train_log_until(tmp_path, None)
    assert not (tmp_path / TRAIN_LOG_FILE).exists()


def test_incomplete_checkpoints_are_skipped(tmp_path: Path) -> None:
    complete = tmp_path / "checkpoint-2"
    complete.mkdir()
    for name in ("model.safetensors", "trainer_state.json", "optimizer.pt"):
        (complete / name).write_text("x")
    incomplete = tmp_path / "checkpoint-3"
    incomplete.mkdir()
    (incomplete / "model.safetensors").write_text("x")  # killed before the optimizer state was written
    assert find_resumable_checkpoint(tmp_path) == complete


def test_checkpoints_saved_without_optimizer_state_are_an_error(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-1").mkdir()  # save_only_model: weights and trainer state, no optimizer state
    for name in ("model.safetensors", "trainer_state.json"):
        (tmp_path / "checkpoint-1" / name).write_text("x")
    with pytest.raises(UserError, match=r"no checkpoint to resume from .*; add --overwrite_output_dir true to start"):
        find_resumable_checkpoint(tmp_path)


def test_checkpoints_cut_off_mid_save_mean_a_fresh_start(tmp_path: Path) -> None:
    (tmp_path / "checkpoint-1").mkdir()
    assert find_resumable_checkpoint(tmp_path) is None


def test_no_checkpoint_means_a_fresh_start(tmp_path: Path) -> None:
    assert find_resumable_checkpoint(tmp_path) is None

"""Exact resume at the end of a run: a run killed after its last checkpoint but before its final save
ends where the uninterrupted run ends, and rerunning a finished run is a no-op."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from helpers import run_entry
from safetensors.torch import load_file

STEPS = 2  # fewer than the steps of one epoch: the Trainer only checks max_steps after a step


def command(model: Path, data: tuple[Path, Path], output_dir: Path) -> list[str]:
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
        "--resume_from_checkpoint",
        "auto",
        "--data_seed",
        "0",
        "--lr_scheduler_type",
        "constant",
    ]


def steps_logged(output_dir: Path) -> list[int]:
    return [
        row["step"]
        for row in json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
        if "loss" in row
    ]


def losses(output_dir: Path) -> list[float]:
    return [
        row["loss"]
        for row in json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
        if "loss" in row
    ]


def test_resume_from_last_checkpoint_and_rerun_of_finished_run(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from conftest import write_oric_fixture

    data = write_oric_fixture(tmp_path / "data")
    reference = tmp_path / "reference"
    result = run_entry("grpo.py", *command(tiny_qwen3vl, data, reference))
    assert result.returncode == 0, result.stderr[-3000:]
    expected = load_file(reference / "model.safetensors")

    # Killed between its last checkpoint and its final save: only the checkpoints are there.
    killed = tmp_path / "killed"
    killed.mkdir()
    for step in (1, STEPS):
        shutil.copytree(reference / f"checkpoint-{step}", killed / f"checkpoint-{step}")
    result = run_entry("grpo.py", *command(tiny_qwen3vl, data, killed))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "is the run's last step" in result.stderr
    assert sorted(p.name for p in killed.glob("checkpoint-*")) == ["checkpoint-1", f"checkpoint-{STEPS}"], (
        "trained past max_steps"
    )
    state = json.loads((killed / "trainer_state.json").read_text())
    assert state["global_step"] == STEPS
    assert steps_logged(killed) == steps_logged(reference) == list(range(1, STEPS + 1))
    assert losses(killed) == losses(reference)
    actual = load_file(killed / "model.safetensors")
    for name in expected:
        assert torch.equal(actual[name], expected[name]), name

    # A finished run rerun: says so and writes nothing.
    before = {p: p.stat().st_mtime_ns for p in reference.rglob("*") if p.is_file()}
    result = run_entry("grpo.py", *command(tiny_qwen3vl, data, reference))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"already holds this run, finished at step {STEPS} of {STEPS}: nothing to do" in result.stderr
    assert {p: p.stat().st_mtime_ns for p in reference.rglob("*") if p.is_file()} == before

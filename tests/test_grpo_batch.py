"""GRPO's global batch in prompts and its rollout tables, through the real entry point on a tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import log_history, run_entry

RECIPE = "recipes/miniature/tiny_oric_demo.yaml"


@pytest.fixture(scope="module")
def batch_run(tiny_qwen3vl: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One optimizer step of 2 prompts x G = 4 completions, accumulated over 2 micro-steps of 4, with the
    completion tables on, images included, logging to an offline W&B run (the tiny recipe's
    per_device_train_batch_size is 4; its accumulation is overridden with a wrong 7 to see it recomputed)."""
    from conftest import write_oric_fixture

    root = tmp_path_factory.mktemp("grpo-batch")
    dataset, images = write_oric_fixture(root / "data")
    output_dir = root / "run"
    result = run_entry(
        "grpo.py",
        RECIPE,
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        dataset,
        "--image_root",
        images,
        "--output_dir",
        output_dir,
        "--max_steps",
        "1",
        "--save_steps",
        "1",
        "--global_batch_prompts",
        "2",
        "--gradient_accumulation_steps",
        "7",
        "--log_completions",
        "true",
        "--num_completions_to_print",
        "2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "gradient_accumulation_steps 7 -> 2" in result.stderr
    return output_dir


def test_step_takes_global_batch_prompts_times_g_completions(batch_run: Path) -> None:
    import pandas as pd

    table = pd.read_parquet(batch_run / "completions" / "completions_00001.parquet")
    assert len(table) == 2 * 4  # 2 prompts x G = 4, all from the one generation of step 1
    assert table["prompt"].astype(str).nunique() <= 2
    assert [row["step"] for row in log_history(batch_run) if "loss" in row] == [1]


def test_completion_table_has_a_column_per_reward(batch_run: Path) -> None:
    import pandas as pd

    table = pd.read_parquet(batch_run / "completions" / "completions_00001.parquet")
    assert {"step", "prompt", "completion", "accuracy_reward", "format_reward", "advantage"} <= set(table.columns)
    assert table["accuracy_reward"].isin([0.0, 1.0]).all()


def test_wandb_rollout_table_holds_text_prompts_and_reward_columns(batch_run: Path) -> None:
    """TRL's table of VLM chat messages (image and text parts mixed) is refused by W&B's type check; the
    entry point's trainer logs them as text, so the run reaches its end and the table is in the W&B run."""
    import json

    tables = sorted((batch_run / "wandb").rglob("media/table/completions_*.table.json"))
    assert tables
    table = json.loads(tables[-1].read_text())
    assert table["columns"][:6] == ["step", "prompt", "completion", "accuracy_reward", "format_reward", "advantage"]
    assert len(table["data"]) == 2 * 4
    prompt = table["data"][0][1]
    assert prompt.startswith("user: <image> Is there a") and "<SOLUTION>" in prompt


def test_unreachable_global_batch_is_one_error_line(tiny_qwen3vl: Path) -> None:
    """3 prompts x G = 4 = 12 completions cannot be split into micro-steps of 8 on one process."""
    result = run_entry(
        "grpo.py",
        RECIPE,
        "--model_name_or_path",
        tiny_qwen3vl,
        "--report_to",
        "none",
        "--global_batch_prompts",
        "3",
        "--per_device_train_batch_size",
        "8",
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: global_batch_prompts: 3 prompts x num_generations (4) = 12 completions")
    assert "Traceback" not in result.stderr


def test_three_process_launch_of_the_table_9_recipe_is_refused_before_loading() -> None:
    """A real 3-process accelerate launch: 128 completions per step do not split into micro-steps of 8 x 3."""
    import socket
    import subprocess
    import sys

    from helpers import REPO_ROOT, entry_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        "recipes/accelerate/zero3.yaml",
        "--num_processes",
        "3",
        "--mixed_precision",
        "no",
        "--main_process_port",
        str(port),
        "finetune/grpo.py",
        "recipes/qwen3vl_oric.yaml",
        "--bf16",
        "false",
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, env=entry_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 3  # one line per rank, before any model is loaded
    assert all("x 3 process(es) = 24 per micro-step" in line for line in errors)
    assert "cannot load" not in result.stderr

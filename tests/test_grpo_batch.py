"""GRPO's global batch in prompts and its rollout tables, through the real entry point on a tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import log_history, run_entry

RECIPE = "recipes/tiny_oric_demo.yaml"


@pytest.fixture(scope="module")
def batch_run(tiny_qwen3vl: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One optimizer step of 2 prompts x G = 4 completions, accumulated over 2 micro-steps of 4, with the
    completion tables on (the tiny recipe's per_device_train_batch_size is 4, written for accumulation 2)."""
    from conftest import write_oric_fixture

    root = tmp_path_factory.mktemp("grpo-batch")
    dataset, images = write_oric_fixture(root / "data")
    output_dir = root / "run"
    result = run_entry(
        "grpo.py", RECIPE,
        "--model_name_or_path", tiny_qwen3vl, "--dataset_path", dataset, "--image_root", images,
        "--output_dir", output_dir, "--max_steps", "1", "--save_steps", "1", "--report_to", "none",
        "--global_batch_prompts", "2", "--gradient_accumulation_steps", "7",
        "--log_completions", "true", "--num_completions_to_print", "2", "--log_multimodal", "false",
    )  # fmt: skip
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


def test_unreachable_global_batch_is_one_error_line(tiny_qwen3vl: Path) -> None:
    """3 prompts x G = 4 = 12 completions cannot be split into micro-steps of 8 on one process."""
    result = run_entry(
        "grpo.py", RECIPE, "--model_name_or_path", tiny_qwen3vl, "--report_to", "none",
        "--global_batch_prompts", "3", "--per_device_train_batch_size", "8",
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: global_batch_prompts: 3 prompts x num_generations (4) = 12 completions")
    assert "Traceback" not in result.stderr

"""DAPO's dynamic sampling in veritune's GRPO (Yu et al. 2025, arXiv 2503.14476, Sec. 3.2), through the real
entry point on the tiny model: groups with no reward spread never reach the loss, the batch keeps its size,
the round limit is honoured, and a 2-process run keeps whole groups per process and draws no prompt twice.

The reward (tests/learning_rewards.py) is constant on the questions whose answer is "yes" (the fixture's cat
and apple questions) and spreads on the others (umbrella, dog).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import REPO_ROOT, entry_env, run_entry
from wandb_offline import offline_history

RECIPE = "recipes/miniature/tiny_oric_demo.yaml"  # 2 prompts x G = 4 per step, over 2 accumulation micro-steps
CONSTANT_ON = ("cat", "apple")
DS_KEYS = ("dynamic_sampling/kept_share", "dynamic_sampling/rounds", "dynamic_sampling/prompts_drawn")


def command(model: Path, data: tuple[Path, Path], output_dir: Path, *extra: str) -> list[str]:
    return [
        RECIPE,
        "--model_name_or_path",
        str(model),
        "--dataset_path",
        str(data[0]),
        "--image_root",
        str(data[1]),
        "--output_dir",
        str(output_dir),
        "--reward_funcs",
        "learning_rewards.constant_on_yes_reward",
        "--reward_weights",
        "1.0",
        "--dynamic_sampling",
        "true",
        "--log_completions",
        "true",
        "--num_completions_to_print",
        "0",
        *extra,
    ]


def train_log(output_dir: Path) -> list[dict[str, Any]]:
    lines = (output_dir / "train_log.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if "loss" in row]


def tables(output_dir: Path) -> list[Any]:
    import pandas as pd

    return [pd.read_parquet(path) for path in sorted((output_dir / "completions").glob("completions_*.parquet"))]


def question_object(prompt: str) -> str:
    return next(name for name in ("cat", "umbrella", "apple", "dog") if f" {name} in the image" in prompt)


@pytest.fixture(scope="module")
def sampled_run(tiny_qwen3vl: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    from conftest import write_oric_fixture

    root = tmp_path_factory.mktemp("dynamic-sampling")
    data = write_oric_fixture(root / "data", num_items=16)
    output_dir = root / "run"
    result = run_entry(
        "grpo.py",
        *command(tiny_qwen3vl, data, output_dir, "--max_steps", "3", "--save_steps", "3", "--report_to", "wandb"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return output_dir, result.stdout + result.stderr


def test_constant_reward_groups_never_reach_the_loss(sampled_run: tuple[Path, str]) -> None:
    output_dir, _ = sampled_run
    logs = train_log(output_dir)
    assert [row["step"] for row in logs] == [1, 2, 3]
    for row, table in zip(logs, tables(output_dir), strict=True):
        assert row["dynamic_sampling/filled_groups"] == 0  # enough spreading questions: the limit was not hit
        objects = {question_object(str(prompt)) for prompt in table["prompt"]}
        assert objects.isdisjoint(CONSTANT_ON), objects
        assert (table["advantage"].abs() > 0).all()
        assert row["frac_reward_zero_std"] == 0.0  # TRL's own share, of what was trained on


def test_batch_keeps_its_size_and_sampling_is_logged(sampled_run: tuple[Path, str]) -> None:
    output_dir, console = sampled_run
    for table in tables(output_dir):
        assert len(table) == 2 * 4  # 2 prompts x G = 4, as without dynamic sampling
        assert table["question_id"].nunique() == 2 and table["question_id"].value_counts().eq(4).all()
    logs = train_log(output_dir)
    for row in logs:
        assert row["dynamic_sampling/rounds"] >= 1
        assert row["dynamic_sampling/prompts_drawn"] >= 2
        assert 0 < row["dynamic_sampling/kept_share"] <= 1
        # Kept share = informative groups / groups drawn: at least the 2 trained on were informative.
        assert row["dynamic_sampling/kept_share"] * row["dynamic_sampling/prompts_drawn"] >= 2 - 1e-9
    assert any(row["dynamic_sampling/rounds"] > 1 for row in logs)  # a cat or apple question was replaced
    assert "kept " in console and "extra_rounds " in console and "zero_std " in console
    wandb_rows = [row for row in offline_history(output_dir / "wandb") if "train/dynamic_sampling/rounds" in row]
    assert [row["train/global_step"] for row in wandb_rows] == [1, 2, 3]
    assert all(f"train/{key}" in row for row in wandb_rows for key in DS_KEYS)


def test_round_limit_is_honoured_and_said(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """A threshold above any spread of 0/1 rewards drops every group: one extra round, then the batch is filled
    with dropped groups, keeps its size, and the log says so."""
    from conftest import write_oric_fixture

    data = write_oric_fixture(tmp_path / "data", num_items=16)
    extra = ["--max_steps", "1", "--save_strategy", "no", "--report_to", "none"]
    extra += ["--dynamic_sampling_min_std", "10", "--dynamic_sampling_max_rounds", "1"]
    result = run_entry("grpo.py", *command(tiny_qwen3vl, data, tmp_path / "run", *extra))
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = train_log(tmp_path / "run")
    assert row["dynamic_sampling/rounds"] == 2
    assert row["dynamic_sampling/prompts_drawn"] == 4
    assert row["dynamic_sampling/kept_share"] == 0
    assert row["dynamic_sampling/filled_groups"] == 2
    (table,) = tables(tmp_path / "run")
    assert len(table) == 2 * 4
    # The step line holds the step's facts; one summary line at the end, no WARNING per step.
    assert "| extra_rounds 1/1 |" in result.stdout and "| filled 2 |" in result.stdout
    # (transformers may warn about the tiny tokenizer's special tokens; veritune itself warns about nothing here)
    assert not [line for line in result.stderr.splitlines() if " WARNING veritune" in line], result.stderr[-2000:]
    summary = [line for line in result.stderr.splitlines() if "dynamic sampling:" in line]
    assert len(summary) == 1 and summary[0].endswith(
        "dynamic sampling: 1 generation batch(es); 1 were filled with 2 group(s) of reward spread <= 10 "
        "(1 reached dynamic_sampling_max_rounds (1); the step lines' `filled`)"
    ), result.stderr[-2000:]


def test_with_lora_and_the_eval_hook(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """Dynamic sampling with LoRA adapters and the eval hook at every checkpoint: the hook's generation runs
    in eval mode and is left alone; the adapters train on informative groups only."""
    from conftest import write_oric_fixture
    from eval_fixtures import write_oric_bench

    data = write_oric_fixture(tmp_path / "data", num_items=16)
    write_oric_bench(tmp_path / "bench", questions=3)
    extra = ["--max_steps", "2", "--save_steps", "1", "--report_to", "none"]
    extra += ["--use_peft", "true", "--lora_r", "4", "--lora_target_modules", "q_proj", "v_proj"]
    extra += ["--eval_on_save", "true", "--eval_benchmarks", "oric_bench_r1", "--eval_data_root"]
    extra += [str(tmp_path / "bench"), "--eval_limit", "2"]
    result = run_entry("grpo.py", *command(tiny_qwen3vl, data, tmp_path / "run", *extra))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "run" / "adapter_model.safetensors").is_file()
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    assert [row["step"] for row in history if "eval/oric_bench_r1/macro/f1" in row] == [1, 2]
    steps = [row for row in history if "loss" in row]
    assert [row["step"] for row in steps] == [1, 2] and all(key in row for row in steps for key in DS_KEYS)
    for row, table in zip(steps, tables(tmp_path / "run"), strict=True):
        if row["dynamic_sampling/filled_groups"] == 0:
            assert {question_object(str(p)) for p in table["prompt"]}.isdisjoint(CONSTANT_ON)


@pytest.mark.slow
def test_two_processes_keep_whole_groups_and_draw_no_prompt_twice(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from conftest import write_oric_fixture
    from test_distributed import free_port

    data = write_oric_fixture(tmp_path / "data", num_items=16)
    # `--multi_gpu` starts the 2 processes (accelerate's `--cpu` with --num_processes 2 starts one); the recipe's
    # use_cpu keeps them on the CPU, where accelerate joins them as MULTI_CPU over gloo.
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    launch += ["--main_process_port", str(free_port())]
    args = command(tiny_qwen3vl, data, tmp_path / "run", "--max_steps", "2", "--save_strategy", "no")
    result = subprocess.run(
        [*launch, str(REPO_ROOT / "finetune" / "grpo.py"), *args, "--report_to", "none"],
        cwd=REPO_ROOT,
        env=entry_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    logs = train_log(tmp_path / "run")
    assert [row["step"] for row in logs] == [1, 2]
    for row, table in zip(logs, tables(tmp_path / "run"), strict=True):
        # 2 processes x 4 completions x 2 micro-steps = 16 completions = 4 groups of G = 4 per step.
        assert len(table) == 16
        questions = table["question_id"]
        assert questions.nunique() == 4 and questions.value_counts().eq(4).all()  # no prompt drawn twice in a step
        if row["dynamic_sampling/filled_groups"] == 0:
            assert {question_object(str(p)) for p in table["prompt"]}.isdisjoint(CONSTANT_ON)
            assert (table["advantage"].abs() > 0).all()


def test_demo_select_passes_recipe_overrides_and_refuses_a_bad_one(tmp_path: Path) -> None:
    """`veritune demo-select --set KEY=VALUE` compares another setting (dynamic sampling) on the dev split; a
    malformed override is one error line before anything is built."""
    result = subprocess.run(
        [sys.executable, "-m", "veritune.cli", "demo-select", "--out", str(tmp_path / "sel"), "--set", "dynamic"],
        cwd=REPO_ROOT,
        env=entry_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == "error: --set: expected KEY=VALUE, got 'dynamic'"
    assert not (tmp_path / "sel").exists()


def test_process_share_must_be_whole_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """On 2 processes, micro-batches of 2 completions split TRL's groups of 4 across processes: fine for TRL,
    refused with dynamic sampling (a process trains only on groups it generated), before any model loads."""
    from core.errors import UserError
    from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
    from finetune.recipe import parse_recipe

    types = (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig)
    monkeypatch.setattr(VerituneGRPOConfig, "world_size", property(lambda self: 2))
    split = [RECIPE, "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1"]
    parse_recipe(split, types)
    with pytest.raises(UserError, match=r"dynamic_sampling: each process must hold whole groups, .* = 2 completions"):
        parse_recipe([*split, "--dynamic_sampling", "true"], types)
    with pytest.raises(UserError, match="dynamic_sampling_min_std: must be at least 0"):
        parse_recipe([RECIPE, "--dynamic_sampling_min_std", "-0.1"], types)
    with pytest.raises(UserError, match="dynamic_sampling_max_rounds: must be at least 0"):
        parse_recipe([RECIPE, "--dynamic_sampling_max_rounds", "-1"], types)

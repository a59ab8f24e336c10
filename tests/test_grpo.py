"""GRPO Visual-RFT through the real entry point on tiny offline models."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO_ROOT, entry_env, log_history, run_entry
from safetensors.torch import load_file
from wandb_offline import offline_config, offline_history

RECIPE = "recipes/miniature/tiny_oric_demo.yaml"


def grpo_args(model: Path, data: tuple[Path, Path], output_dir: Path, *extra: str) -> list[str]:
    dataset, images = data
    return [
        RECIPE,
        "--model_name_or_path",
        str(model),
        "--dataset_path",
        str(dataset),
        "--image_root",
        str(images),
        "--output_dir",
        str(output_dir),
        *extra,
    ]


@pytest.fixture(scope="module")
def two_step_run(tiny_qwen3vl: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-step tiny GRPO run with a checkpoint after each step, logging to an offline W&B run."""
    from conftest import write_oric_fixture

    root = tmp_path_factory.mktemp("grpo-two-step")
    data = write_oric_fixture(root / "data")
    output_dir = root / "run"
    result = run_entry("grpo.py", *grpo_args(tiny_qwen3vl, data, output_dir, "--max_steps", "2", "--save_steps", "1"))
    assert result.returncode == 0, result.stderr[-3000:]
    return output_dir


def test_grpo_logs_loss_and_both_rewards(two_step_run: Path) -> None:
    steps = [row for row in log_history(two_step_run) if "loss" in row]
    assert [row["step"] for row in steps] == [1, 2]
    for row in steps:
        assert "rewards/accuracy_reward/mean" in row
        assert "rewards/format_reward/mean" in row
        assert row["reward"] == pytest.approx(row["rewards/accuracy_reward/mean"] + row["rewards/format_reward/mean"])


def test_grpo_changes_parameters(two_step_run: Path, tiny_qwen3vl: Path) -> None:
    before = load_file(tiny_qwen3vl / "model.safetensors")
    after = load_file(two_step_run / "model.safetensors")
    changed = [name for name, tensor in before.items() if not torch.equal(tensor, after[name])]
    assert any("language_model" in name for name in changed)


def test_grpo_writes_loadable_checkpoints(two_step_run: Path) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    for step in (1, 2):
        checkpoint = two_step_run / f"checkpoint-{step}"
        assert (checkpoint / "optimizer.pt").is_file()
        assert (checkpoint / "trainer_state.json").is_file()
    model = AutoModelForImageTextToText.from_pretrained(two_step_run / "checkpoint-2")
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert AutoProcessor.from_pretrained(two_step_run).tokenizer.eos_token == "<|im_end|>"


def test_grpo_offline_wandb_run_holds_reward_metrics(two_step_run: Path) -> None:
    rows = offline_history(two_step_run / "wandb")
    rewards = [row for row in rows if "train/rewards/accuracy_reward/mean" in row]
    assert [row["train/global_step"] for row in rewards] == [1, 2]
    assert all("train/rewards/format_reward/mean" in row for row in rewards)
    assert json.loads((two_step_run / "wandb_run.json").read_text())["id"]


def test_grpo_records_recipe_provenance(two_step_run: Path) -> None:
    provenance = json.loads((two_step_run / "veritune_run.json").read_text())
    assert provenance["recipe"]["run_name"] == "tiny-oric-demo"
    assert provenance["script_args"]["recipe"] == RECIPE
    config = offline_config(two_step_run / "wandb")
    assert config["veritune"]["recipe"]["loss_type"] == "grpo"
    assert config["run_name"] == "tiny-oric-demo"


def test_grpo_reward_rises_on_a_reachable_target(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """Learning check: rewarding "no" answers must raise their share within a few CPU steps."""
    from conftest import write_oric_fixture

    data = write_oric_fixture(tmp_path / "data")
    result = run_entry(
        "grpo.py",
        *grpo_args(tiny_qwen3vl, data, tmp_path / "run", "--max_steps", "12", "--save_strategy", "no"),
        "--reward_funcs",
        "learning_rewards.answers_no_reward",
        "--reward_weights",
        "1.0",
        "--learning_rate",
        "5e-4",
        "--lr_scheduler_type",
        "constant",
        "--report_to",
        "none",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    means = [row["rewards/answers_no_reward/mean"] for row in state["log_history"] if "loss" in row]
    first, last = sum(means[:3]) / 3, sum(means[-3:]) / 3
    assert last >= first + 0.25, means


def test_grpo_lora_keeps_vision_tower_and_base_weights(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from conftest import write_oric_fixture

    data = write_oric_fixture(tmp_path / "data")
    extra = ["--max_steps", "2", "--save_strategy", "no", "--report_to", "none", "--use_peft", "true"]
    extra += ["--lora_target_modules", "q_proj", "v_proj", "--lora_r", "4", "--lora_alpha", "8"]
    result = run_entry("grpo.py", *grpo_args(tiny_qwen3vl, data, tmp_path / "run", *extra))
    assert result.returncode == 0, result.stderr[-3000:]
    adapter = load_file(tmp_path / "run" / "adapter_model.safetensors")
    assert adapter, "no adapter weights saved"
    assert all("language_model" in name for name in adapter)
    assert any("q_proj" in name for name in adapter) and any("v_proj" in name for name in adapter)
    assert "trainable" in result.stderr  # the trainable-parameter count is logged


def test_grpo_runs_a_second_model_family(tiny_qwen25vl: Path, tmp_path: Path) -> None:
    from conftest import write_oric_fixture

    data = write_oric_fixture(tmp_path / "data")
    extra = ["--max_steps", "1", "--save_strategy", "no", "--report_to", "none"]
    result = run_entry("grpo.py", *grpo_args(tiny_qwen25vl, data, tmp_path / "run", *extra))
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert "rewards/format_reward/mean" in state["log_history"][0]


@pytest.mark.skipif(
    shutil.which("accelerate") is None and not (Path(sys.executable).parent / "accelerate").exists(),
    reason="accelerate CLI missing",
)
def test_grpo_two_processes_with_accelerate(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from conftest import write_oric_fixture

    data = write_oric_fixture(tmp_path / "data")
    launcher = Path(sys.executable).parent / "accelerate"
    command = [
        str(launcher),
        "launch",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        # `--multi_gpu`, not `--cpu`: accelerate's `--cpu --num_processes 2` starts one process where MPI is
        # absent; the recipe's use_cpu keeps both processes on the CPU (gloo)
        "--multi_gpu",
        "--main_process_port",
        "29517",
        str(REPO_ROOT / "finetune" / "grpo.py"),
        *grpo_args(
            tiny_qwen3vl,
            data,
            tmp_path / "run",
            "--max_steps",
            "2",
            "--save_strategy",
            "no",
            "--report_to",
            "none",
            "--per_device_train_batch_size",
            "2",
        ),
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, env=entry_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    assert "rewards/accuracy_reward/mean" in state["log_history"][0]
    assert json.loads((tmp_path / "run" / "veritune_run.json").read_text())["world_size"] == 2


def test_grpo_warns_once_when_no_step_has_reward_spread(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """Near-greedy sampling gives each group 4 identical answers: no spread, no gradient; said once, after
    no_spread_warning_steps such steps."""
    from conftest import write_oric_fixture

    data = write_oric_fixture(tmp_path / "data")
    extra = ["--max_steps", "3", "--save_strategy", "no", "--report_to", "none", "--temperature", "1e-6"]
    result = run_entry(
        "grpo.py", *grpo_args(tiny_qwen3vl, data, tmp_path / "run", *extra, "--no_spread_warning_steps", "2")
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "train_log.jsonl").read_text().splitlines()]
    assert [row["frac_reward_zero_std"] for row in rows if "loss" in row] == [1.0] * 3
    warnings = [line for line in result.stderr.splitlines() if "no learning signal" in line]
    assert len(warnings) == 1 and "in the last 2 steps" in warnings[0], result.stderr[-2000:]

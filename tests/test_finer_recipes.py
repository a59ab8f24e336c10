"""The FINER-Tuning DPO recipes reproduce Table 10 (FINER, arXiv 2603.17662) and App. C.

Table 10, copied here so that a recipe edit cannot silently drift from the paper: training tuples 40K
(LLaVA-1.6-7B), 120K (Qwen2.5-VL-7B), 160K (InternVL3.5-8B and -14B); for all: global batch 64, AdamW,
learning rate 5e-6, 1 epoch, warm-up ratio 0.1, cosine decay, LoRA rank 32 on q_proj and v_proj,
beta 0.1, validation ratio 0.005. App. C: 4 GPUs for InternVL3.5-14B, 2 for the other models.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.errors import UserError
from core.recipe_file import read_recipe
from finetune.configs import DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig
from finetune.recipe import parse_recipe

REPO_ROOT = Path(__file__).resolve().parent.parent
DPO_TYPES = (DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig)

# recipe: (hub id, training tuples, GPUs the recipe is written for)
TABLE_10_LORA = {
    "llava16_7b_finer_lora": ("llava-hf/llava-v1.6-vicuna-7b-hf", 40_000, 2),
    "qwen25vl_7b_finer_lora": ("Qwen/Qwen2.5-VL-7B-Instruct", 120_000, 2),
    "internvl35_8b_finer_lora": ("OpenGVLab/InternVL3_5-8B-HF", 160_000, 2),
    "internvl35_14b_finer_lora": ("OpenGVLab/InternVL3_5-14B-HF", 160_000, 4),
    "qwen3vl_8b_finer_lora": ("Qwen/Qwen3-VL-8B-Instruct", 160_000, 2),  # not in the table: its shared values
}
FULL = {"qwen3vl_8b_finer_full": ("Qwen/Qwen3-VL-8B-Instruct", 160_000, 4)}
GLOBAL_BATCH, LEARNING_RATE, EPOCHS, WARMUP_RATIO, BETA, VALIDATION_RATIO = 64, 5e-6, 1, 0.1, 0.1, 0.005


def parse(name: str, *flags: str) -> tuple[DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig]:
    return parse_recipe([str(REPO_ROOT / "recipes" / f"{name}.yaml"), "--use_cpu", "true", *flags], DPO_TYPES)


def launch_processes(name: str) -> int:
    """The process count of the launch command in the recipe's header comment."""
    header = (REPO_ROOT / "recipes" / f"{name}.yaml").read_text().split("\n\n")[0]
    return int(re.search(r"--num_processes (\d+) finetune/dpo\.py", header).group(1))


@pytest.mark.parametrize("name", sorted(TABLE_10_LORA) + sorted(FULL))
def test_optimisation_equals_table_10(name: str) -> None:
    _, args, _ = parse(name)
    assert args.optim == "adamw_torch"
    assert args.learning_rate == LEARNING_RATE
    assert args.lr_scheduler_type == "cosine"
    assert args.warmup_steps == WARMUP_RATIO  # a float below 1 is a ratio in transformers 5
    assert args.num_train_epochs == EPOCHS and args.max_steps == -1
    assert args.bf16 is True


@pytest.mark.parametrize("name", sorted(TABLE_10_LORA) + sorted(FULL))
def test_dpo_objective_equals_table_10(name: str) -> None:
    _, args, _ = parse(name)
    assert (args.beta, args.loss_type) == (BETA, ["sigmoid"])
    assert not args.precompute_ref_log_probs


@pytest.mark.parametrize("name", sorted(TABLE_10_LORA) + sorted(FULL))
def test_model_and_training_tuples_equal_table_10(name: str) -> None:
    script_args, _, model_args = parse(name)
    hub_id, tuples, _ = {**TABLE_10_LORA, **FULL}[name]
    assert model_args.model_name_or_path == hub_id
    assert script_args.max_train_samples == tuples
    assert script_args.validation_ratio == VALIDATION_RATIO


@pytest.mark.parametrize("name", sorted(TABLE_10_LORA))
def test_lora_equals_table_10(name: str) -> None:
    _, _, model_args = parse(name)
    assert model_args.use_peft and model_args.lora_r == 32
    assert model_args.lora_target_modules == ["q_proj", "v_proj"]
    assert model_args.lora_language_model_only
    assert (model_args.lora_alpha, model_args.lora_dropout) == (64, 0.0)  # LLaMA-Factory's defaults for rank 32


@pytest.mark.parametrize("name", sorted(TABLE_10_LORA) + sorted(FULL))
def test_global_batch_is_64_on_the_stated_gpu_count(name: str) -> None:
    raw = read_recipe(REPO_ROOT / "recipes" / f"{name}.yaml")  # its bases merged
    gpus = {**TABLE_10_LORA, **FULL}[name][2]
    assert launch_processes(name) == gpus
    assert raw["per_device_train_batch_size"] * raw["gradient_accumulation_steps"] * gpus == GLOBAL_BATCH
    assert raw["global_batch_size"] == GLOBAL_BATCH


@pytest.mark.parametrize("name", sorted(TABLE_10_LORA))
def test_lora_recipes_name_zero2(name: str) -> None:
    script_args, _, _ = parse(name)
    assert script_args.accelerate_config == "recipes/accelerate/zero2.yaml"
    assert (REPO_ROOT / script_args.accelerate_config).is_file()


def test_full_parameter_recipe_is_zero3_without_lora() -> None:
    script_args, _, model_args = parse("qwen3vl_8b_finer_full")
    assert not model_args.use_peft
    assert script_args.accelerate_config == "recipes/accelerate/zero3.yaml"
    assert "zero_stage: 3" in (REPO_ROOT / script_args.accelerate_config).read_text()


def test_gradient_accumulation_follows_the_process_count(monkeypatch: pytest.MonkeyPatch) -> None:
    # Written for 2 GPUs (4 x 8 x 2); on 4 processes the recipe must still train with a global batch of 64.
    monkeypatch.setattr(VerituneDPOConfig, "world_size", property(lambda self: 4))
    _, args, _ = parse("qwen25vl_7b_finer_lora")
    assert args.gradient_accumulation_steps == 4
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps * 4 == GLOBAL_BATCH


def test_global_batch_not_divisible_names_the_numbers() -> None:
    with pytest.raises(
        UserError,
        match=(
            r"global_batch_size: 64 is not a positive multiple of per_device_train_batch_size \(3\) "
            r"x processes \(1\)"
        ),
    ):
        parse("qwen25vl_7b_finer_lora", "--per_device_train_batch_size", "3")


def test_precomputed_reference_log_probs_are_refused() -> None:
    with pytest.raises(UserError, match="precompute_ref_log_probs: not supported for vision-language models"):
        parse("miniature/tiny_finer_demo", "--precompute_ref_log_probs", "true")


def test_keep_end_truncation_is_refused() -> None:
    with pytest.raises(UserError, match="truncation_mode: keep_end would cut the image tokens"):
        parse("miniature/tiny_finer_demo", "--truncation_mode", "keep_end")


def test_validation_ratio_out_of_range() -> None:
    with pytest.raises(UserError, match=r"validation_ratio: must be in \[0, 1\), got 1.5"):
        parse("miniature/tiny_finer_demo", "--validation_ratio", "1.5")


def test_tiny_recipe_is_a_few_cpu_steps_of_lora_with_wandb() -> None:
    script_args, args, model_args = parse("miniature/tiny_finer_demo")
    assert args.use_cpu and args.max_steps == 8 and not args.bf16
    assert (
        model_args.use_peft
        and model_args.lora_target_modules == ["q_proj", "v_proj"]
        and model_args.lora_language_model_only
    )
    assert args.report_to == ["wandb"]
    assert (args.beta, args.loss_type) == (BETA, ["sigmoid"])

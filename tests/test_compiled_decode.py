"""``compiled_decode``: the rollout's ``generate`` with a static KV cache and a compiled decode step, prompts
bucketed so the compiled graph is reused; and the generation engines TRL refuses for vision-language models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO_ROOT, run_entry

RECIPE = "recipes/miniature/tiny_oric_demo.yaml"


def _config(*overrides: str):
    from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
    from finetune.recipe import parse_recipe

    return parse_recipe([RECIPE, *overrides], (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig))[1]


def test_the_recipe_key_is_off_by_default_and_buckets_prompts_when_on() -> None:
    from core.errors import UserError

    off = _config()
    assert (off.compiled_decode, off.pad_to_multiple_of) == (False, None)
    assert _config("--compiled_decode", "true").pad_to_multiple_of == 64
    assert _config("--compiled_decode", "true", "--decode_prompt_bucket", "32").pad_to_multiple_of == 32
    kept = _config("--compiled_decode", "true", "--decode_prompt_bucket", "0", "--pad_to_multiple_of", "16")
    assert kept.pad_to_multiple_of == 16
    with pytest.raises(UserError, match="decode_prompt_bucket: must be at least 0, got -1"):
        _config("--decode_prompt_bucket", "-1")


@pytest.mark.parametrize("engine", ["use_vllm", "use_transformers_continuous_batching"])
def test_compiled_decode_is_refused_beside_another_engine(engine: str) -> None:
    from core.errors import UserError

    with pytest.raises(UserError) as refused:
        _config("--compiled_decode", "true", f"--{engine}", "true")
    assert str(refused.value) == f"compiled_decode: cannot be set together with {engine} (it replaces `generate`)"


def _trainer(model: Path, trainer_class, config):
    from datasets import Dataset

    def reward(completions, **_):
        return [0.0] * len(completions)

    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": [{"type": "text", "text": "Hi?"}]}]}] * 4)
    rewards = [reward] * len(config.reward_weights or [1.0])
    return trainer_class(model=str(model), reward_funcs=rewards, args=config, train_dataset=dataset)


def test_the_trainer_generates_with_a_static_cache_and_compiles(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from finetune.grpo_trainer import VerituneGRPOTrainer

    out = ["--output_dir", str(tmp_path), "--report_to", "none"]
    plain = _trainer(tiny_qwen3vl, VerituneGRPOTrainer, _config(*out)).generation_config
    assert (plain.cache_implementation, plain.disable_compile, plain.compile_config) == (None, True, None)
    trainer = _trainer(tiny_qwen3vl, VerituneGRPOTrainer, _config(*out, "--compiled_decode", "true"))
    config = trainer.generation_config
    assert (config.cache_implementation, config.disable_compile) == ("static", False)
    assert (config.compile_config.dynamic, config.compile_config.fullgraph) == (False, False)
    assert config.compile_config._compile_all_devices  # compiles on the CPU too: the key means the same everywhere
    assert trainer.generation_kwargs["cache_implementation"] == "static"
    assert trainer.pad_to_multiple_of == 64


def test_trl_still_refuses_continuous_batching_for_vision_language_models(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """docs/PERFORMANCE.md says why transformers' continuous batching (`generate_batch`) is not a rollout engine
    here: TRL 1.16 refuses it with a processor. When this fails, a TRL upgrade lifted the refusal: measure it
    (`perf/bench_rollout.py --grpo-args "--use_transformers_continuous_batching true"`), then update the doc and
    this test."""
    from trl import GRPOConfig, GRPOTrainer

    config = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to="none",
        per_device_train_batch_size=4,
        num_generations=4,
        use_transformers_continuous_batching=True,
    )
    with pytest.raises(ValueError, match="`use_transformers_continuous_batching` does not support multimodal"):
        _trainer(tiny_qwen3vl, GRPOTrainer, config)


def test_a_grpo_run_compiles_the_decode_once(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """Two optimizer steps (a rollout of 2 prompts x 4 completions each) with the decode compiled on the CPU: valid
    completions, prompts of different lengths padded to one 64-token bucket, one compiled graph, no recompile
    (gradient checkpointing on, as in the GPU recipes)."""
    from conftest import write_oric_fixture

    dataset, images = write_oric_fixture(tmp_path / "data")
    records = json.loads(dataset.read_text())
    for index, record in enumerate(records):  # prompts of 75 to about 85 tokens: one 64-token bucket (128)
        record["problem"] = "Look closely. " * (index % 4) + record["problem"]
    dataset.write_text(json.dumps(records))
    probe = tmp_path / "probe.json"
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
        tmp_path / "run",
        "--max_steps",
        "2",
        "--report_to",
        "none",
        "--save_strategy",
        "no",
        "--compiled_decode",
        "true",
        "--gradient_checkpointing",  # as the GPU recipes: TRL turns it off and on around each rollout
        "true",
        PYTHONPATH=f"{REPO_ROOT / 'tests' / 'compile_probe'}:{REPO_ROOT}",
        VERITUNE_COMPILE_PROBE=str(probe),
        TORCH_LOGS="recompiles",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Recompiling" not in result.stderr
    state = json.loads((tmp_path / "run" / "trainer_state.json").read_text())
    assert all(row["completions/mean_length"] > 0 for row in state["log_history"] if "loss" in row)
    recorded = json.loads(probe.read_text())
    calls = recorded["generate"]
    assert len(calls) == 2 and {call["width"] % 64 for call in calls} == {0}
    assert len({length for call in calls for length in call["lengths"]}) > 1  # the prompts' own lengths differ
    assert recorded["counters"]["stats"]["unique_graphs"] == 1


def _embedding_hooks(trainer) -> int:
    return len(trainer.model.get_input_embeddings()._forward_hooks)


def test_checkpointing_around_each_rollout_keeps_one_embedding_hook(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """TRL turns gradient checkpointing off and on around every rollout, and transformers adds an input-embedding
    hook each time it is turned on: without keep_one_input_grad_hook a full-parameter run gains one per rollout
    (each forward runs them all; a compiled decode recompiles at each rollout)."""
    from finetune.grpo_trainer import VerituneGRPOTrainer

    args = ["--output_dir", str(tmp_path), "--report_to", "none", "--save_strategy", "no", "--max_steps", "3"]
    config = _config(*args, "--gradient_checkpointing", "true", "--logging_steps", "1")
    trainer = _trainer(tiny_qwen3vl, VerituneGRPOTrainer, config)
    trainer.train()
    assert trainer.state.global_step == 3
    assert _embedding_hooks(trainer) == 1


def test_trl_grpo_still_has_no_padding_free() -> None:
    """docs/PERFORMANCE.md (rollout) says GRPO micro-batches are padded, not packed: TRL 1.16's GRPOConfig has no
    padding_free (SFT's collator has one; DPO's is switched off). When this fails, a TRL upgrade added it: measure
    it beside padded micro-batches (`perf/bench_rollout.py --grpo-args "--padding_free true"`) and update both."""
    from dataclasses import fields

    from trl import GRPOConfig

    assert "padding_free" not in {field.name for field in fields(GRPOConfig)}, "TRL's GRPO now has padding_free"

"""A GRPO rollout never samples a vision special token of the processor, with transformers and with vLLM.

A completion holding ``<|image_pad|>`` (or another vision token) makes the training forward count more image
tokens than image features ("Image features and image tokens do not match"). TRL 1.16 suppresses the image
token when it generates with transformers and bans nothing when it generates with vLLM; the trainer bans every
vision token of the processor on both paths (finetune.grpo_trainer.vision_special_tokens,
core.trl_adapter.ban_rollout_tokens). Each test trains one step on the tiny Qwen3-VL: with transformers, on a
model rigged to prefer vision tokens; with vLLM, on tests/fake_vllm.py's engine answering with an image token
(the engine honours ``bad_words`` as vLLM does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_vllm import install
from helpers import REPO_ROOT

from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
from finetune.recipe import parse_recipe

VISION_TOKENS = {"<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>"}


class Recorder:
    """A reward function that keeps every completion's token ids (rewarding them all 0)."""

    __name__ = "recorder"

    def __init__(self) -> None:
        self.completion_ids: list[list[int]] = []

    def __call__(self, completions: list[Any], completion_ids: list[list[int]], **kwargs: Any) -> list[float]:
        self.completion_ids += [list(ids) for ids in completion_ids]
        return [0.0] * len(completions)


def train_one_step(model_path: Path, root: Path, *extra: str, rig: bool = False) -> tuple[Recorder, Any]:
    """One GRPO step of the tiny recipe on 2 prompts x G = 2 (the trainer built as finetune/grpo.py builds it)."""
    import torch
    from conftest import write_oric_fixture
    from transformers import AutoModelForImageTextToText

    from finetune.grpo_trainer import VerituneGRPOTrainer
    from finetune.models import get_processor
    from finetune.oric_data import get_oric_dataset

    data, images = write_oric_fixture(root / "data", num_items=2)
    recipe = [str(REPO_ROOT / "recipes" / "miniature" / "tiny_oric_demo.yaml"), "--model_name_or_path", str(model_path)]
    recipe += ["--output_dir", str(root / "run"), "--report_to", "none", "--save_strategy", "no", "--max_steps", "1"]
    recipe += ["--num_generations", "2", "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1"]
    recipe += ["--max_completion_length", "12", "--reward_funcs", "accuracy", "--reward_weights", "1.0", *extra]
    script_args, args, model_args = parse_recipe(recipe, (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig))
    processor = get_processor(model_args)
    model = AutoModelForImageTextToText.from_pretrained(model_path, dtype=torch.float32)
    if rig:  # every step, some vision token's logit is the largest by far (rows +w and -w)
        generator = torch.Generator().manual_seed(0)
        head = model.get_output_embeddings().weight
        with torch.no_grad():
            for first, second in (("<|image_pad|>", "<|video_pad|>"), ("<|vision_start|>", "<|vision_pad|>")):
                direction = 100 * torch.randn(head.shape[1], generator=generator)
                head[processor.tokenizer.convert_tokens_to_ids(first)] = direction
                head[processor.tokenizer.convert_tokens_to_ids(second)] = -direction
    dataset, _ = get_oric_dataset(
        data, images, processor=processor, max_pixels=script_args.max_pixels, max_prompt_length=256
    )
    recorder = Recorder()
    trainer = VerituneGRPOTrainer(
        model=model, reward_funcs=[recorder], args=args, train_dataset=dataset, processing_class=processor
    )
    trainer.train()
    return recorder, trainer


def vision_ids(processor: Any) -> set[int]:
    return {processor.tokenizer.convert_tokens_to_ids(text) for text in VISION_TOKENS}


def test_transformers_rollouts_never_sample_a_vision_token(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    recorder, trainer = train_one_step(tiny_qwen3vl, tmp_path, rig=True)
    banned = vision_ids(trainer.processing_class)
    assert set(trainer.generation_config.suppress_tokens) == banned  # TRL's image token and the others
    assert len(recorder.completion_ids) == 4
    sampled = {token for ids in recorder.completion_ids for token in ids}
    assert not sampled & banned, sorted(sampled & banned)
    assert trainer.state.global_step == 1


def test_vllm_rollouts_never_sample_a_vision_token(
    tiny_qwen3vl: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The colocated engine is asked to ban every vision token (``bad_words``), and the training step runs on
    its completions; without the ban the engine's image token reaches the training forward."""
    import trl.generation.vllm_generation as vllm_generation

    fake = install(monkeypatch, answer=lambda prompt: "<|image_pad|><SOLUTION>yes</SOLUTION><|vision_end|>")
    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda: True)
    monkeypatch.setattr(vllm_generation, "LLM", fake.module.LLM, raising=False)
    monkeypatch.setattr(vllm_generation, "SamplingParams", fake.module.SamplingParams, raising=False)
    extra = ["--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_enable_sleep_mode", "false"]
    extra += ["--generation_kwargs", '{"bad_words": ["maybe"]}']  # the recipe's own ban stays
    recorder, trainer = train_one_step(tiny_qwen3vl, tmp_path, *extra)
    (generate,) = fake.named("generate")
    assert set(generate["params"].extra["bad_words"]) == VISION_TOKENS | {"maybe"}
    assert all("prompt_token_ids" in request and "multi_modal_data" in request for request in generate["requests"])
    assert len(recorder.completion_ids) == 4
    sampled = {token for ids in recorder.completion_ids for token in ids}
    assert not sampled & vision_ids(trainer.processing_class)
    assert trainer.state.global_step == 1

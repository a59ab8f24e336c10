"""A vision tower that sees per-instance attributes (issue 43): ``freeze_vision_tower`` on every trainer's model,
FINER-worded attribute pairs in the SFT warm-start's data, and the tiny models' vision-tower pretraining."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from finetune.configs import VerituneModelConfig
from finetune.models import freeze_vision_tower, get_model, vision_modules
from veritune.core.errors import UserError


@pytest.mark.parametrize("fixture", ["tiny_qwen3vl", "tiny_qwen25vl"])
def test_freeze_vision_tower_freezes_the_tower_and_its_merger_only(
    fixture: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    path = request.getfixturevalue(fixture)
    with caplog.at_level(logging.INFO, logger="finetune.models"):
        model = get_model(VerituneModelConfig(model_name_or_path=str(path), freeze_vision_tower=True))
    assert [name for name, _ in vision_modules(model)] == ["model.visual"]
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {name for name, _ in model.named_parameters() if name.startswith("model.visual.")}
    assert any(".merger." in name for name in frozen)  # the merger (projector into the LM) is part of the tower
    assert any(name.startswith("model.language_model.") for name, p in model.named_parameters() if p.requires_grad)
    count = sum(p.numel() for name, p in model.named_parameters() if name in frozen)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("freeze_vision_tower")]
    assert lines == [f"freeze_vision_tower: {count} parameters frozen (model.visual); the language model trains"]
    unfrozen = get_model(VerituneModelConfig(model_name_or_path=str(path)))
    assert all(p.requires_grad for p in unfrozen.parameters())  # off by default


def test_freeze_vision_tower_refuses_a_model_without_one() -> None:
    language_only = torch.nn.Sequential()
    language_only.add_module("language_model", torch.nn.Linear(2, 2))
    with pytest.raises(UserError, match=r"freeze_vision_tower: Sequential has no vision tower veritune recognises"):
        freeze_vision_tower(language_only)


def test_freeze_vision_tower_with_lora_keeps_the_adapters_on_the_language_model() -> None:
    VerituneModelConfig(freeze_vision_tower=True, use_peft=True)  # LoRA on the LM only: allowed (nothing to freeze)
    with pytest.raises(UserError, match="freeze_vision_tower: with use_peft and lora_language_model_only: false"):
        VerituneModelConfig(freeze_vision_tower=True, use_peft=True, lora_language_model_only=False)

"""Loading the policy model, its processor and its LoRA configuration, for any VLM family."""

from __future__ import annotations

import importlib.util
import logging
import re
from typing import Any

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor
from trl import get_peft_config

from finetune.configs import VerituneModelConfig
from veritune.core.errors import UserError

logger = logging.getLogger(__name__)

# Sub-module names under which VLM families keep their vision encoder and projector.
VISION_MODULE_NAMES = (
    "visual",
    "vision_tower",
    "vision_model",
    "vision_encoder",
    "multi_modal_projector",
    "mm_projector",
    "merger",
)
LANGUAGE_MODEL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def resolve_attn_implementation(requested: str | None) -> str | None:
    """``flash_attention_2`` when flash-attn is installed and a GPU is present, else ``sdpa`` with a warning."""
    if requested in ("flash_attention_2", "flash_attention_3"):
        module = "flash_attn" if requested == "flash_attention_2" else "flash_attn_interface"
        if importlib.util.find_spec(module) is None or not torch.cuda.is_available():
            logger.warning(
                "%s requested but flash-attn or a GPU is not available here; falling back to sdpa", requested
            )
            return "sdpa"
    return requested


def language_model_only_targets(target_modules: list[str] | str | None) -> str | list[str] | None:
    """A PEFT ``target_modules`` regex that matches the given module names outside the vision tower.

    PEFT matches a list of names by suffix, so ``["q_proj", "v_proj"]`` would also wrap vision-tower
    projections in families whose encoder uses those names; a regex string is matched in full instead.

    >>> pattern = language_model_only_targets(["q_proj", "v_proj"])
    >>> bool(re.fullmatch(pattern, "model.language_model.layers.0.self_attn.q_proj"))
    True
    >>> bool(re.fullmatch(pattern, "model.vision_tower.encoder.layers.0.self_attn.q_proj"))
    False
    """
    if target_modules is None or isinstance(target_modules, str):
        if target_modules in (None, "all-linear"):
            target_modules = list(LANGUAGE_MODEL_LINEAR)
        else:
            return target_modules  # already a regex: the user owns it
    names = "|".join(re.escape(name) for name in target_modules)
    excluded = "|".join(VISION_MODULE_NAMES)
    return rf"^(?!.*\b(?:{excluded})\b).*\.(?:{names})$"


def get_lora_config(model_args: VerituneModelConfig) -> Any:
    """TRL's LoRA config from the recipe, restricted to the language model unless told otherwise."""
    peft_config = get_peft_config(model_args)
    if peft_config is not None and model_args.lora_language_model_only:
        peft_config.target_modules = language_model_only_targets(model_args.lora_target_modules)
    return peft_config


def get_processor(model_args: VerituneModelConfig) -> Any:
    """The model's processor (tokenizer + image/video processors), left-padded for generation."""
    try:
        processor = AutoProcessor.from_pretrained(
            model_args.model_name_or_path, revision=model_args.model_revision, padding_side="left"
        )
    except OSError as err:
        raise UserError(
            f"model_name_or_path: cannot load a processor from {model_args.model_name_or_path!r}: {err}"
        ) from None
    return processor


def get_model(model_args: VerituneModelConfig) -> Any:
    """The policy as an ``AutoModelForImageTextToText`` with the recipe's dtype and attention kernel."""
    if not model_args.model_name_or_path:
        raise UserError("model_name_or_path: required (a hub id or a local checkpoint directory)")
    dtype = model_args.dtype if model_args.dtype in ("auto", None) else getattr(torch, model_args.dtype)
    try:
        return AutoModelForImageTextToText.from_pretrained(
            model_args.model_name_or_path,
            revision=model_args.model_revision,
            dtype=dtype,
            attn_implementation=resolve_attn_implementation(model_args.attn_implementation),
        )
    except OSError as err:
        raise UserError(f"model_name_or_path: cannot load {model_args.model_name_or_path!r}: {err}") from None


def count_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total

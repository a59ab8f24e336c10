"""Loading the policy model, its processor and its LoRA configuration, for any VLM family."""

from __future__ import annotations

import importlib.util
import logging
import re
from typing import Any

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor
from trl import get_peft_config

from core.errors import UserError
from finetune.configs import VerituneModelConfig

logger = logging.getLogger(__name__)

# Sub-module names under which VLM families keep their vision encoder and projector (Qwen2-VL, Qwen2.5-VL and
# Qwen3-VL: `visual`, its merger inside; LLaVA-style models: `vision_tower` + `multi_modal_projector`; ...). The
# one list that both LoRA's language-model-only targets and `freeze_vision_tower` (:func:`vision_modules`) read.
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


def vision_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``(name, module)`` of the model's vision encoder and projector: the outermost sub-modules whose own name
    is one of :data:`VISION_MODULE_NAMES` (``model.visual`` of a Qwen3-VL, which holds its mergers; a LLaVA's
    ``model.vision_tower`` and ``model.multi_modal_projector``); empty when the model has none."""
    found: list[tuple[str, torch.nn.Module]] = []
    for name, module in model.named_modules():
        inside = any(name.startswith(f"{outer}.") for outer, _ in found)
        if not inside and name.rpartition(".")[2] in VISION_MODULE_NAMES:
            found.append((name, module))
    return found


def freeze_vision_tower(model: torch.nn.Module) -> int:
    """Set ``requires_grad`` False on every parameter of the vision encoder and its merger/projector
    (:func:`vision_modules`); returns how many parameters (elements) were frozen and logs one INFO line.

    Raises:
        UserError: the model has no sub-module veritune recognises as its vision tower.
    """
    modules = vision_modules(model)
    if not modules:
        raise UserError(
            f"freeze_vision_tower: {type(model).__name__} has no vision tower veritune recognises (a sub-module "
            f"named one of {', '.join(VISION_MODULE_NAMES)})"
        )
    frozen: dict[int, torch.nn.Parameter] = {}
    for _, module in modules:
        for parameter in module.parameters():
            parameter.requires_grad_(False)
            frozen[id(parameter)] = parameter
    count = sum(parameter.numel() for parameter in frozen.values())
    logger.info(
        "freeze_vision_tower: %d parameters frozen (%s); the language model trains",
        count,
        ", ".join(name for name, _ in modules),
    )
    return count


def get_lora_config(model_args: VerituneModelConfig) -> Any:
    """TRL's LoRA config from the recipe, restricted to the language model unless told otherwise."""
    peft_config = get_peft_config(model_args)
    if peft_config is not None and model_args.lora_language_model_only:
        peft_config.target_modules = language_model_only_targets(model_args.lora_target_modules)
    return peft_config


def get_processor(model_args: VerituneModelConfig) -> Any:
    """The model's processor (tokenizer + image/video processors), left-padded: for generation, and because TRL
    left-pads GRPO's prompts but builds Qwen-VL's ``mm_token_type_ids`` with the processor's padding side
    (right-padded, the log-probs are wrong; tests/test_padding_logps.py)."""
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
    """The policy as an ``AutoModelForImageTextToText`` with the recipe's dtype and attention kernel, its vision
    tower frozen with ``freeze_vision_tower`` (:func:`freeze_vision_tower`)."""
    if not model_args.model_name_or_path:
        raise UserError("model_name_or_path: required (a hub id or a local checkpoint directory)")
    dtype = model_args.dtype if model_args.dtype in ("auto", None) else getattr(torch, model_args.dtype)
    try:
        model = AutoModelForImageTextToText.from_pretrained(
            model_args.model_name_or_path,
            revision=model_args.model_revision,
            dtype=dtype,
            attn_implementation=resolve_attn_implementation(model_args.attn_implementation),
        )
    except OSError as err:
        raise UserError(f"model_name_or_path: cannot load {model_args.model_name_or_path!r}: {err}") from None
    if getattr(model_args, "freeze_vision_tower", False):
        # With LoRA, PEFT freezes every base weight anyway and lora_language_model_only (checked in
        # VerituneModelConfig) keeps the adapters off the tower: there this changes nothing that trains.
        freeze_vision_tower(model)
    if getattr(model_args, "vision_feature_cache", False):
        from finetune.vision_cache import cache_vision_features

        cache_vision_features(model)
    return model


def count_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total

"""Image tokens per image of each DPO recipe's model family, from its released processor settings, offline.

    python perf/dpo_image_tokens.py

Each family's real image processor and processor classes (transformers) are built with the values of the
model's released ``preprocessor_config.json`` / ``processor_config.json`` and a stand-in tokenizer that
holds only the family's image tokens; a blank image of each size is processed as TRL's DPO collator
processes a prompt, and the image tokens in ``input_ids`` are counted. The sizes: FINER-Tuning's images
are Pixmo-caption's (FINER, arXiv 2603.17662, Sec. 3, App. C), web photos of any size, which veritune
scales down to the recipes' ``max_pixels`` (589,824 = 768 x 768) before the processor sees them; 640 x 480
is a typical photo under that budget, the others fill it at common aspect ratios. docs/TRAINING.md records
the table and the ``max_length`` each recipe sets from it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from PIL import Image
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

MAX_PIXELS = 589_824  # recipes/base/finer_dpo.yaml
SIZES = [(640, 480), (768, 768), (887, 665), (665, 887), (1024, 576), (576, 1024), (1254, 470)]


def within_budget(width: int, height: int) -> tuple[int, int]:
    """The size ``core.images.load_image`` gives an image of ``width`` x ``height`` under ``MAX_PIXELS``."""
    if width * height <= MAX_PIXELS:
        return width, height
    scale = math.sqrt(MAX_PIXELS / (width * height))
    return max(1, int(width * scale)), max(1, int(height * scale))


def stand_in_tokenizer(tokens: list[str], **named: str) -> PreTrainedTokenizerFast:
    """A word-level tokenizer that knows only ``tokens`` (each a special token) and ``<unk>``."""
    vocab = {"<unk>": 0, **{token: i + 1 for i, token in enumerate(tokens)}}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
        unk_token="<unk>",
        pad_token="<unk>",
        extra_special_tokens=named or None,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": tokens})
    return tokenizer


def llava16() -> tuple[Any, str]:
    """llava-hf/llava-v1.6-vicuna-7b-hf: CLIP ViT-L/14 at 336, any-resolution pinpoints, a CLS token."""
    from transformers import LlavaNextImageProcessor, LlavaNextProcessor

    image_processor = LlavaNextImageProcessor(
        size={"shortest_edge": 336},
        crop_size={"height": 336, "width": 336},
        image_grid_pinpoints=[[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
        do_pad=True,
        image_mean=[0.48145466, 0.4578275, 0.40821073],
        image_std=[0.26862954, 0.26130258, 0.27577711],
    )
    processor = LlavaNextProcessor(
        image_processor=image_processor,
        tokenizer=stand_in_tokenizer(["<image>"]),
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )
    return processor, "<image>"


def qwen25vl() -> tuple[Any, str]:
    """Qwen/Qwen2.5-VL-7B-Instruct: 14-pixel patches merged 2 x 2, 3,136 to 12,845,056 pixels."""
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(
            min_pixels=3136, max_pixels=12845056, patch_size=14, merge_size=2, temporal_patch_size=2
        ),
        tokenizer=stand_in_tokenizer(["<|image_pad|>", "<|video_pad|>"]),
        video_processor=Qwen2VLVideoProcessor(),
    )
    return processor, "<|image_pad|>"


def qwen3vl() -> tuple[Any, str]:
    """Qwen/Qwen3-VL-8B-Instruct: 16-pixel patches merged 2 x 2, 65,536 to 16,777,216 pixels."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    tokens = ["<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]
    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(
            size={"shortest_edge": 65536, "longest_edge": 16777216},
            patch_size=16,
            merge_size=2,
            temporal_patch_size=2,
            image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5],
        ),
        tokenizer=stand_in_tokenizer(tokens),
        video_processor=Qwen3VLVideoProcessor(),
    )
    return processor, "<|image_pad|>"


def internvl35() -> tuple[Any, str]:
    """OpenGVLab/InternVL3_5-8B-HF and -14B-HF: 448-pixel tiles, 1 to 12 of them plus a thumbnail, 256 tokens each."""
    from transformers import GotOcr2ImageProcessor, InternVLProcessor, InternVLVideoProcessor

    named = {
        "start_image_token": "<img>",
        "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>",
        "video_token": "<video>",
    }
    processor = InternVLProcessor(
        image_processor=GotOcr2ImageProcessor(
            size={"height": 448, "width": 448},
            crop_to_patches=True,
            min_patches=1,
            max_patches=12,
            image_mean=[0.485, 0.456, 0.406],
            image_std=[0.229, 0.224, 0.225],
        ),
        tokenizer=stand_in_tokenizer(list(named.values()), **named),
        video_processor=InternVLVideoProcessor(),
        image_seq_length=256,
    )
    return processor, "<IMG_CONTEXT>"


FAMILIES: dict[str, tuple[str, Callable[[], tuple[Any, str]]]] = {
    "LLaVA-1.6-7B": ("llava16_7b_finer_lora", llava16),
    "Qwen2.5-VL-7B": ("qwen25vl_7b_finer_lora", qwen25vl),
    "Qwen3-VL-8B": ("qwen3vl_8b_finer_lora, qwen3vl_8b_finer_full", qwen3vl),
    "InternVL3.5-8B/14B": ("internvl35_8b_finer_lora, internvl35_14b_finer_lora", internvl35),
}


def image_tokens(processor: Any, image_token: str, width: int, height: int) -> int:
    """Image tokens (placeholders and the family's image markers) in a prompt that is one image."""
    image = Image.new("RGB", (width, height), (120, 120, 120))
    ids = processor(text=[image_token], images=[image], add_special_tokens=False)["input_ids"][0]
    return len(ids)


def main() -> None:
    budget = [within_budget(w, h) for w, h in SIZES]
    header = " | ".join(f"{w}x{h}" for w, h in budget)
    print(f"image tokens per image (images scaled to max_pixels {MAX_PIXELS:,} first)\n")
    print(f"| family | recipes | {header} | most |")
    print("| --- | --- | " + " | ".join("---" for _ in budget) + " | --- |")
    for family, (recipes, build) in FAMILIES.items():
        processor, token = build()
        counts = [image_tokens(processor, token, w, h) for w, h in budget]
        print(f"| {family} | {recipes} | " + " | ".join(f"{c:,}" for c in counts) + f" | {max(counts):,} |")


if __name__ == "__main__":
    main()

"""Tiny random-initialised VLM checkpoints, built offline, that load like hub models.

No weights can be downloaded on CI machines, so the demo and the tests train and evaluate tiny models
built here from a config: a few-layer Qwen3-VL (or Qwen2.5-VL, to prove nothing is Qwen3-specific), a
byte-level BPE tokenizer trained locally with the ``tokenizers`` library that carries the family's real
special tokens, a chat template that renders conversations the way the real one does, and the real
image and video processors. The result is a directory that ``AutoModelForImageTextToText`` and
``AutoProcessor`` load with ``from_pretrained(dir)``.

    veritune tiny-model --family qwen3vl --out outputs/tiny-qwen3vl

Everything is deterministic given the seed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import atomic_write_text

# The model's identity (family, seed, patch size), written last: a folder without it is not a complete model.
IDENTITY_FILE = "veritune_tiny.json"

# The special tokens of the Qwen2-VL / Qwen2.5-VL / Qwen3-VL tokenizers, in their release order.
QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
# Tokens the Qwen3 tokenizers add as ordinary (non-special) added tokens.
QWEN3_ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]

# A chat template that renders messages exactly as the Qwen-VL instruct templates do: ChatML turns, images
# as <|vision_start|><|image_pad|><|vision_end|> in place, videos likewise, an optional system turn, and
# `add_generation_prompt` opening the assistant turn. (Tool calling is not rendered: no recipe uses it.)
QWEN_VL_CHAT_TEMPLATE = """{%- set image_count = namespace(value=0) -%}
{%- set video_count = namespace(value=0) -%}
{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\\n' -}}
{%- if message['content'] is string -%}
{{- message['content'] -}}
{%- else -%}
{%- for part in message['content'] -%}
{%- if part['type'] == 'image' or 'image' in part or 'image_url' in part -%}
{%- set image_count.value = image_count.value + 1 -%}
{%- if add_vision_id -%}{{- 'Picture ' + image_count.value|string + ': ' -}}{%- endif -%}
{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
{%- elif part['type'] == 'video' or 'video' in part -%}
{%- set video_count.value = video_count.value + 1 -%}
{%- if add_vision_id -%}{{- 'Video ' + video_count.value|string + ': ' -}}{%- endif -%}
{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}
{%- elif 'text' in part -%}
{{- part['text'] -}}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- endif -%}"""

FAMILIES = ("qwen3vl", "qwen25vl")
# Each family's vision patch side in pixels, as in the real checkpoints (``build_tiny_model(patch_size=...)``
# overrides it).
PATCH_SIZES = {"qwen3vl": 16, "qwen25vl": 14}
MERGE_SIZE = 2  # both families merge 2x2 patches into one language-model token

# Words the tiny tokenizer should hold as whole tokens: the prompts, tags and answers our recipes use.
_CORPUS_SEED_TEXT = """
Is there a cat in the image? Does the image contain an umbrella? Have you noticed a traffic light in the image?
Can you see a dog in the image? Please first provide your reasoning or working out on how you would go about
solving the question between <REASONING> and </REASONING> and then your final answer between <SOLUTION> and
(put yes or no here) </SOLUTION>. <REASONING> I look at the image carefully. </REASONING> <SOLUTION> yes
</SOLUTION> <SOLUTION> no </SOLUTION> Yes, I can see it. No, but I can see something else. Yes No yes no
Please answer with a single capital letter (A, B, C, D, or E). A B C D E The answer is B. How many are there?
zero one two three four five six seven eight nine ten 0 1 2 3 4 5 6 7 8 9 10
person bicycle car motorcycle airplane bus train truck boat traffic light fire hydrant stop sign parking meter
bench bird cat dog horse sheep cow elephant bear zebra giraffe backpack umbrella handbag tie suitcase frisbee
skis snowboard sports ball kite baseball bat glove skateboard surfboard tennis racket bottle wine glass cup fork
knife spoon bowl banana apple sandwich orange broccoli carrot hot dog pizza donut cake chair couch potted plant
bed dining table toilet tv laptop mouse remote keyboard cell phone microwave oven toaster sink refrigerator book
clock vase scissors teddy bear hair drier toothbrush red green blue yellow black white small large left right
on top of next to under behind in front of holding wearing sitting standing a an the of and or is are with
"""


# Named model sizes. "test" (the default) keeps the test fixtures fast; "demo" is the miniature experiment's
# model (docs/LAB_NOTEBOOK_ARCHIVE.md#diagnosis): a wider vision tower and LM, and weights drawn with std 0.1 instead of
# transformers' 0.02. At 0.02 a model this narrow sits on a loss plateau for ~1,000 steps before its answers
# depend on the image; at 0.1 the warm-start learns the scene prior in a few hundred steps.
SIZES: dict[str, dict[str, float]] = {
    "test": {"text_hidden": 64, "text_layers": 2, "text_heads": 4, "vision_hidden": 32, "vision_heads": 2},
    "demo": {
        "text_hidden": 128,
        "text_layers": 2,
        "text_heads": 8,
        "vision_hidden": 64,
        "vision_heads": 4,
        "initializer_range": 0.1,
    },
}


def build_tiny_model(
    family: str,
    out_dir: str | Path,
    seed: int = 0,
    image_size: int = 64,
    format_warmup_steps: int = 150,
    size: str = "test",
    patch_size: int | None = None,
) -> Path:
    """Build a tiny random-initialised VLM checkpoint directory and return its path.

    Args:
        family: ``"qwen3vl"`` (Qwen3-VL) or ``"qwen25vl"`` (Qwen2.5-VL).
        out_dir: where to write ``config.json``, weights, tokenizer, processor and chat template, then the
            identity file (:data:`IDENTITY_FILE`) last.
        seed: seeds the weight initialisation (the tokenizer is deterministic on its own).
        image_size: the processors' pixel budget is set to about ``image_size``² so that images are
            resized down to a handful of vision tokens.
        format_warmup_steps: next-token steps on R1-style answers (``<REASONING>...</REASONING>
            <SOLUTION>yes|no</SOLUTION>``, yes and no at random) so that GRPO starts with reward variance, as
            an instruction-tuned model would; 0 keeps the weights purely random.
        size: a key of ``SIZES``: ``"test"`` (the default, smallest) or ``"demo"`` (qwen3vl only).
        patch_size: the vision tower's patch side in pixels, in its config and in both processors; None keeps
            the family's (:data:`PATCH_SIZES`: 16 for Qwen3-VL, 14 for Qwen2.5-VL). The language model gets
            ``(image_size / (patch_size * 2))²`` vision tokens per image (merge 2): 4 at 64 px and patch 16,
            16 at patch 8, which the attribute experiments need (docs/LAB_NOTEBOOK_ARCHIVE.md#seeing-base).

    Example:
        >>> from transformers import AutoModelForImageTextToText  # doctest: +SKIP
        >>> model = AutoModelForImageTextToText.from_pretrained(build_tiny_model("qwen3vl", "tiny"))  # doctest: +SKIP
    """
    if family not in FAMILIES:
        raise UserError(f"unknown tiny model family {family!r}; choose one of: {', '.join(FAMILIES)}")
    if size not in SIZES or (size != "test" and family != "qwen3vl"):
        raise UserError(f"unknown tiny model size {size!r} for {family}; choose one of: {', '.join(SIZES)}")
    patch = PATCH_SIZES[family] if patch_size is None else patch_size
    if patch < 2 or patch % 2:
        raise UserError(f"--patch-size: expected an even number of pixels of at least 2, got {patch}")
    import torch
    from transformers import AutoModelForImageTextToText

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / IDENTITY_FILE).unlink(missing_ok=True)  # a rebuild killed halfway is not taken for a complete model
    tokenizer = _build_tokenizer(family)
    config = _build_config(family, tokenizer, SIZES[size], patch)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.pad_token_id]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if format_warmup_steps > 0:
        _warm_up_answer_format(model, tokenizer, format_warmup_steps, seed)
    model.save_pretrained(out_dir)
    processor = _build_processor(family, tokenizer, image_size, patch)
    processor.save_pretrained(out_dir)
    identity: dict[str, Any] = {"family": family, "seed": seed}
    if patch != PATCH_SIZES[family]:  # a default model's identity file is the one written before the option
        identity["patch_size"] = patch
    atomic_write_text(out_dir / IDENTITY_FILE, json.dumps(identity) + "\n")
    return out_dir


_WARMUP_QUESTIONS = ["Is there a {} in the image?", "Does the image contain a {}?", "Can you see a {} in the image?"]
_WARMUP_OBJECTS = ["cat", "dog", "apple", "umbrella", "car", "cup", "bench", "clock", "kite", "bowl"]
_WARMUP_REASONS = ["I look at the image.", "I check the objects.", "I see the image.", "I look carefully."]


def _warm_up_answer_format(model: Any, tokenizer: Any, steps: int, seed: int) -> None:
    """Teach the tiny model the shape of an R1-style answer with a few steps of next-token training.

    Answers are yes or no at random, so the model learns the format but not the content: accuracy stays
    at chance and is left for GRPO to improve.
    """
    import random

    import torch

    rng = random.Random(seed)
    instruction = (
        " Please first provide your reasoning or working out on how you would go about solving the question "
        "between <REASONING> and </REASONING> and then your final answer between <SOLUTION> and (put yes or no "
        "here) </SOLUTION>."
    )

    def example() -> str:
        question = rng.choice(_WARMUP_QUESTIONS).format(rng.choice(_WARMUP_OBJECTS))
        answer = (
            f"<REASONING> {rng.choice(_WARMUP_REASONS)} </REASONING> <SOLUTION> {rng.choice(['yes', 'no'])} </SOLUTION>"
        )
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": question + instruction}], add_generation_prompt=True, tokenize=False
        )
        return prompt + answer + "<|im_end|>"

    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, foreach=True)  # torch's loop on the CPU, same bits
    for _ in range(steps):
        batch = tokenizer([example() for _ in range(8)], return_tensors="pt", padding=True)
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        loss = model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


def _build_tokenizer(family: str) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    pretokenize = (  # the Qwen2 tokenizer's pre-tokenisation pattern
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    )
    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pretokenize), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [line for line in _CORPUS_SEED_TEXT.splitlines() if line.strip()]
    bpe.train_from_iterator(corpus * 4, trainer=trainer)
    state = json.loads(bpe.to_str())
    vocab: dict[str, int] = state["model"]["vocab"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in state["model"]["merges"]]

    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=32768,
        errors="replace",
    )
    tokenizer.add_special_tokens({"additional_special_tokens": QWEN_SPECIAL_TOKENS[1:]})
    tokenizer.add_tokens(["<|endoftext|>"], special_tokens=True)
    if family == "qwen3vl":
        tokenizer.add_tokens(QWEN3_ADDED_TOKENS)
    tokenizer.chat_template = QWEN_VL_CHAT_TEMPLATE
    return tokenizer


def _build_config(family: str, tokenizer: Any, dims: dict[str, float] | None = None, patch: int | None = None) -> Any:
    """The model config of a tiny ``family`` checkpoint with ``dims`` (a value of :data:`SIZES`), vision patches
    of ``patch`` pixels (None: the family's) and the tokenizer's special-token ids."""
    patch = PATCH_SIZES[family] if patch is None else patch
    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in QWEN_SPECIAL_TOKENS}
    vocab_size = len(tokenizer)
    vocab_size += -vocab_size % 64  # round up, as real checkpoints pad their embedding tables
    common_ids = {
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
    }
    if family == "qwen3vl":
        return _qwen3vl_config(tokenizer, dims or SIZES["test"], vocab_size, common_ids, patch)
    return _qwen25vl_config(tokenizer, ids, vocab_size, common_ids, patch)


def _qwen3vl_config(
    tokenizer: Any, dims: dict[str, float], vocab_size: int, common_ids: dict[str, int], patch: int = 16
) -> Any:
    """A Qwen3-VL config: a ``dims``-sized LM and vision tower (``patch``-px patches, merge 2, deepstack at
    block 0)."""
    init_std = dims.get("initializer_range", 0.02)
    from transformers import Qwen3VLConfig

    return Qwen3VLConfig(
        text_config={
            "vocab_size": vocab_size,
            "hidden_size": dims["text_hidden"],
            "intermediate_size": 2 * dims["text_hidden"],
            "num_hidden_layers": dims["text_layers"],
            "num_attention_heads": dims["text_heads"],
            "num_key_value_heads": 2,
            "head_dim": 16,  # mrope_section [2, 3, 3] covers head_dim / 2 = 8
            "max_position_embeddings": 4096,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5_000_000.0,
                "mrope_section": [2, 3, 3],
                "mrope_interleaved": True,
            },
            "pad_token_id": tokenizer.pad_token_id,
            "tie_word_embeddings": False,
            "initializer_range": init_std,
        },
        vision_config={
            "depth": 2,
            "hidden_size": dims["vision_hidden"],
            "intermediate_size": 2 * dims["vision_hidden"],
            "num_heads": dims["vision_heads"],
            "patch_size": patch,
            "spatial_merge_size": MERGE_SIZE,
            "temporal_patch_size": 2,
            "out_hidden_size": dims["text_hidden"],
            "num_position_embeddings": 64,
            "deepstack_visual_indexes": [0],
            "initializer_range": init_std,
        },
        tie_word_embeddings=False,
        **common_ids,
    )


def _qwen25vl_config(
    tokenizer: Any, ids: dict[str, int], vocab_size: int, common_ids: dict[str, int], patch: int = 14
) -> Any:
    """A Qwen2.5-VL config at the test size (``patch``-px patches, windowed attention with one full block)."""
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(
        text_config={
            "vocab_size": vocab_size,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 4096,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [2, 3, 3]},
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
        },
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "patch_size": patch,
            "spatial_merge_size": MERGE_SIZE,
            "temporal_patch_size": 2,
            "out_hidden_size": 64,
            "window_size": 56,
            "fullatt_block_indexes": [1],
        },
        tie_word_embeddings=False,
        **common_ids,
    )


def _build_processor(family: str, tokenizer: Any, image_size: int, patch: int | None = None) -> Any:
    from transformers import Qwen2VLImageProcessor

    patch = PATCH_SIZES[family] if patch is None else patch
    unit = patch * MERGE_SIZE  # one merged vision token covers (patch * merge)² pixels
    max_pixels = max(image_size * image_size, unit * unit)
    size = {"shortest_edge": unit * unit, "longest_edge": max_pixels}
    image_processor = Qwen2VLImageProcessor(
        patch_size=patch,
        merge_size=MERGE_SIZE,
        temporal_patch_size=2,
        size=size,
        image_mean=[0.5, 0.5, 0.5] if family == "qwen3vl" else [0.48145466, 0.4578275, 0.40821073],
        image_std=[0.5, 0.5, 0.5] if family == "qwen3vl" else [0.26862954, 0.26130258, 0.27577711],
    )
    if family == "qwen3vl":
        from transformers import Qwen3VLProcessor, Qwen3VLVideoProcessor

        video_processor = Qwen3VLVideoProcessor(
            patch_size=patch, merge_size=MERGE_SIZE, temporal_patch_size=2, size=size
        )
        return Qwen3VLProcessor(
            image_processor=image_processor,
            tokenizer=tokenizer,
            video_processor=video_processor,
            chat_template=QWEN_VL_CHAT_TEMPLATE,
        )
    from transformers import Qwen2_5_VLProcessor, Qwen2VLVideoProcessor

    video_processor = Qwen2VLVideoProcessor(patch_size=patch, merge_size=MERGE_SIZE, temporal_patch_size=2, size=size)
    return Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=QWEN_VL_CHAT_TEMPLATE,
    )

"""Token lengths of training rows as TRL's vision collators render them, image tokens included: a GRPO prompt
(:func:`prompt_lengths`) and a DPO row's prompt plus its longer answer (:func:`preference_lengths`); and the
rows that fit a limit (:func:`rows_within`), measured a batch of rows per processor call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from PIL import Image
from tqdm import tqdm
from trl.data_utils import apply_chat_template, prepare_multimodal_messages

LENGTH_BATCH = 64  # rows measured per processor call

Row = TypeVar("Row")


def prompt_lengths(processor: Any, prompts: list[list[dict[str, Any]]], images: list[Image.Image]) -> list[int]:
    """Tokens of each one-image prompt with its generation prompt (TRL's GRPOTrainer), in one processor call."""
    texts = [
        processor.apply_chat_template(
            prepare_multimodal_messages(prompt, [image]), add_generation_prompt=True, tokenize=False
        )
        for prompt, image in zip(prompts, images, strict=True)
    ]
    return [len(ids) for ids in processor(text=texts, images=images)["input_ids"]]


def preference_lengths(processor: Any, rows: Sequence[dict[str, Any]], images: list[list[Image.Image]]) -> list[int]:
    """Tokens of each preference row's prompt (with ``images``) plus its longer answer, as TRL's
    ``DataCollatorForVisionPreference`` renders and concatenates them before it truncates at ``max_length``.
    Each prompt's images are processed once; the answers are tokenized as text."""
    texts = [
        apply_chat_template(
            {
                "prompt": prepare_multimodal_messages(row["prompt"], images=row_images),
                "chosen": prepare_multimodal_messages(row["chosen"]),
                "rejected": prepare_multimodal_messages(row["rejected"]),
            },
            processor,
        )
        for row, row_images in zip(rows, images, strict=True)
    ]
    prompts = [text["prompt"] for text in texts]
    with_images = [i for i, row_images in enumerate(images) if row_images]
    without = [i for i, row_images in enumerate(images) if not row_images]
    prompt_tokens = [0] * len(rows)
    for group, group_images in ((with_images, [images[i] for i in with_images]), (without, None)):
        if group:
            ids = processor(text=[prompts[i] for i in group], images=group_images, add_special_tokens=False)
            for i, tokens in zip(group, ids["input_ids"], strict=True):
                prompt_tokens[i] = len(tokens)
    answers = processor(
        text=[text["chosen"] for text in texts] + [text["rejected"] for text in texts], add_special_tokens=False
    )["input_ids"]
    chosen, rejected = answers[: len(rows)], answers[len(rows) :]
    return [p + max(len(c), len(r)) for p, c, r in zip(prompt_tokens, chosen, rejected, strict=True)]


def rows_within(
    rows: Sequence[Row], measure: Callable[[Sequence[Row]], list[int]], limit: int, desc: str
) -> tuple[list[int], int]:
    """The indices of the ``rows`` whose ``measure`` (a batch of rows -> their token counts) is at most
    ``limit``, and the longest count seen."""
    kept: list[int] = []
    longest = 0
    with tqdm(total=len(rows), desc=desc, unit="row", disable=len(rows) < 200) as bar:
        for start in range(0, len(rows), LENGTH_BATCH):
            lengths = measure(rows[start : start + LENGTH_BATCH])
            kept += [start + offset for offset, length in enumerate(lengths) if length <= limit]
            longest = max([longest, *lengths])
            bar.update(len(lengths))
    return kept, longest

"""Token lengths of training rows as TRL's vision collators render them, image tokens included: a GRPO prompt
(:func:`prompt_lengths`) and a DPO row's prompt plus its longer answer (:class:`PreferenceLengths`); and the
rows that fit a limit (:func:`rows_within`), measured a batch of rows per call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from PIL import Image
from tqdm import tqdm
from trl.data_utils import apply_chat_template, prepare_multimodal_messages

LENGTH_BATCH = 64  # rows measured per processor call

Row = TypeVar("Row")


def prompt_lengths(
    processor: Any, prompts: list[list[dict[str, Any]]], images: list[Image.Image | list[Image.Image]]
) -> list[int]:
    """Tokens of each prompt with its generation prompt (TRL's GRPOTrainer), in one processor call; a prompt's
    image, or its list of images (one placeholder each, in order)."""
    lists = [image if isinstance(image, list) else [image] for image in images]
    texts = [
        processor.apply_chat_template(
            prepare_multimodal_messages(prompt, row_images), add_generation_prompt=True, tokenize=False
        )
        for prompt, row_images in zip(prompts, lists, strict=True)
    ]
    flat = [image for row_images in lists for image in row_images]
    return [len(ids) for ids in processor(text=texts, images=flat)["input_ids"]]


class PreferenceLengths:
    """Tokens of preference rows' prompts (images included) plus their longer answers, as TRL's
    ``DataCollatorForVisionPreference`` renders and concatenates them before it truncates at ``max_length``.

    A processor expands each image's placeholder in the text into tokens whose count depends only on the
    image's size; that count is measured once per size, by the processor on a blank image of that size, so a
    row costs a text tokenization and no image is decoded or processed."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self._image_tokens: dict[tuple[int, int], int] = {}
        self._one_image = processor.apply_chat_template(
            prepare_multimodal_messages([{"role": "user", "content": ""}], images=[None]), tokenize=False
        )

    def _text_tokens(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.processor.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def image_tokens(self, size: tuple[int, int]) -> int:
        """Tokens an image of ``size`` (width, height) adds to a prompt beyond its placeholder's."""
        if size not in self._image_tokens:
            blank = Image.new("RGB", size)
            processed = self.processor(text=[self._one_image], images=[blank], add_special_tokens=False)
            self._image_tokens[size] = len(processed["input_ids"][0]) - self._text_tokens([self._one_image])[0]
        return self._image_tokens[size]

    def __call__(self, rows: Sequence[dict[str, Any]], image_sizes: list[list[tuple[int, int]]]) -> list[int]:
        """Each row's length; ``image_sizes``: each row's images' sizes as they reach the processor."""
        texts = [
            apply_chat_template(
                {
                    "prompt": prepare_multimodal_messages(row["prompt"], images=[None] * len(sizes)),
                    "chosen": prepare_multimodal_messages(row["chosen"]),
                    "rejected": prepare_multimodal_messages(row["rejected"]),
                },
                self.processor,
            )
            for row, sizes in zip(rows, image_sizes, strict=True)
        ]
        prompts = self._text_tokens([text["prompt"] for text in texts])
        answers = self._text_tokens([text["chosen"] for text in texts] + [text["rejected"] for text in texts])
        chosen, rejected = answers[: len(rows)], answers[len(rows) :]
        return [
            prompt + sum(self.image_tokens(size) for size in sizes) + max(c, r)
            for prompt, sizes, c, r in zip(prompts, image_sizes, chosen, rejected, strict=True)
        ]


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

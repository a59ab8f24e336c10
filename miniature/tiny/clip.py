"""A tiny random-initialised CLIP, built offline, for the ORIC builder's demo and tests.

``CLIPModel.from_pretrained(dir)`` and ``CLIPProcessor.from_pretrained(dir)`` load it like the real
``openai/clip-vit-base-patch32``. Its tokenizer is character-level (single-letter BPE pieces with CLIP's
``</w>`` word endings), which is all a random text tower needs to tell class names apart.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

TRAINED_FILE = "trained.json"  # a trained CLIP's training statistics, written after its weights


def build_tiny_clip(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a tiny CLIP checkpoint (model, tokenizer, image processor) to ``out_dir`` and return it."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / TRAINED_FILE).unlink(missing_ok=True)  # these weights are untrained until trained again
    specials = ["<|startoftext|>", "<|endoftext|>"]
    pieces = list(string.ascii_lowercase + string.digits + ".,'-!?")
    vocab = {token: index for index, token in enumerate(specials + pieces + [p + "</w>" for p in pieces])}
    tokenizer = CLIPTokenizer(vocab=vocab, merges=[], model_max_length=77)
    config = CLIPConfig(
        text_config={
            "vocab_size": len(vocab),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_position_embeddings": 77,
            "bos_token_id": vocab["<|startoftext|>"],
            "eos_token_id": vocab["<|endoftext|>"],
            "pad_token_id": vocab["<|endoftext|>"],
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        projection_dim=16,
    )
    torch.manual_seed(seed)
    CLIPModel(config).save_pretrained(out_dir)
    image_processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(out_dir)
    return out_dir


def train_tiny_clip(
    clip_dir: str | Path, annotations: str | Path, image_root: str | Path, *, steps: int = 300, seed: int = 0
) -> dict[str, float]:
    """Train the tiny CLIP at ``clip_dir`` in place on a COCO-format split, so that its similarities mean
    something for ORIC's CLIP-guided negatives (Alg. 2).

    Each image is paired with the text ``an image contains {name}`` of every class (the builder's template)
    and a sigmoid loss (SigLIP-style: a learnt scale and bias on the cosine similarity) pushes pairs of
    present classes up and absent ones down. The image tower thus learns the scene and its objects, and the
    score of an absent class ends up high when the class fits the scene, as a real CLIP's does.

    Returns the first and last loss and the share of (image, class) pairs classified right at the end.
    """
    import random

    import torch
    from transformers import CLIPModel, CLIPProcessor

    from data_builders.oric.clip_negatives import TEXT_TEMPLATE, _features

    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = CLIPModel.from_pretrained(clip_dir)
    processor = CLIPProcessor.from_pretrained(clip_dir)
    names, targets, images = _labelled_images(annotations, image_root)
    pixels = processor(images=images, return_tensors="pt")["pixel_values"]
    text = processor(text=[TEXT_TEMPLATE.format(name=n) for n in names], return_tensors="pt", padding=True)
    scale, bias = torch.nn.Parameter(torch.tensor(10.0)), torch.nn.Parameter(torch.tensor(-5.0))
    optimizer = torch.optim.AdamW([*model.parameters(), scale, bias], lr=3e-3)
    model.train()
    losses = []
    for _ in range(steps):
        batch = rng.sample(range(len(images)), min(64, len(images)))
        image_features = torch.nn.functional.normalize(
            _features(model.get_image_features(pixel_values=pixels[batch])), dim=-1
        )
        text_features = torch.nn.functional.normalize(_features(model.get_text_features(**text)), dim=-1)
        logits = scale * image_features @ text_features.T + bias
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets[batch])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        image_features = torch.nn.functional.normalize(_features(model.get_image_features(pixel_values=pixels)), dim=-1)
        text_features = torch.nn.functional.normalize(_features(model.get_text_features(**text)), dim=-1)
        accuracy = ((scale * image_features @ text_features.T + bias > 0).float() == targets).float().mean().item()
    model.save_pretrained(clip_dir)
    return {"first_loss": losses[0], "last_loss": losses[-1], "pair_accuracy": accuracy}


def write_trained_record(clip_dir: str | Path, stats: dict[str, float]) -> Path:
    """Record that the CLIP at ``clip_dir`` is trained (:func:`train_tiny_clip`'s ``stats``), atomically: the
    record the demo's tiny-CLIP stage counts as done."""
    import json

    from core.io import atomic_write_text

    return atomic_write_text(Path(clip_dir) / TRAINED_FILE, json.dumps(stats) + "\n")


def _labelled_images(annotations: str | Path, image_root: str | Path) -> tuple[list[str], Any, list[Any]]:
    """``(class names, image × class presence matrix, RGB images)`` of a COCO-format split."""
    import torch
    from PIL import Image

    from core.errors import UserError
    from core.io import read_json

    data = read_json(annotations, what="annotation file")
    try:
        names = [c["name"] for c in data["categories"]]
        index = {c["id"]: i for i, c in enumerate(data["categories"])}
        rows = {image["id"]: i for i, image in enumerate(data["images"])}
        targets = torch.zeros(len(rows), len(names))
        for ann in data["annotations"]:
            targets[rows[ann["image_id"]], index[ann["category_id"]]] = 1.0
        files = [Path(image_root) / image["file_name"] for image in data["images"]]
    except (KeyError, TypeError) as err:
        raise UserError(
            f"{annotations}: expected a COCO instances file (images, annotations, categories); missing {err}"
        ) from None
    images = []
    for path in files:
        try:
            with Image.open(path) as opened:
                images.append(opened.convert("RGB"))
        except OSError as err:
            raise UserError(f"{path}: cannot read this image of {annotations} ({err})") from None
    return names, targets, images

"""A tiny random-initialised CLIP, built offline, for the ORIC builder's demo and tests.

``CLIPModel.from_pretrained(dir)`` and ``CLIPProcessor.from_pretrained(dir)`` load it like the real
``openai/clip-vit-base-patch32``. Its tokenizer is character-level (single-letter BPE pieces with CLIP's
``</w>`` word endings), which is all a random text tower needs to tell class names apart.
"""

from __future__ import annotations

import string
from pathlib import Path


def build_tiny_clip(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a tiny CLIP checkpoint (model, tokenizer, image processor) to ``out_dir`` and return it."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
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

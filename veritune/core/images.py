"""Opening images as RGB: scaled to a pixel budget for training, or cached for evaluation."""

from __future__ import annotations

import functools
import math
from pathlib import Path

from PIL import Image


def load_image(path: str | Path, max_pixels: int) -> Image.Image:
    """Open an image as RGB, scaled down (aspect kept) so that width × height <= ``max_pixels``."""
    with Image.open(path) as raw:
        image = raw.convert("RGB")
    width, height = image.size
    if width * height > max_pixels:
        scale = math.sqrt(max_pixels / (width * height))
        image = image.resize((max(1, int(width * scale)), max(1, int(height * scale))), Image.Resampling.BICUBIC)
    return image


IMAGE_CACHE_SIZE = 64  # decoded images kept: ORIC-Bench asks four paraphrases about each image


@functools.lru_cache(maxsize=IMAGE_CACHE_SIZE)
def _decoded(path: str, mtime_ns: int, size: int) -> Image.Image:
    with Image.open(path) as image:
        return image.convert("RGB")


def load_image_cached(path: str | Path, *, cache: bool = True) -> Image.Image:
    """The image as RGB. Decoded images are cached (keyed by path, modification time and size, so an
    edited file is read again): benchmarks ask several questions about one image, and decoding a COCO
    JPEG costs more than a tiny model's forward pass. Processors only read the images they are given."""
    if not cache:
        return _decoded.__wrapped__(str(path), 0, 0)
    stat = Path(path).stat()
    return _decoded(str(path), stat.st_mtime_ns, stat.st_size)

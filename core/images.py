"""Opening images as RGB: scaled to a pixel budget for training, or cached for evaluation; for an
evaluation's blind control, a blank of the image's size instead."""

from __future__ import annotations

import functools
import math
from pathlib import Path

from PIL import Image


def scaled_size(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    """``(width, height)`` scaled down (aspect kept) so that width × height <= ``max_pixels``."""
    if width * height <= max_pixels:
        return width, height
    scale = math.sqrt(max_pixels / (width * height))
    return max(1, int(width * scale)), max(1, int(height * scale))


def load_image(path: str | Path, max_pixels: int) -> Image.Image:
    """Open an image as RGB, scaled down (aspect kept) so that width × height <= ``max_pixels``."""
    with Image.open(path) as raw:
        image = raw.convert("RGB")
    size = scaled_size(*image.size, max_pixels)
    return image if size == image.size else image.resize(size, Image.Resampling.BICUBIC)


def loaded_size(path: str | Path, max_pixels: int) -> tuple[int, int]:
    """The size :func:`load_image` gives the image, read from its header (nothing decoded)."""
    with Image.open(path) as raw:
        return scaled_size(*raw.size, max_pixels)


IMAGE_CACHE_SIZE = 64  # decoded images kept: ORIC-Bench asks four paraphrases about each image
BLIND_FILL = (128, 128, 128)  # the blind control's default blank: mid-grey


@functools.lru_cache(maxsize=IMAGE_CACHE_SIZE)
def _decoded(path: str, mtime_ns: int, size: int) -> Image.Image:
    with Image.open(path) as image:
        return image.convert("RGB")


def blank_image(size: tuple[int, int], fill: tuple[int, int, int] = BLIND_FILL) -> Image.Image:
    """A uniform RGB image of ``size`` (width, height) in the colour ``fill``: what a blind control shows
    the model. The colour is a constant, never one computed from the image (its mean colour would leak
    what the image holds)."""
    return Image.new("RGB", size, fill)


_cached_blank = functools.lru_cache(maxsize=IMAGE_CACHE_SIZE)(blank_image)  # keyed by size and colour, no path


def load_image_cached(
    path: str | Path, *, cache: bool = True, blind_fill: tuple[int, int, int] | None = None
) -> Image.Image:
    """The image as RGB. Decoded images are cached (keyed by path, modification time and size, so an
    edited file is read again): benchmarks ask several questions about one image, and decoding a COCO
    JPEG costs more than a tiny model's forward pass. Processors only read the images they are given.

    ``blind_fill`` (a blind control, ``eval run --blind``): a blank of the image's width and height in that
    colour instead (:func:`blank_image`); only the file's header is read. Blanks are cached by size and
    colour, apart from the decoded images, so neither cache can answer for the other."""
    if blind_fill is not None:
        with Image.open(path) as raw:  # the header only: decoding as RGB keeps this size (nothing is rotated)
            size = raw.size
        fill = (int(blind_fill[0]), int(blind_fill[1]), int(blind_fill[2]))  # hashable, whatever sequence came
        return _cached_blank(size, fill) if cache else blank_image(size, fill)
    if not cache:
        return _decoded.__wrapped__(str(path), 0, 0)
    stat = Path(path).stat()
    return _decoded(str(path), stat.st_mtime_ns, stat.st_size)

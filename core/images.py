"""Opening images as RGB: scaled to a pixel budget for training, or cached for evaluation; for an
evaluation's blind control, a blank of the image's size instead. Writing an image embedded in a data file
(base64 cells, parquet bytes) to a file of its folder: :func:`extract_embedded_image`."""

from __future__ import annotations

import functools
import hashlib
import io
import math
import os
import re
from pathlib import Path

from PIL import Image

from core.errors import UserError
from core.io import atomic_write_bytes


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


def image_budget(num_images: int, max_pixels: int, max_pixels_per_image: int | None = None) -> int:
    """The pixel budget of each image of a prompt holding ``num_images``: ``max_pixels`` for one image; for
    several, ``max_pixels_per_image`` (at most ``max_pixels``), or else ``max_pixels`` shared equally, so an
    N-image prompt costs about the image tokens of a one-image prompt.

    >>> image_budget(1, 1000, 200), image_budget(4, 1000, 200), image_budget(4, 1000)
    (1000, 200, 250)
    """
    if num_images <= 1:
        return max_pixels
    if max_pixels_per_image is not None:
        return min(max_pixels, max_pixels_per_image)
    return max(1, max_pixels // num_images)


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


_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_-]+")
_LABEL_CHARS = 40  # of the row's label kept in the file name
_DIGEST_CHARS = 16  # hex digits of the content's SHA-256 in the file name
_SUFFIXES = {"jpeg": "jpg", "mpo": "jpg"}


def _image_suffix(data: bytes) -> str:
    """The file suffix of the image format the bytes hold (``bin`` when PIL recognises none)."""
    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            kind = (image.format or "").lower()
    except Exception:  # noqa: BLE001 - undecodable bytes: the runner reports the image as unreadable
        kind = ""
    kind = _SUFFIXES.get(kind, _UNSAFE_NAME.sub("", kind))
    return kind or "bin"


def embedded_image_name(data: bytes, label: str) -> str:
    """The file name of an embedded image: ``<label>-<content digest>.<format>``. The label (a row's index)
    keeps only letters, digits, ``_`` and ``-``, so no label names another folder; the digest of the bytes
    gives a changed image, or another file's image under the same label, a name of its own."""
    safe = _UNSAFE_NAME.sub("_", str(label)).strip("_")[:_LABEL_CHARS] or "image"
    digest = hashlib.sha256(data).hexdigest()[:_DIGEST_CHARS]
    return f"{safe}-{digest}.{_image_suffix(data)}"


def extract_embedded_image(data: bytes, folder: str | os.PathLike[str], label: str) -> Path:
    """The file in ``folder`` holding the image ``data`` (named by :func:`embedded_image_name`), written once
    (atomically) and reused while a regular file of that name and size is there.

    Raises:
        UserError: the file would lie outside ``folder`` (a name that :func:`embedded_image_name` never makes;
            checked on every write).
    """
    folder = Path(folder)
    target = folder / embedded_image_name(data, label)
    if target.is_file() and not target.is_symlink() and target.stat().st_size == len(data):
        return target
    folder.mkdir(parents=True, exist_ok=True)
    if target.parent.resolve() != folder.resolve() or target.name in ("", ".", ".."):
        raise UserError(f"{folder}: the image of {label!r} would be written outside this folder ({target})")
    return atomic_write_bytes(target, data)

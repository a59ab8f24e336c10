"""Loading COCO-format instances and splitting an image's classes into ROI and non-ROI (ORIC Alg. 1)."""

from __future__ import annotations

import contextlib
import io
import itertools
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import gc_paused, read_json

# Object-size tiers of ORIC's size analysis (seed App. B.3.3), in square pixels.
SMALL_MAX_AREA = 24 * 24
LARGE_MIN_AREA = 96 * 96


@dataclass
class ImageRecord:
    """One annotated image: its file, size and the boxes of each class present."""

    image_id: int
    file_name: str
    width: int
    height: int
    boxes: dict[str, list[list[float]]]


def load_instances(path: str | Path) -> tuple[list[ImageRecord], list[str]]:
    """Load a COCO ``instances`` file with pycocotools; return its images and all category names.

    Crowd boxes count as present. Every structural problem is a one-line error naming the file.
    """
    with gc_paused(keep=True):  # millions of containers, none of them garbage, kept for the whole build
        return _load_instances(path)


def _load_instances(path: str | Path) -> tuple[list[ImageRecord], list[str]]:
    from pycocotools.coco import COCO

    data = read_json(path, what="annotation file", hashed=True)  # the manifest hashes it: one read
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a COCO instances object with images, annotations and categories")
    for key in ("images", "annotations", "categories"):
        if key not in data:
            raise UserError(f"{path}: missing '{key}' (a COCO instances file has images, annotations and categories)")
        if not isinstance(data[key], list) or not set(map(type, data[key])) <= {dict}:
            raise UserError(f"{path}: '{key}' must be a list of objects")
    for key, fields in (
        ("images", ("id", "file_name")),
        ("categories", ("id", "name")),
        ("annotations", ("image_id", "category_id")),
    ):
        if not all(map(operator.ge, map(dict.keys, data[key]), itertools.repeat(frozenset(fields)))):
            for index, entry in enumerate(data[key]):
                for field in fields:
                    if field not in entry:
                        raise UserError(f"{path}: {key}[{index}] has no '{field}'")
    if not _plain_boxes(data["annotations"]):  # find the first bad box, to name it
        for index, annotation in enumerate(data["annotations"]):
            bbox = annotation.get("bbox")
            if not (isinstance(bbox, list) and len(bbox) == 4 and all(isinstance(v, (int, float)) for v in bbox)):
                raise UserError(
                    f"{path}: annotation {index} (id {annotation.get('id')}): bbox must be [x, y, width, height]"
                )
            if bbox[2] <= 0 or bbox[3] <= 0:
                raise UserError(
                    f"{path}: annotation {index} (id {annotation.get('id')}): box with zero or negative size {bbox}"
                )
    coco = COCO()
    coco.dataset = data
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress lines
        try:
            coco.createIndex()
        except KeyError as err:
            raise UserError(f"{path}: malformed COCO record (missing key {err})") from None
    names = {cat_id: cat["name"] for cat_id, cat in coco.cats.items()}
    images = []
    no_annotations: list[dict[str, Any]] = []
    for image_id, info in coco.imgs.items():
        boxes: dict[str, list[list[float]]] = {}
        for annotation in coco.imgToAnns.get(image_id, no_annotations):
            category = annotation["category_id"]
            if category not in names:
                raise UserError(f"{path}: annotation id {annotation.get('id')}: unknown category_id {category}")
            name = names[category]
            if name in boxes:
                boxes[name].append(annotation["bbox"])
            else:
                boxes[name] = [annotation["bbox"]]
        images.append(ImageRecord(image_id, info["file_name"], info.get("width", 0), info.get("height", 0), boxes))
    return images, [cat["name"] for cat in data["categories"]]


def _plain_boxes(annotations: list[dict[str, Any]]) -> bool:
    """Every annotation has a ``bbox`` of four numbers with a positive width and height (checked a column at a
    time: this is most of the validation of a COCO-size file)."""
    boxes = [annotation.get("bbox") for annotation in annotations]
    if not boxes:
        return True
    if set(map(type, boxes)) != {list} or set(map(len, boxes)) != {4}:
        return False
    if not set(map(type, itertools.chain.from_iterable(boxes))) <= {int, float, bool}:
        return False
    return min(map(operator.itemgetter(2), boxes)) > 0 and min(map(operator.itemgetter(3), boxes)) > 0


def union_area(boxes: list[list[float]]) -> float:
    """Exact area of the union of ``[x, y, w, h]`` boxes (overlaps counted once), by a sweep over x.

    >>> union_area([[0, 0, 2, 2], [1, 1, 2, 2]])
    7.0
    """
    if len(boxes) == 1:  # most classes of an image have one box: the sweep's one strip, same arithmetic
        x, y, width, height = boxes[0]
        right, top = x + width, y + height
        if right > x and top > y:
            return float(top - y) * (right - x)
    # (low, high) of each box in the order the sweep visits them; a strip keeps the boxes spanning it, in order
    spans = sorted((b[1], b[1] + b[3], b[0], b[0] + b[2]) for b in boxes)
    xs = sorted({b[0] for b in boxes} | {b[0] + b[2] for b in boxes})
    area = 0.0
    for left, right in zip(xs, xs[1:]):
        covered, end = 0.0, float("-inf")
        for low, high, start, stop in spans:
            if high <= end or not (start <= left and stop >= right):
                continue
            covered += high - max(low, end)
            end = high
        area += covered * (right - left)
    return area


def roi_split(areas: dict[str, float]) -> tuple[list[str], list[str]]:
    """Split classes by union area (ORIC Alg. 1): classes strictly below the median area are the ROI,
    classes at or above it are non-ROI (the seed's note: objects exactly at the 50% boundary are non-ROI).

    Returns ``(roi, non_roi)``, each sorted by area descending.

    >>> roi_split({"person": 900.0, "cup": 10.0, "car": 400.0})
    (['cup'], ['person', 'car'])
    """
    ordered = sorted(areas, key=lambda name: (-areas[name], name))
    values = sorted(areas.values())
    middle = len(values) // 2
    median = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
    roi = [name for name in ordered if areas[name] < median]
    non_roi = [name for name in ordered if areas[name] >= median]
    return roi, non_roi


def size_tier(area: float) -> str:
    """small, medium or large, by the tiers of ORIC's object-size analysis."""
    if area < SMALL_MAX_AREA:
        return "small"
    return "medium" if area < LARGE_MIN_AREA else "large"


def describe(record: ImageRecord) -> dict[str, Any]:
    """Union area per class of one image."""
    return {name: union_area(boxes) for name, boxes in record.boxes.items()}

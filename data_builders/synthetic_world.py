"""A synthetic COCO-format image world for the demo, the tests and the benchmarks.

Images are small JPEGs with simple drawn objects (one shape and colour per category), grouped into
scene contexts (kitchen, street, park, office) so that classes co-occur as they do in COCO: a kitchen
holds cups and bowls, a street cars and traffic lights, with a few objects out of context. Annotations
are a valid COCO ``instances`` file (``images``, ``annotations`` with ``bbox``/``area``/``iscrowd``,
``categories``) that pycocotools loads. Everything is deterministic given the seed.

    veritune build synthetic-world --out outputs/demo/world
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw
from tqdm import tqdm

from veritune.io import atomic_write_json

# (name, shape, colour): names follow COCO's, a few starting with a vowel so articles are exercised.
CATEGORIES: list[tuple[str, str, tuple[int, int, int]]] = [
    ("cup", "rectangle", (200, 40, 40)),
    ("bowl", "ellipse", (240, 200, 60)),
    ("apple", "ellipse", (220, 20, 60)),
    ("oven", "rectangle", (90, 90, 90)),
    ("car", "rectangle", (30, 90, 220)),
    ("traffic light", "rectangle", (20, 160, 60)),
    ("umbrella", "triangle", (150, 40, 180)),
    ("dog", "ellipse", (140, 90, 40)),
    ("bench", "rectangle", (120, 70, 20)),
    ("kite", "triangle", (255, 140, 0)),
    ("laptop", "rectangle", (60, 60, 70)),
    ("elephant", "ellipse", (150, 150, 160)),
]
SCENES: dict[str, tuple[tuple[int, int, int], list[str]]] = {
    "kitchen": ((235, 225, 205), ["cup", "bowl", "apple", "oven", "laptop"]),
    "street": ((170, 170, 175), ["car", "traffic light", "umbrella", "dog", "bench"]),
    "park": ((120, 190, 110), ["dog", "bench", "kite", "umbrella", "elephant"]),
    "office": ((210, 215, 230), ["laptop", "cup", "umbrella", "apple", "bench"]),
}
OUT_OF_CONTEXT_RATE = 0.15
MIN_OBJECTS, MAX_OBJECTS = 2, 6  # objects drawn per image
CROWD_RATE = 0.05  # share of boxes marked iscrowd


def _draw(draw: ImageDraw.ImageDraw, shape: str, box: tuple[float, float, float, float], colour: tuple[int, int, int]) -> None:
    x, y, w, h = box
    if shape == "rectangle":
        draw.rectangle([x, y, x + w, y + h], fill=colour, outline=(0, 0, 0))
    elif shape == "ellipse":
        draw.ellipse([x, y, x + w, y + h], fill=colour, outline=(0, 0, 0))
    else:
        draw.polygon([(x + w / 2, y), (x, y + h), (x + w, y + h)], fill=colour, outline=(0, 0, 0))


def _split(out_dir: Path, split: str, num_images: int, rng: random.Random, image_size: int) -> dict[str, Path]:
    category_ids = {name: index + 1 for index, (name, _, _) in enumerate(CATEGORIES)}
    styles = {name: (shape, colour) for name, shape, colour in CATEGORIES}
    image_dir = out_dir / split / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    scene_names = sorted(SCENES)
    for image_id in tqdm(range(1, num_images + 1), desc=f"drawing {split} images", unit="img", disable=num_images < 200):
        scene = scene_names[(image_id - 1) % len(scene_names)]
        background, typical = SCENES[scene]
        width, height = image_size, int(image_size * rng.uniform(0.7, 1.0))
        image = Image.new("RGB", (width, height), background)
        draw = ImageDraw.Draw(image)
        names = []
        for _ in range(rng.randint(MIN_OBJECTS, MAX_OBJECTS)):
            pool = [c[0] for c in CATEGORIES] if rng.random() < OUT_OF_CONTEXT_RATE else typical
            names.append(rng.choice(pool))
        if len(set(names)) < 2:  # every image holds at least two classes, as most COCO images do
            names[-1] = rng.choice([n for n in typical if n != names[0]])
        for name in names:
            # Sizes span COCO's small/medium/large tiers relative to a 640-pixel image.
            w = round(rng.uniform(0.08, 0.55) * width, 2)
            h = round(rng.uniform(0.08, 0.55) * height, 2)
            x, y = round(rng.uniform(0, width - w), 2), round(rng.uniform(0, height - h), 2)
            shape, colour = styles[name]
            _draw(draw, shape, (x, y, w, h), colour)
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": category_ids[name],
                    "bbox": [x, y, w, h],
                    "area": round(w * h, 2),
                    "iscrowd": 1 if rng.random() < CROWD_RATE else 0,
                    "segmentation": [[x, y, round(x + w, 2), y, round(x + w, 2), round(y + h, 2), x, round(y + h, 2)]],
                }
            )
        file_name = f"SYN_{split}2014_{image_id:012d}.jpg"
        image.save(image_dir / file_name, quality=90)
        images.append({"id": image_id, "file_name": file_name, "width": width, "height": height, "scene": scene})
    categories = [{"id": category_ids[name], "name": name, "supercategory": "object"} for name, _, _ in CATEGORIES]
    annotation_file = out_dir / split / "instances.json"
    atomic_write_json(annotation_file, {"images": images, "annotations": annotations, "categories": categories}, indent=None)
    return {f"{split}_annotations": annotation_file, f"{split}_images": image_dir}


def build_synthetic_world(
    out_dir: str | Path,
    *,
    num_train_images: int = 120,
    num_val_images: int = 60,
    seed: int = 0,
    image_size: int = 224,
) -> dict[str, Path]:
    """Draw a train and a val split with COCO-format annotations under ``out_dir``.

    Each image holds 2-6 objects of at least two classes, mostly from its scene's classes; boxes overlap
    freely and about 5% are ``iscrowd``. The default sizes (120 / 60 images) leave the demo enough image
    pairs for its 32 + 32 training and 24 + 24 benchmark questions at one question per image.

    Returns the paths ``train_annotations``, ``train_images``, ``val_annotations``, ``val_images``.
    """
    out_dir = Path(out_dir)
    rng = random.Random(seed)
    paths = _split(out_dir, "train", num_train_images, rng, image_size)
    paths.update(_split(out_dir, "val", num_val_images, rng, image_size))
    return paths


def generate_coco_scale_annotations(
    path: str | Path,
    *,
    num_images: int = 82783,
    boxes_per_image_mean: float = 7.3,
    num_classes: int = 80,
    seed: int = 0,
) -> Path:
    """Write a COCO-2014-train-sized annotation file (no images) for the builder benchmarks.

    About ``num_images × boxes_per_image_mean`` boxes (600,000 by default) over ``num_classes`` classes,
    with scene-like co-occurrence: each image draws most of its boxes from one of 12 class groups.
    """
    rng = random.Random(seed)
    classes = [f"class {index:02d}" for index in range(num_classes)]
    groups = [list(range(g, num_classes, 12)) for g in range(12)]
    images, annotations = [], []
    for image_id in range(1, num_images + 1):
        width, height = 640, rng.choice((427, 480, 512))
        images.append({"id": image_id, "file_name": f"COCO_train2014_{image_id:012d}.jpg", "width": width, "height": height})
        group = groups[image_id % 12]
        for _ in range(max(1, round(rng.expovariate(1 / boxes_per_image_mean)))):  # mean ~ boxes_per_image_mean
            category = rng.choice(group) if rng.random() > OUT_OF_CONTEXT_RATE else rng.randrange(num_classes)
            w, h = rng.uniform(8, 320), rng.uniform(8, 240)
            x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
            annotations.append(
                {"id": len(annotations) + 1, "image_id": image_id, "category_id": category + 1,
                 "bbox": [round(x, 1), round(y, 1), round(w, 1), round(h, 1)], "area": round(w * h, 1),
                 "iscrowd": 0}  # fmt: skip
            )
    categories = [{"id": index + 1, "name": name, "supercategory": "object"} for index, name in enumerate(classes)]
    return atomic_write_json(path, {"images": images, "annotations": annotations, "categories": categories}, indent=None)

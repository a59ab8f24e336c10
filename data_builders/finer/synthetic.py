"""Scene graphs for the synthetic image world, so the FINER path runs offline in the demo and tests.

Objects get their category as name and other categories as negatives; attributes are the drawn colour
and a size word (with other colours and sizes as negatives); relations are the spatial relation of two
boxes (left of, right of, above, below) with the other relations as negatives.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from data_builders.synthetic_world import CATEGORIES
from veritune.io import atomic_write_json, read_json

COLOURS = {"rectangle": "boxy", "ellipse": "round", "triangle": "pointed"}
SIZES = ("small", "medium-sized", "large")
RELATIONS = ("is to the left of", "is to the right of", "is above", "is below")


def _colour_word(rgb: tuple[int, int, int]) -> str:
    names = {"red": (220, 40, 40), "yellow": (240, 200, 60), "grey": (120, 120, 120), "blue": (30, 90, 220),
             "green": (20, 160, 60), "purple": (150, 40, 180), "brown": (140, 90, 40), "orange": (255, 140, 0)}  # fmt: skip
    return min(names, key=lambda n: sum((a - b) ** 2 for a, b in zip(names[n], rgb)))


def scene_graphs_from_coco(annotations: Path, out: Path) -> Path:
    """Write one scene graph per image of a synthetic-world annotation file."""
    data = read_json(annotations, what="annotation file")
    names = {c["id"]: c["name"] for c in data["categories"]}
    style = {name: (shape, colour) for name, shape, colour in CATEGORIES}
    by_image: dict[int, list[dict[str, Any]]] = {}
    for ann in data["annotations"]:
        by_image.setdefault(ann["image_id"], []).append(ann)
    graphs = []
    all_names = sorted(names.values())
    for image in data["images"]:
        objects, relations, seen = [], [], set()
        for ann in by_image.get(image["id"], []):
            name = names[ann["category_id"]]
            if name in seen:
                continue
            seen.add(name)
            shape, rgb = style.get(name, ("rectangle", (128, 128, 128)))
            colour = _colour_word(rgb)
            size = SIZES[min(2, int(ann["area"] / (image["width"] * image["height"]) * 8))]
            objects.append({
                "id": f"o{len(objects) + 1}", "name": name, "bbox": ann["bbox"],
                "negatives": [n for n in all_names if n not in seen and n != name][:4],
                "attributes": [
                    {"value": colour, "negatives": [c for c in ("red", "blue", "green", "yellow", "purple") if c != colour][:4]},
                    {"value": size, "negatives": [s for s in SIZES if s != size] + ["tiny"]},
                ],
            })  # fmt: skip
        for first, second in zip(objects, objects[1:]):
            (x1, y1, w1, h1), (x2, y2, w2, h2) = first["bbox"], second["bbox"]
            dx, dy = (x2 + w2 / 2) - (x1 + w1 / 2), (y2 + h2 / 2) - (y1 + h1 / 2)
            rel = (RELATIONS[0] if dx > 0 else RELATIONS[1]) if abs(dx) >= abs(dy) else (RELATIONS[2] if dy > 0 else RELATIONS[3])
            relations.append({"object_a": first["id"], "rel": rel, "object_b": second["id"], "negatives": [r for r in RELATIONS if r != rel]})
        for obj in objects:
            obj.pop("bbox")
        graphs.append({"image": image["file_name"], "objects": objects, "relations": relations})
    return atomic_write_json(out, graphs)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``veritune build scene-graphs``."""
    parser = subparsers.add_parser("scene-graphs", help="scene graphs of a synthetic world (input of `build finer`)")
    parser.add_argument("--annotations", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.set_defaults(handler=lambda args: print(f"wrote {scene_graphs_from_coco(args.annotations, args.out)}") or 0)

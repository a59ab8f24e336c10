"""Scene graphs of the synthetic image world in the FINER layout, so that the FINER builders run offline.

    veritune build scene-graphs --annotations outputs/demo/world/train/annotations.json \
        --out outputs/demo/finer_graphs.json

Per image, each category appears once (the first box). Objects get four other categories that are absent
from the image as negatives; attributes are the drawn colour and shape (``with a red color``, ``with a round
shape``) with four other colours or shapes as negatives; relations link consecutive objects by the
positions of their box centres (``is to the left of the``, ...) with the other directions and ``is inside
the`` as negatives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.errors import UserError
from core.io import atomic_write_json, read_json
from miniature.world import CATEGORIES, RELATIONS, spatial_relation

COLOURS = {
    "red": (220, 40, 40),
    "yellow": (240, 200, 60),
    "grey": (120, 120, 120),
    "blue": (30, 90, 220),
    "green": (20, 160, 60),
    "purple": (150, 40, 180),
    "brown": (140, 90, 40),
    "orange": (255, 140, 0),
}
SHAPES = {"rectangle": "boxy", "ellipse": "round", "triangle": "pointed"}
OTHER_SHAPES = ("star", "heart")
EXTRA_RELATION = "is inside the"


def colour_word(rgb: tuple[int, int, int]) -> str:
    """The nearest named colour."""
    return min(COLOURS, key=lambda name: sum((a - b) ** 2 for a, b in zip(COLOURS[name], rgb)))


def scene_graphs_from_coco(annotations: Path, out: Path) -> Path:
    """Write one FINER-layout scene graph per image of a synthetic-world annotation file."""
    data = read_json(annotations, what="annotation file")
    try:
        names = {c["id"]: c["name"] for c in data["categories"]}
        images, anns = data["images"], data["annotations"]
    except (KeyError, TypeError):
        raise UserError(f"{annotations}: expected a COCO instances file (images, annotations, categories)") from None
    style = {name: (shape, rgb) for name, shape, rgb in CATEGORIES}
    by_image: dict[int, list[dict[str, Any]]] = {}
    for ann in anns:
        by_image.setdefault(ann["image_id"], []).append(ann)
    all_names = sorted(names.values())
    graphs = []
    for image in images:
        objects: list[dict[str, Any]] = []
        boxes: list[list[float]] = []
        present = {names[a["category_id"]] for a in by_image.get(image["id"], [])}
        for ann in by_image.get(image["id"], []):
            name = names[ann["category_id"]]
            if any(o["object"] == name for o in objects):
                continue
            shape, rgb = style.get(name, ("rectangle", (128, 128, 128)))
            colour, form = colour_word(rgb), SHAPES[shape]
            objects.append(
                {
                    "object": name,
                    "object_index": len(objects),
                    "neg_object": [n for n in all_names if n not in present][:4],
                    "attribute": [f"with a {colour} color", f"with a {form} shape"],
                    "neg_attribute": [
                        [f"with a {c} color" for c in COLOURS if c != colour][:4],
                        [f"with a {s} shape" for s in (*SHAPES.values(), *OTHER_SHAPES) if s != form][:4],
                    ],
                    "parsed_relation": [],
                    "neg_relation": [],
                }
            )
            boxes.append(ann["bbox"])
        for index in range(len(objects) - 1):
            rel = spatial_relation(boxes[index], boxes[index + 1])
            objects[index]["parsed_relation"].append({"object_a": index, "rel": rel, "object_b": index + 1})
            objects[index]["neg_relation"].append([r for r in (*RELATIONS, EXTRA_RELATION) if r != rel])
        graphs.append({"example_id": f"synthetic_{image['id']:06d}", "image": image["file_name"], "objects": objects})
    return atomic_write_json(out, graphs)

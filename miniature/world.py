"""A synthetic COCO-format image world for the demo, the tests and the benchmarks.

Images are small JPEGs with simple drawn objects (one shape and colour per category), grouped into
scene contexts (kitchen, street, park, office) so that classes co-occur as they do in COCO: a kitchen
holds cups and bowls, a street cars and traffic lights, with a few objects out of context. Annotations
are a valid COCO ``instances`` file (``images``, ``annotations`` with ``bbox``/``area``/``iscrowd``,
``categories``) that pycocotools loads. Everything is deterministic given the seed.

    veritune build synthetic-world --out outputs/demo/world

Every instance has a shade (light or dark). ``instance_attributes="drawn"``
(``--instance-attributes drawn``) also gives each instance, independently at random, a border (black or white,
2 px, the shape's outline) and a pattern (striped: horizontal 2-px stripes every 6 px inside the shape, white
on a dark shade and black on a light one; or plain): attributes that only the pixels show, for FINER's yes/no
probe (``veritune build finer-bench --protocol yn``). They come from a generator of their own, so the layout
(classes, boxes, shades, ``instances.json``, the POPE file) is the default world's for the same seed; the
default (``"none"``) world is the one drawn before the option existed, byte for byte.

The scene graphs differ by mode. By default an object's attributes are its shade and shape, with other hues
and other shapes among their negatives, and a relation's negatives are the other directions: guessable from
the class and from language, the graphs that FINER-Bench's letter protocol (``--protocol mcq``, four
negatives per entity) and ``veritune build finer`` are built on. In ``"drawn"`` mode the attributes are the
shade, the border and the pattern, each with the other value as its one negative (the hue is the class's),
and a relation's one negative is the opposite direction; a negative that another instance of the class (or
pair of classes) in the image has is left out, so no negative is true of the image.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from PIL import Image, ImageChops, ImageDraw
from tqdm import tqdm

from core.errors import UserError
from core.io import atomic_write_json, atomic_write_text

# (name, shape, colour): one distinct shape + colour per class, so that a class is recognisable from its
# pixels alone even at the tiny model's 64-pixel input. Names follow COCO's, a few starting with a vowel.
CATEGORIES: list[tuple[str, str, tuple[int, int, int]]] = [
    ("cup", "rectangle", (220, 30, 30)),
    ("bowl", "ellipse", (245, 205, 30)),
    ("oven", "rectangle", (25, 25, 25)),
    ("car", "rectangle", (30, 70, 230)),
    ("traffic light", "rectangle", (20, 170, 50)),
    ("bench", "rectangle", (130, 75, 20)),
    ("kite", "triangle", (255, 130, 0)),
    ("dog", "ellipse", (255, 150, 200)),
    ("elephant", "ellipse", (0, 190, 200)),
    ("laptop", "rectangle", (250, 250, 250)),
    ("umbrella", "triangle", (140, 30, 190)),
    ("apple", "ellipse", (200, 230, 0)),
]
COLOUR_NAMES = {
    "cup": "red",
    "bowl": "yellow",
    "oven": "black",
    "car": "blue",
    "traffic light": "green",
    "bench": "brown",
    "kite": "orange",
    "dog": "pink",
    "elephant": "cyan",
    "laptop": "white",
    "umbrella": "purple",
    "apple": "lime",
}
SHADES = ("light", "dark")  # the colour variants of every class (an attribute in the scene graphs)
INSTANCE_ATTRIBUTES = ("none", "drawn")  # what else an instance shows: nothing, or a drawn border and pattern
BORDERS: dict[str, tuple[int, int, int]] = {"black": (0, 0, 0), "white": (255, 255, 255)}
PATTERNS = ("striped", "plain")
BORDER_WIDTH = 2  # px, drawn inside the shape's outline
STRIPE_WIDTH, STRIPE_PERIOD, STRIPE_OFFSET = 2, 6, 3  # rows of a stripe, rows from one to the next, first row
SHAPE_WORDS = {"rectangle": "boxy", "ellipse": "round", "triangle": "pointed"}
# Each scene: a background colour and its three typical classes (the strong prior). The demo's world draws
# every scene on one grey instead (``backgrounds="shared"``): the scene can then only be told from its objects,
# so the prior rests on object co-occurrence, as in COCO, and not on a cheap global colour cue.
SCENES: dict[str, tuple[tuple[int, int, int], list[str]]] = {
    "kitchen": ((236, 222, 196), ["cup", "bowl", "oven"]),
    "street": ((150, 150, 156), ["car", "traffic light", "bench"]),
    "park": ((168, 214, 150), ["kite", "dog", "elephant"]),
    "office": ((196, 206, 236), ["laptop", "umbrella", "apple"]),
}
SHARED_BACKGROUND = (200, 200, 200)
BACKGROUNDS = ("shared", "scene")
IN_CONTEXT_RATE = 0.6  # each of the scene's classes is present with this probability (default) ...
OUT_OF_CONTEXT_RATE = 0.7  # ... and one class of another scene (drawn smaller) with this one (default),
SECOND_OUT_OF_CONTEXT_RATE = 0.3  # ... and then a second one with this one
SECOND_INSTANCE_RATE = 0.15  # a present in-context class gets a second box
CROWD_RATE = 0.05  # share of boxes marked iscrowd
RELATIONS = ("is to the left of the", "is to the right of the", "is above the", "is below the")
EXTRA_RELATION = "is inside the"
OPPOSITE_RELATIONS = dict(zip(RELATIONS, (RELATIONS[1], RELATIONS[0], RELATIONS[3], RELATIONS[2])))
POPE_TEMPLATE = "Is there {object} in the image?"  # POPE's question (official coco_pope_*.json files)


def shade_colour(colour: tuple[int, int, int], shade: str) -> tuple[int, int, int]:
    """The drawn colour of a shade variant: ``light`` mixes 35% white in, ``dark`` keeps 65% of each channel."""
    if shade == "light":
        return tuple(round(c + 0.35 * (255 - c)) for c in colour)  # type: ignore[return-value]
    return tuple(round(0.65 * c) for c in colour)  # type: ignore[return-value]


def spatial_relation(box_a: list[float], box_b: list[float]) -> str:
    """Where box a's centre lies relative to box b's, along the axis of the larger offset (image y grows down)."""
    (xa, ya, wa, ha), (xb, yb, wb, hb) = box_a, box_b
    dx, dy = (xa + wa / 2) - (xb + wb / 2), (ya + ha / 2) - (yb + hb / 2)
    if abs(dx) >= abs(dy):
        return RELATIONS[0] if dx < 0 else RELATIONS[1]
    return RELATIONS[2] if dy < 0 else RELATIONS[3]


def _draw(
    draw: ImageDraw.ImageDraw, shape: str, box: tuple[float, float, float, float], colour: tuple[int, int, int]
) -> None:
    x, y, w, h = box
    if shape == "rectangle":
        draw.rectangle([x, y, x + w, y + h], fill=colour, outline=(0, 0, 0))
    elif shape == "ellipse":
        draw.ellipse([x, y, x + w, y + h], fill=colour, outline=(0, 0, 0))
    else:
        draw.polygon([(x + w / 2, y), (x, y + h), (x + w, y + h)], fill=colour, outline=(0, 0, 0))


def draw_attributed_shape(
    image: Image.Image,
    shape: str,
    box: tuple[float, float, float, float],
    colour: tuple[int, int, int],
    *,
    shade: str,
    border: str,
    pattern: str,
) -> None:
    """Draw one instance of a ``"drawn"`` world: the shape filled with ``colour``, stripes clipped to it when
    ``pattern`` is ``"striped"`` (rows ``STRIPE_OFFSET``, ``STRIPE_OFFSET + 1``, ... every ``STRIPE_PERIOD``
    rows from the box's top row; white on a dark shade, black on a light one) and a ``BORDER_WIDTH``-px outline
    in the ``border`` colour on top.

    >>> image = Image.new("RGB", (32, 32), (200, 200, 200))
    >>> draw_attributed_shape(image, "rectangle", (4, 4, 20, 20), (143, 20, 20), shade="dark", border="black",
    ...                       pattern="striped")
    >>> image.getpixel((4, 10)), image.getpixel((12, 7)), image.getpixel((12, 9))
    ((0, 0, 0), (255, 255, 255), (143, 20, 20))
    """
    mask = Image.new("L", image.size, 0)  # the shape's pixels, rasterised as its fill
    for target, fill in ((ImageDraw.Draw(image), colour), (ImageDraw.Draw(mask), 255)):
        _draw_shape(target, shape, box, fill=fill)
    if pattern == "striped":
        rows = Image.new("L", image.size, 0)
        rows_draw = ImageDraw.Draw(rows)
        for top in range(int(box[1]) + STRIPE_OFFSET, image.size[1], STRIPE_PERIOD):
            rows_draw.rectangle([0, top, image.size[0], top + STRIPE_WIDTH - 1], fill=255)
        stripes = ImageChops.multiply(mask, rows)  # the stripe rows, clipped to the shape
        image.paste(BORDERS["white" if shade == "dark" else "black"], (0, 0, *image.size), stripes)
    _draw_shape(ImageDraw.Draw(image), shape, box, outline=BORDERS[border])


def _draw_shape(
    draw: ImageDraw.ImageDraw,
    shape: str,
    box: tuple[float, float, float, float],
    *,
    fill: tuple[int, int, int] | int | None = None,
    outline: tuple[int, int, int] | None = None,
) -> None:
    """The shape's fill, or its ``BORDER_WIDTH``-px outline (Pillow draws it inside the shape)."""
    x, y, w, h = box
    width = BORDER_WIDTH if outline is not None else 0
    if shape == "rectangle":
        draw.rectangle([x, y, x + w, y + h], fill=fill, outline=outline, width=width)
    elif shape == "ellipse":
        draw.ellipse([x, y, x + w, y + h], fill=fill, outline=outline, width=width)
    else:
        draw.polygon([(x + w / 2, y), (x, y + h), (x + w, y + h)], fill=fill, outline=outline, width=width)


def _overlap(a: list[float], b: list[float]) -> float:
    dx = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
    dy = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
    return max(dx, 0.0) * max(dy, 0.0)


def _place(
    w: float, h: float, width: int, height: int, placed: list[list[float]], rng: random.Random
) -> tuple[float, float]:
    """A position for a w × h box: the least-overlapping of 12 random candidates, so that objects stay
    visible (boxes may still overlap a little, as in COCO)."""
    candidates = [(round(rng.uniform(0, width - w), 2), round(rng.uniform(0, height - h), 2)) for _ in range(12)]
    return min(candidates, key=lambda xy: sum(_overlap([xy[0], xy[1], w, h], box) for box in placed))


def _scene_objects(scene: str, rng: random.Random, rates: tuple[float, float]) -> list[tuple[str, bool]]:
    """The classes drawn in one image of ``scene``, each with whether it is in context; ``rates`` are the
    in-context and out-of-context rates."""
    _, typical = SCENES[scene]
    in_context_rate, out_of_context_rate = rates
    names = [(name, True) for name in typical if rng.random() < in_context_rate]
    while len(names) < 2:  # at least two in-context classes: the scene stays recognisable
        names.append((rng.choice([n for n in typical if (n, True) not in names]), True))
    names += [(name, True) for name, _ in list(names) if rng.random() < SECOND_INSTANCE_RATE]
    if rng.random() < out_of_context_rate:
        others = [c[0] for c in CATEGORIES if c[0] not in typical]
        # Usually one incongruous object, sometimes two (ORIC asks up to two per query image).
        for name in rng.sample(others, 2 if rng.random() < SECOND_OUT_OF_CONTEXT_RATE else 1):
            names.append((name, False))
    rng.shuffle(names)
    return names


def _scene_graph(
    image: dict[str, Any], drawn: list[dict[str, Any]], rng: random.Random, *, drawn_attributes: bool = False
) -> dict[str, Any]:
    """One FINER-layout scene graph (see ``data_builders/finer/scene_graph.py``) of the drawn objects: each
    class once (its largest box), attributes = its drawn shade and shape, relations between consecutive
    objects from their box centres; negatives are absent classes (in-scene ones first), other colours, other
    directions. ``drawn_attributes``: the attributes and relation negatives of a ``"drawn"`` world instead
    (:func:`use_drawn_attributes`); ``rng`` draws the same either way, so the rest of the world does not
    change."""
    typical = SCENES[image["scene"]][1]
    firsts: dict[str, dict[str, Any]] = {}
    for obj in drawn:
        if obj["name"] not in firsts or obj["area"] > firsts[obj["name"]]["area"]:
            firsts[obj["name"]] = obj
    ordered = sorted(firsts.values(), key=lambda o: (o["bbox"][0], o["bbox"][1]))
    absent = [c[0] for c in CATEGORIES if c[0] not in firsts]
    colours = sorted(set(COLOUR_NAMES.values()))
    objects: list[dict[str, Any]] = []
    for index, obj in enumerate(ordered):
        name, shade = obj["name"], obj["shade"]
        hue = COLOUR_NAMES[name]
        neg_objects = [n for n in absent if n in typical] + rng.sample(
            [n for n in absent if n not in typical], len([n for n in absent if n not in typical])
        )
        other_hues = rng.sample([c for c in colours if c != hue], 3)
        other_shade = SHADES[1 - SHADES.index(shade)]
        form = SHAPE_WORDS[obj["shape"]]
        objects.append(
            {
                "object": name,
                "object_index": index,
                "neg_object": neg_objects[:4],
                "attribute": [f"with a {shade} {hue} color", f"with a {form} shape"],
                "neg_attribute": [
                    [f"with a {other_shade} {hue} color", *(f"with a {shade} {c} color" for c in other_hues)],
                    [f"with a {w} shape" for w in ("boxy", "round", "pointed", "star", "heart") if w != form][:4],
                ],
                "parsed_relation": [],
                "neg_relation": [],
            }
        )
    for index in range(len(ordered) - 1):
        rel = spatial_relation(ordered[index]["bbox"], ordered[index + 1]["bbox"])
        objects[index]["parsed_relation"].append({"object_a": index, "rel": rel, "object_b": index + 1})
        objects[index]["neg_relation"].append([r for r in (*RELATIONS, EXTRA_RELATION) if r != rel])
    if drawn_attributes:
        use_drawn_attributes(objects, ordered, drawn)
    return {
        "example_id": f"synthetic_{image['file_name'].rsplit('.', 1)[0]}",
        "image": image["file_name"],
        "objects": objects,
    }


def use_drawn_attributes(
    objects: list[dict[str, Any]], ordered: list[dict[str, Any]], drawn: list[dict[str, Any]]
) -> None:
    """Give the graph's ``objects`` (the drawn ``ordered`` ones) the attributes only the pixels show.

    Attributes: the shade, the border and the pattern of the class's largest box, each with the other value as
    its one negative (``with a dark red color``, never another hue: the class fixes the hue). A relation's one
    negative is the opposite direction (left/right, above/below). A negative is left out when another instance
    of the class shows it (a second cup with the other border), or, for a relation, when some pair of the two
    classes' instances lies that way: no negative is true of the image.
    """
    instances: dict[str, list[dict[str, Any]]] = {}
    for obj in drawn:
        instances.setdefault(obj["name"], []).append(obj)
    for entry, obj in zip(objects, ordered):
        name, hue = obj["name"], COLOUR_NAMES[obj["name"]]
        phrases = {  # attribute -> its two values and its phrase
            "shade": (SHADES, f"with a {{}} {hue} color"),
            "border": (tuple(BORDERS), "with a {} border"),
            "pattern": (PATTERNS, "with a {} pattern"),
        }
        entry["attribute"], entry["neg_attribute"] = [], []
        for key, (values, phrase) in phrases.items():
            other = values[1 - values.index(obj[key])]
            entry["attribute"].append(phrase.format(obj[key]))
            shown = {instance[key] for instance in instances[name]}
            entry["neg_attribute"].append([] if other in shown else [phrase.format(other)])
        entry["neg_relation"] = []
        for relation in entry["parsed_relation"]:
            opposite = OPPOSITE_RELATIONS[relation["rel"]]
            pairs = [
                (a["bbox"], b["bbox"])
                for a in instances[name]
                for b in instances[ordered[relation["object_b"]]["name"]]
            ]
            entry["neg_relation"].append([] if any(_lies(a, b, opposite) for a, b in pairs) else [opposite])


def _lies(box_a: list[float], box_b: list[float], relation: str) -> bool:
    """Does box a's centre lie on the ``relation`` side of box b's at all (not only along the larger offset)?"""
    (xa, ya, wa, ha), (xb, yb, wb, hb) = box_a, box_b
    dx, dy = (xa + wa / 2) - (xb + wb / 2), (ya + ha / 2) - (yb + hb / 2)
    return {RELATIONS[0]: dx < 0, RELATIONS[1]: dx > 0, RELATIONS[2]: dy < 0, RELATIONS[3]: dy > 0}[relation]


def _split(
    out_dir: Path,
    split: str,
    num_images: int,
    rng: random.Random,
    image_size: int,
    look: dict[str, Any],
    attribute_rng: random.Random | None = None,
) -> dict[str, Path]:
    """Draw one split; ``attribute_rng`` (a ``"drawn"`` world) draws each instance's border and pattern, after
    ``rng`` has drawn the layout, so that ``rng``'s sequence is the default world's."""
    category_ids = {name: index + 1 for index, (name, _, _) in enumerate(CATEGORIES)}
    styles = {name: (shape, colour) for name, shape, colour in CATEGORIES}
    image_dir = out_dir / split / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    graphs: list[dict[str, Any]] = []
    scene_names = sorted(SCENES)
    for image_id in tqdm(
        range(1, num_images + 1), desc=f"drawing {split} images", unit="img", disable=num_images < 200
    ):
        scene = scene_names[(image_id - 1) % len(scene_names)]
        background = SHARED_BACKGROUND if look["backgrounds"] == "shared" else SCENES[scene][0]
        width = height = image_size
        image = Image.new("RGB", (width, height), background)
        draw = ImageDraw.Draw(image)
        drawn: list[dict[str, Any]] = []
        for name, in_context in _scene_objects(scene, rng, look["rates"]):
            # In-context objects are large (the scene's main objects); out-of-context ones medium-sized, so
            # that they fall in ORIC's region of interest (below the image's median class area).
            low, high = (0.28, 0.42) if in_context else (0.2, 0.28)
            w, h = round(rng.uniform(low, high) * width, 2), round(rng.uniform(low, high) * height, 2)
            x, y = _place(w, h, width, height, [o["bbox"] for o in drawn], rng)
            shape, colour = styles[name]
            drawn.append(
                {
                    "name": name,
                    "shape": shape,
                    "shade": rng.choice(SHADES),
                    "bbox": [x, y, w, h],
                    "area": round(w * h, 2),
                }
            )
            if attribute_rng is not None:
                drawn[-1]["border"] = attribute_rng.choice(tuple(BORDERS))
                drawn[-1]["pattern"] = attribute_rng.choice(PATTERNS)
        drawn.sort(key=lambda o: -o["area"])  # larger objects first, so smaller ones are drawn on top and stay visible
        for obj in drawn:
            x, y, w, h = obj["bbox"]
            fill = shade_colour(styles[obj["name"]][1], obj["shade"])
            if attribute_rng is None:
                _draw(draw, obj["shape"], (x, y, w, h), fill)
            else:
                draw_attributed_shape(
                    image,
                    obj["shape"],
                    (x, y, w, h),
                    fill,
                    shade=obj["shade"],
                    border=obj["border"],
                    pattern=obj["pattern"],
                )
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": category_ids[obj["name"]],
                    "bbox": [x, y, w, h],
                    "area": obj["area"],
                    "iscrowd": 1 if rng.random() < CROWD_RATE else 0,
                    "segmentation": [[x, y, round(x + w, 2), y, round(x + w, 2), round(y + h, 2), x, round(y + h, 2)]],
                }
            )
        file_name = f"SYN_{split}2014_{image_id:012d}.jpg"
        image.save(image_dir / file_name, quality=90)
        record = {"id": image_id, "file_name": file_name, "width": width, "height": height, "scene": scene}
        images.append(record)
        graphs.append(_scene_graph(record, drawn, rng, drawn_attributes=attribute_rng is not None))
    categories = [{"id": category_ids[name], "name": name, "supercategory": "object"} for name, _, _ in CATEGORIES]
    annotation_file = out_dir / split / "instances.json"
    atomic_write_json(
        annotation_file, {"images": images, "annotations": annotations, "categories": categories}, indent=None
    )
    graph_file = atomic_write_json(out_dir / split / "scene_graphs.json", graphs, indent=None)
    pope_file = _write_pope_random(out_dir / split / "coco_pope_random.json", images, annotations, rng)
    return {
        f"{split}_annotations": annotation_file,
        f"{split}_images": image_dir,
        f"{split}_scene_graphs": graph_file,
        f"{split}_pope_random": pope_file,
    }


def _write_pope_random(
    path: Path, images: list[dict[str, Any]], annotations: list[dict[str, Any]], rng: random.Random
) -> Path:
    """A POPE-random-style file (official JSON-lines layout): per image, up to three present classes as
    "yes" questions and as many classes drawn uniformly from the absent ones as "no" questions."""
    names = [c[0] for c in CATEGORIES]
    present: dict[int, list[str]] = {}
    for ann in annotations:
        name = names[ann["category_id"] - 1]
        if name not in present.setdefault(ann["image_id"], []):
            present[ann["image_id"]].append(name)
    lines = []
    for image in images:
        here = present.get(image["id"], [])
        yes = rng.sample(here, min(3, len(here)))
        no = rng.sample([n for n in names if n not in here], len(yes))
        for name, label in [*((n, "yes") for n in yes), *((n, "no") for n in no)]:
            question = POPE_TEMPLATE.format(object=("an " if name[0] in "aeiou" else "a ") + name)
            lines.append(
                json.dumps(
                    {"question_id": len(lines) + 1, "image": image["file_name"], "text": question, "label": label}
                )
            )
    return atomic_write_text(path, "\n".join(lines) + "\n")


def check_world_settings(
    *,
    num_train_images: int,
    num_val_images: int,
    num_dev_images: int,
    image_size: int,
    backgrounds: str,
    in_context_rate: float,
    out_of_context_rate: float,
    instance_attributes: str = "none",
) -> None:
    """The world's settings, checked before anything is drawn or written (one line naming the setting)."""
    counts = {"num_train_images": num_train_images, "num_val_images": num_val_images, "num_dev_images": num_dev_images}
    for key, count in counts.items():
        if count < 0:
            raise UserError(f"{key}: expected a count >= 0, got {count}")
    if image_size < 1:
        raise UserError(f"image_size: expected a positive number of pixels, got {image_size}")
    if backgrounds not in BACKGROUNDS:
        raise UserError(f"backgrounds: expected one of {', '.join(BACKGROUNDS)}, got {backgrounds!r}")
    if instance_attributes not in INSTANCE_ATTRIBUTES:
        raise UserError(
            f"instance_attributes: expected one of {', '.join(INSTANCE_ATTRIBUTES)}, got {instance_attributes!r}"
        )
    for key, rate in (("in_context_rate", in_context_rate), ("out_of_context_rate", out_of_context_rate)):
        if not 0.0 <= rate <= 1.0:
            raise UserError(f"{key}: expected a probability in [0, 1], got {rate}")


def build_synthetic_world(
    out_dir: str | Path,
    *,
    num_train_images: int = 400,
    num_val_images: int = 120,
    num_dev_images: int = 0,
    seed: int = 0,
    image_size: int = 64,
    backgrounds: str = "shared",
    in_context_rate: float = IN_CONTEXT_RATE,
    out_of_context_rate: float = OUT_OF_CONTEXT_RATE,
    instance_attributes: str = "none",
) -> dict[str, Path]:
    """Draw a train and a val split with COCO-format annotations, scene graphs and a POPE-random-style file.

    Each image shows one scene: usually its typical classes (each present with probability
    ``in_context_rate``, at least two, some twice), plus, with probability ``out_of_context_rate``, one smaller
    object of another scene (two with probability ``SECOND_OUT_OF_CONTEXT_RATE``). So classes co-occur strongly
    as in COCO, and the incongruous cases ORIC asks about (out-of-context present, in-context absent) exist
    but are the minority. ``backgrounds="shared"`` draws every scene on one grey, so the scene is known only
    from its objects; ``"scene"`` gives each scene its own colour, a global cue a tiny model learns instead
    of the objects, which is why the demo's world and the CLI's default are ``"shared"``
    (docs/LAB_NOTEBOOK_ARCHIVE.md#fourth-pass). About 5% of boxes are ``iscrowd``. Per split: ``instances.json`` (COCO),
    ``scene_graphs.json`` (the FINER layout, read by ``veritune build finer`` / ``finer-bench``),
    ``coco_pope_random.json`` (POPE's layout) and ``images/``.

    ``instance_attributes="drawn"`` also draws a border and a pattern on every instance, from a generator of its
    own seeded by ``seed``, and writes scene graphs of the attributes only the pixels show (module docstring);
    the layout, ``instances.json`` and the POPE file are those of the default ``"none"`` world.

    ``num_dev_images > 0`` adds a third split, ``dev``, drawn after the other two (so train and val do not
    change): images from the same distribution that neither training nor the benchmarks see, on which
    hyperparameters are selected (``veritune demo-select``).

    Returns the paths ``{split}_annotations``, ``{split}_images``, ``{split}_scene_graphs`` and
    ``{split}_pope_random`` for the splits train and val (and dev).
    """
    out_dir = Path(out_dir)
    rng = random.Random(seed)
    check_world_settings(
        num_train_images=num_train_images,
        num_val_images=num_val_images,
        num_dev_images=num_dev_images,
        image_size=image_size,
        backgrounds=backgrounds,
        in_context_rate=in_context_rate,
        out_of_context_rate=out_of_context_rate,
        instance_attributes=instance_attributes,
    )
    look = {"backgrounds": backgrounds, "rates": (in_context_rate, out_of_context_rate)}
    # The border and pattern draws come from a second generator: the layout's sequence stays the default's.
    attribute_rng = random.Random(f"{seed}:instance-attributes") if instance_attributes == "drawn" else None
    paths = _split(out_dir, "train", num_train_images, rng, image_size, look, attribute_rng)
    paths.update(_split(out_dir, "val", num_val_images, rng, image_size, look, attribute_rng))
    if num_dev_images > 0:
        paths.update(_split(out_dir, "dev", num_dev_images, rng, image_size, look, attribute_rng))
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
        images.append(
            {"id": image_id, "file_name": f"COCO_train2014_{image_id:012d}.jpg", "width": width, "height": height}
        )
        group = groups[image_id % 12]
        for _ in range(max(1, round(rng.expovariate(1 / boxes_per_image_mean)))):  # mean ~ boxes_per_image_mean
            category = rng.choice(group) if rng.random() > OUT_OF_CONTEXT_RATE else rng.randrange(num_classes)
            w, h = rng.uniform(8, 320), rng.uniform(8, 240)
            x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": category + 1,
                    "bbox": [round(x, 1), round(y, 1), round(w, 1), round(h, 1)],
                    "area": round(w * h, 1),
                    "iscrowd": 0,
                }
            )
    categories = [{"id": index + 1, "name": name, "supercategory": "object"} for index, name in enumerate(classes)]
    return atomic_write_json(
        path, {"images": images, "annotations": annotations, "categories": categories}, indent=None
    )

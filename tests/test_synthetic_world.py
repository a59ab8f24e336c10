"""The synthetic image world: valid COCO annotations, deterministic, with co-occurrence structure."""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from PIL import Image

from core.errors import UserError
from miniature.world import (
    CATEGORIES,
    COLOUR_NAMES,
    SCENES,
    SHARED_BACKGROUND,
    build_synthetic_world,
    generate_coco_scale_annotations,
    shade_colour,
    spatial_relation,
)
from veritune.cli import main


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_synthetic_world(tmp_path_factory.mktemp("world"), num_train_images=60, num_val_images=6)


def annotations_by_image(path: Path) -> tuple[dict, dict[int, list[dict]]]:
    data = json.loads(path.read_text())
    by_image: dict[int, list[dict]] = defaultdict(list)
    for annotation in data["annotations"]:
        by_image[annotation["image_id"]].append(annotation)
    return data, by_image


def overlaps(a: list[float], b: list[float]) -> bool:
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def test_world_is_valid_coco(world: dict[str, Path]) -> None:
    from pycocotools.coco import COCO

    coco = COCO(str(world["train_annotations"]))
    assert len(coco.imgs) == 60 and len(coco.cats) == 12
    for image in coco.imgs.values():
        with Image.open(world["train_images"] / image["file_name"]) as opened:
            assert opened.format == "JPEG" and opened.size == (image["width"], image["height"])
    for annotation in coco.anns.values():
        x, y, w, h = annotation["bbox"]
        assert w > 0 and h > 0 and annotation["area"] == pytest.approx(w * h, abs=0.05)


def test_file_names_are_coco_like(world: dict[str, Path]) -> None:
    data = json.loads(world["val_annotations"].read_text())
    assert [i["file_name"] for i in data["images"][:2]] == [
        "SYN_val2014_000000000001.jpg",
        "SYN_val2014_000000000002.jpg",
    ]
    assert sorted(p.name for p in world["val_images"].iterdir()) == sorted(i["file_name"] for i in data["images"])


def test_two_to_seven_objects_and_at_least_two_classes_per_image(world: dict[str, Path]) -> None:
    _, by_image = annotations_by_image(world["train_annotations"])
    assert len(by_image) == 60
    assert {len(anns) for anns in by_image.values()} <= set(range(2, 8)) and len(
        {len(a) for a in by_image.values()}
    ) >= 4
    assert min(len({a["category_id"] for a in anns}) for anns in by_image.values()) == 2


def test_some_boxes_overlap_and_a_few_are_crowd(world: dict[str, Path]) -> None:
    data, by_image = annotations_by_image(world["train_annotations"])
    overlapping = sum(
        any(overlaps(a["bbox"], b["bbox"]) for i, a in enumerate(anns) for b in anns[i + 1 :])
        for anns in by_image.values()
    )
    crowd = sum(a["iscrowd"] for a in data["annotations"])
    assert overlapping > 10 and 0 < crowd < len(data["annotations"]) * 0.15


def test_category_names_need_both_articles() -> None:
    names = [name for name, _, _ in CATEGORIES]
    assert "traffic light" in names and sum(name[0] in "aeiou" for name in names) >= 2 and len(set(names)) == 12


def test_world_is_deterministic(tmp_path: Path) -> None:
    first = build_synthetic_world(tmp_path / "a", num_train_images=4, num_val_images=2, seed=7)
    second = build_synthetic_world(tmp_path / "b", num_train_images=4, num_val_images=2, seed=7)
    assert first["train_annotations"].read_bytes() == second["train_annotations"].read_bytes()
    names = sorted(p.name for p in first["train_images"].iterdir())
    assert all((first["train_images"] / n).read_bytes() == (second["train_images"] / n).read_bytes() for n in names)


def test_dev_split_is_held_out_and_leaves_train_and_val_unchanged(tmp_path: Path) -> None:
    """The dev split (hyperparameter selection) is drawn after train and val, so adding it changes neither."""
    plain = build_synthetic_world(tmp_path / "a", num_train_images=4, num_val_images=2, seed=3)
    with_dev = build_synthetic_world(tmp_path / "b", num_train_images=4, num_val_images=2, num_dev_images=3, seed=3)
    assert "dev_annotations" not in plain
    for split in ("train", "val"):
        assert plain[f"{split}_annotations"].read_bytes() == with_dev[f"{split}_annotations"].read_bytes()
    dev = json.loads(with_dev["dev_annotations"].read_text())
    assert len(dev["images"]) == 3
    assert all(image["file_name"].startswith("SYN_dev2014_") for image in dev["images"])
    assert with_dev["dev_pope_random"].is_file() and with_dev["dev_scene_graphs"].is_file()
    val_names = {image["file_name"] for image in json.loads(with_dev["val_annotations"].read_text())["images"]}
    assert val_names.isdisjoint(image["file_name"] for image in dev["images"])


def test_seed_changes_the_world(tmp_path: Path) -> None:
    first = build_synthetic_world(tmp_path / "a", num_train_images=4, num_val_images=1, seed=1)
    second = build_synthetic_world(tmp_path / "b", num_train_images=4, num_val_images=1, seed=2)
    assert first["train_annotations"].read_bytes() != second["train_annotations"].read_bytes()


def test_scene_context_drives_cooccurrence(world: dict[str, Path]) -> None:
    data = json.loads(world["train_annotations"].read_text())
    names = {c["id"]: c["name"] for c in data["categories"]}
    scenes = {i["id"]: i["scene"] for i in data["images"]}
    cars = Counter(scenes[a["image_id"]] for a in data["annotations"] if names[a["category_id"]] == "car")
    ovens = Counter(scenes[a["image_id"]] for a in data["annotations"] if names[a["category_id"]] == "oven")
    assert cars["street"] > cars["kitchen"] and ovens["kitchen"] > ovens["street"]


def test_coco_scale_annotations(tmp_path: Path) -> None:
    path = generate_coco_scale_annotations(tmp_path / "big.json", num_images=2000)
    data = json.loads(path.read_text())
    assert len(data["images"]) == 2000 and len(data["categories"]) == 80
    assert 6.8 < len(data["annotations"]) / 2000 < 7.8  # about 7.3 boxes per image, as COCO-2014 train
    assert all(a["bbox"][2] > 0 and a["bbox"][3] > 0 for a in data["annotations"])


def test_cli_builds_world(tmp_path: Path, capsys) -> None:
    assert main(["build", "synthetic-world", "--out", str(tmp_path), "--train-images", "2", "--val-images", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["val_images"] == str(tmp_path / "val" / "images")
    assert len(list((tmp_path / "train" / "images").iterdir())) == 2


@pytest.fixture(scope="module")
def big_world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_synthetic_world(tmp_path_factory.mktemp("big"), num_train_images=400, num_val_images=4, seed=3)


def test_measured_priors_are_strong_and_incongruity_the_minority(big_world: dict[str, Path]) -> None:
    """P(class | scene) measured on the drawn annotations: about IN_CONTEXT_RATE (0.6, raised by the
    at-least-two rule) for a scene's own classes and about 0.1 for each other class, so out-of-context
    present and in-context absent objects both exist but are the minority of the present objects."""
    data = json.loads(big_world["train_annotations"].read_text())
    names = {c["id"]: c["name"] for c in data["categories"]}
    scene_of = {i["id"]: i["scene"] for i in data["images"]}
    present = {(a["image_id"], names[a["category_id"]]) for a in data["annotations"]}
    images_per_scene = Counter(scene_of.values())
    others = []
    for scene, (_, typical) in SCENES.items():
        for name in names.values():
            share = (
                sum((image, name) in present for image, s in scene_of.items() if s == scene) / images_per_scene[scene]
            )
            if name in typical:
                assert 0.6 <= share <= 0.9, (scene, name, share)  # ~0.73
            else:
                assert share <= 0.22, (scene, name, share)  # 100 images per scene: ~0.10 ± 0.03
                others.append(share)
    assert sum(others) / len(others) < 0.13
    out_of_context = sum(name not in SCENES[scene_of[image]][1] for image, name in present)
    assert 0.8 < out_of_context / len(scene_of) < 1.0  # OUT_OF_CONTEXT_RATE × (1 + SECOND_OUT_OF_CONTEXT_RATE) ≈ 0.91
    assert out_of_context / len(present) < 0.35  # most present objects are in context


def test_backgrounds_shared_or_per_scene(tmp_path: Path) -> None:
    """One grey for every scene by default (the scene is told by its objects); a colour per scene on request."""
    for backgrounds in ("shared", "scene"):
        paths = build_synthetic_world(
            tmp_path / backgrounds, num_train_images=8, num_val_images=1, backgrounds=backgrounds
        )
        data = json.loads(paths["train_annotations"].read_text())
        corners = {}
        for image in data["images"]:
            with Image.open(paths["train_images"] / image["file_name"]) as drawn:
                corners[image["scene"]] = drawn.convert("RGB").getpixel((0, 0))
        expected = {s: SHARED_BACKGROUND if backgrounds == "shared" else SCENES[s][0] for s in corners}
        for scene, pixel in corners.items():  # JPEG, and an object may reach the corner
            assert max(abs(a - b) for a, b in zip(pixel, expected[scene])) <= 24, (backgrounds, scene, pixel)


def test_bad_world_settings_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="backgrounds: expected one of shared, scene"):
        build_synthetic_world(tmp_path, num_train_images=1, num_val_images=1, backgrounds="studio")
    with pytest.raises(UserError, match=r"out_of_context_rate: expected a probability in \[0, 1\], got 1.5"):
        build_synthetic_world(tmp_path, num_train_images=1, num_val_images=1, out_of_context_rate=1.5)
    with pytest.raises(UserError, match="num_dev_images: expected a count >= 0, got -1"):
        build_synthetic_world(tmp_path, num_train_images=1, num_val_images=1, num_dev_images=-1)


def test_scene_graphs_match_the_drawn_images(big_world: dict[str, Path]) -> None:
    """Every scene-graph object is a drawn class whose colour attribute is the colour drawn in its box, and
    every relation agrees with the annotated box centres."""
    data = json.loads(big_world["train_annotations"].read_text())
    graphs = json.loads(big_world["train_scene_graphs"].read_text())
    names = {c["id"]: c["name"] for c in data["categories"]}
    boxes: dict[str, dict[str, list[list[float]]]] = {}
    by_id = {i["id"]: i["file_name"] for i in data["images"]}
    for a in data["annotations"]:
        boxes.setdefault(by_id[a["image_id"]], {}).setdefault(names[a["category_id"]], []).append(a["bbox"])
    colours = {name: colour for name, _, colour in CATEGORIES}
    assert len(graphs) == 400
    for graph in graphs[:80]:
        drawn = boxes[graph["image"]]
        assert sorted(o["object"] for o in graph["objects"]) == sorted(drawn)
        with Image.open(big_world["train_images"] / graph["image"]) as opened:
            image = opened.convert("RGB")
        for obj in graph["objects"]:
            shade, hue = obj["attribute"][0].removeprefix("with a ").removesuffix(" color").split(" ", 1)
            assert hue == COLOUR_NAMES[obj["object"]] and not set(obj["neg_object"]) & set(drawn)
            target = shade_colour(colours[obj["object"]], shade)
            # Some box of the class shows its shade: a pixel within JPEG tolerance of the drawn colour.
            assert any(_shows(image, box, target) for box in drawn[obj["object"]]), (graph["image"], obj["object"])
            for relation in obj["parsed_relation"]:
                other = graph["objects"][relation["object_b"]]["object"]
                expected = {spatial_relation(a, b) for a in drawn[obj["object"]] for b in drawn[other]}
                assert relation["rel"] in expected and relation["rel"] not in obj["neg_relation"][0]


def _shows(image: Image.Image, box: list[float], colour: tuple[int, int, int]) -> bool:
    x, y, w, h = box
    for px in range(int(x) + 1, int(x + w)):
        for py in range(int(y) + 1, int(y + h)):
            if sum(abs(a - b) for a, b in zip(image.getpixel((px, py)), colour)) < 60:
                return True
    return False


def test_pope_random_questions_follow_the_annotations(big_world: dict[str, Path]) -> None:
    data = json.loads(big_world["val_annotations"].read_text())
    names = {c["id"]: c["name"] for c in data["categories"]}
    files = {i["id"]: i["file_name"] for i in data["images"]}
    present = {(files[a["image_id"]], names[a["category_id"]]) for a in data["annotations"]}
    rows = [json.loads(line) for line in big_world["val_pope_random"].read_text().splitlines()]
    labels = Counter(row["label"] for row in rows)
    assert labels["yes"] == labels["no"] > 0
    for row in rows:
        name = row["text"].removeprefix("Is there ").removesuffix(" in the image?").split(" ", 1)[1]
        assert ((row["image"], name) in present) == (row["label"] == "yes")


# ---- instance attributes: the default world unchanged, the drawn one showing border and pattern

# SHA-256 of the files of ``build_synthetic_world(out, num_train_images=3, num_val_images=2, num_dev_images=2,
# seed=0)``, computed with the code before --instance-attributes existed (Pillow 13.0.0's JPEG encoder; a
# Pillow whose encoder writes other bytes changes the images' digest, not the JSON files'). "images" is the
# digest of the split's sorted (file name, file digest) pairs.
DEFAULT_WORLD_SHA256 = {
    "train/instances.json": "1c3081c34fbd4a6a1bb4c3270985d247717a571b8f09b18324f83ead2ba1d0ac",
    "train/scene_graphs.json": "340a12a13882d4a9960c6f3ff0d2579d3e69fee71e3a66b35028f25ca70f46be",
    "train/coco_pope_random.json": "7a2f47cfcdb47a7d6228e3e139711e0d86fcd7c354b7d4d38d5e757848aa0d65",
    "train/images": "b1aa084604775f854796779ee148563253ec8deee8a75ce1b3b8d0cc29d8b677",
    "val/instances.json": "c0053317a15366679a6ca4060f41b5536df011be0734997548f35bb1a83be696",
    "val/scene_graphs.json": "1a7ce394ee101c3969dc890f72e490e8c66e12a30e5dad30991e42063ad946b7",
    "val/coco_pope_random.json": "42931e59009d7df48f5dea1388fdb99be50fbc6c4e34319ba79428a662e871ab",
    "val/images": "3ab282f8dc90272f51efcfc5e305b9029b680d798431e9f8a68a333538056331",
    "dev/instances.json": "279ef7acc8e34882642a3cf74440c8862f25a5a37b50c0eeffd99a2dd19edea9",
    "dev/scene_graphs.json": "818af516bb07bd060e5da8d7b07a33143d7e63f31c6b74bfc9ab8874257b5af5",
    "dev/coco_pope_random.json": "e8ecd6983f3a7a368412930eb662121d067bd90c11bf7ca283d3fcceb19a391e",
    "dev/images": "da9de110e05f2ccb5c54860d075bb598265225b5e070f380c585a373786b1b7f",
}
SMALL_WORLD = {"num_train_images": 3, "num_val_images": 2, "num_dev_images": 2, "seed": 0}


def world_digests(root: Path) -> dict[str, str]:
    """The SHA-256 digests of a world's files, keyed as ``DEFAULT_WORLD_SHA256``."""
    digests = {}
    for split in ("train", "val", "dev"):
        for name in ("instances.json", "scene_graphs.json", "coco_pope_random.json"):
            digests[f"{split}/{name}"] = hashlib.sha256((root / split / name).read_bytes()).hexdigest()
        images = hashlib.sha256()
        for path in sorted((root / split / "images").iterdir()):
            images.update(path.name.encode())
            images.update(hashlib.sha256(path.read_bytes()).hexdigest().encode())
        digests[f"{split}/images"] = images.hexdigest()
    return digests


def test_the_default_world_is_byte_identical_to_the_world_before_instance_attributes(tmp_path: Path) -> None:
    """The demo's world and its measured results depend on it: no option and ``"none"`` draw the same bytes,
    the ones drawn before the option existed."""
    build_synthetic_world(tmp_path / "omitted", **SMALL_WORLD)
    build_synthetic_world(tmp_path / "none", instance_attributes="none", **SMALL_WORLD)
    assert world_digests(tmp_path / "omitted") == world_digests(tmp_path / "none")
    assert world_digests(tmp_path / "omitted") == DEFAULT_WORLD_SHA256


@pytest.fixture(scope="module")
def drawn_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], dict[str, Path]]:
    """A default world and the ``"drawn"`` world of the same seed and sizes."""
    root = tmp_path_factory.mktemp("drawn")
    sizes = {"num_train_images": 16, "num_val_images": 4, "seed": 1}
    default = build_synthetic_world(root / "default", **sizes)
    return default, build_synthetic_world(root / "drawn", instance_attributes="drawn", **sizes)


def test_a_drawn_world_keeps_the_default_layout(drawn_pair: tuple[dict[str, Path], dict[str, Path]]) -> None:
    """Border and pattern come from a generator of their own: classes, boxes, shades, crowd flags and the POPE
    questions are the default world's; only the pixels and the scene graphs' attributes differ."""
    default, drawn = drawn_pair
    for split in ("train", "val"):
        assert drawn[f"{split}_annotations"].read_bytes() == default[f"{split}_annotations"].read_bytes()
        assert drawn[f"{split}_pope_random"].read_bytes() == default[f"{split}_pope_random"].read_bytes()
        names = sorted(p.name for p in default[f"{split}_images"].iterdir())
        assert names == sorted(p.name for p in drawn[f"{split}_images"].iterdir())
        assert all(
            (default[f"{split}_images"] / n).read_bytes() != (drawn[f"{split}_images"] / n).read_bytes() for n in names
        )


def test_drawn_scene_graphs_ask_only_what_the_pixels_show(drawn_pair: tuple[dict[str, Path], dict[str, Path]]) -> None:
    """Shade, border and pattern, each with the other value as its one negative (never another hue); a
    relation's one negative is the opposite direction; objects, their negatives and relations are the
    default graph's."""
    default, drawn = drawn_pair
    opposite = {
        "is to the left of the": "is to the right of the",
        "is to the right of the": "is to the left of the",
        "is above the": "is below the",
        "is below the": "is above the",
    }
    values = {0: ("light", "dark"), 1: ("black", "white"), 2: ("striped", "plain")}
    single = empty = 0
    borders, patterns = Counter(), Counter()
    for plain_graph, graph in zip(
        json.loads(default["train_scene_graphs"].read_text()), json.loads(drawn["train_scene_graphs"].read_text())
    ):
        assert graph["image"] == plain_graph["image"] and len(graph["objects"]) == len(plain_graph["objects"])
        for plain, obj in zip(plain_graph["objects"], graph["objects"]):
            for key in ("object", "object_index", "neg_object", "parsed_relation"):
                assert obj[key] == plain[key]
            hue = COLOUR_NAMES[obj["object"]]
            assert obj["attribute"][0] == plain["attribute"][0]  # the shade, as in the default graph
            words = [
                obj["attribute"][0].removeprefix("with a ").removesuffix(f" {hue} color"),
                obj["attribute"][1].removeprefix("with a ").removesuffix(" border"),
                obj["attribute"][2].removeprefix("with a ").removesuffix(" pattern"),
            ]
            borders[words[1]] += 1
            patterns[words[2]] += 1
            for index, (word, negatives) in enumerate(zip(words, obj["neg_attribute"])):
                assert word in values[index]
                other = next(v for v in values[index] if v != word)
                expected = obj["attribute"][index].replace(f" {word} ", f" {other} ")
                assert negatives in ([expected], [])  # [] only where another instance of the class shows it
                single, empty = single + bool(negatives), empty + (not negatives)
            for relation, negatives in zip(obj["parsed_relation"], obj["neg_relation"]):
                assert negatives in ([opposite[relation["rel"]]], [])
    assert len(obj["attribute"]) == 3 and single > 5 * empty
    assert min(borders.values()) > 5 and min(patterns.values()) > 5 and len(borders) == len(patterns) == 2


def test_a_negative_another_instance_shows_is_left_out() -> None:
    """A second cup with the other border, lying right of the bowl: "with a white border" and "is to the right
    of the" would be true of a cup of the image, so neither is the cup's negative; the rest keep theirs."""
    from miniature.world import use_drawn_attributes

    def instance(name: str, bbox: list[float], shade: str, border: str, pattern: str) -> dict:
        return {"name": name, "bbox": bbox, "shade": shade, "border": border, "pattern": pattern}

    cup = instance("cup", [0, 0, 20, 20], "light", "black", "striped")
    small_cup = instance("cup", [40, 40, 10, 10], "light", "white", "striped")
    bowl = instance("bowl", [25, 0, 20, 20], "dark", "white", "plain")
    objects = [
        {"parsed_relation": [{"object_a": 0, "rel": "is to the left of the", "object_b": 1}], "neg_relation": [[]]},
        {"parsed_relation": [], "neg_relation": []},
    ]
    use_drawn_attributes(objects, [cup, bowl], [cup, small_cup, bowl])
    assert objects[0]["attribute"] == ["with a light red color", "with a black border", "with a striped pattern"]
    assert objects[0]["neg_attribute"] == [["with a dark red color"], [], ["with a plain pattern"]]
    assert objects[0]["neg_relation"] == [[]]
    assert objects[1]["neg_attribute"] == [
        ["with a light yellow color"],
        ["with a black border"],
        ["with a striped pattern"],
    ]
    use_drawn_attributes(objects, [cup, bowl], [cup, bowl])  # without the second cup: every negative is usable
    assert objects[0]["neg_attribute"][1] == ["with a white border"]
    assert objects[0]["neg_relation"] == [["is to the right of the"]]


def _largest_boxes(annotations: Path) -> dict[str, dict[str, list[list[float]]]]:
    """Per image file, per class, its boxes, the largest first (the box the scene graph describes)."""
    data, by_image = annotations_by_image(annotations)
    names = {c["id"]: c["name"] for c in data["categories"]}
    out: dict[str, dict[str, list[list[float]]]] = {}
    for image in data["images"]:
        boxes = out.setdefault(image["file_name"], {})
        for a in sorted(by_image[image["id"]], key=lambda a: -a["area"]):
            boxes.setdefault(names[a["category_id"]], []).append(a["bbox"])
    return out


def _row_mean(image: Image.Image, row: int, columns: range) -> float:
    return sum(sum(image.getpixel((x, row))) / 3 for x in columns) / len(columns)


def test_drawn_instances_show_their_border_and_pattern(drawn_pair: tuple[dict[str, Path], dict[str, Path]]) -> None:
    """On the JPEGs: for every rectangle that no other box overlaps, the pixels of its 2-px outline have the
    border colour, and a striped one's stripe rows (3-4 and 9-10 below its top) differ from its fill rows
    (6-7) by the stripe colour, a plain one's do not."""
    _, drawn = drawn_pair
    boxes = _largest_boxes(drawn["train_annotations"])
    checked: Counter[str] = Counter()
    for graph in json.loads(drawn["train_scene_graphs"].read_text()):
        with Image.open(drawn["train_images"] / graph["image"]) as opened:
            image = opened.convert("RGB")
        everything = [box for class_boxes in boxes[graph["image"]].values() for box in class_boxes]
        for obj in graph["objects"]:
            box = boxes[graph["image"]][obj["object"]][0]
            shape = next(s for n, s, _ in CATEGORIES if n == obj["object"])
            if shape != "rectangle" or any(overlaps(box, other) for other in everything if other is not box):
                continue
            x, y, w, h = box
            left, top, middle = int(x), int(y), int(y + h / 2)
            border = obj["attribute"][1].split()[2]
            edge = image.getpixel((left, middle))
            assert sum(edge) / 3 < 70 if border == "black" else sum(edge) / 3 > 185, (graph["image"], obj, edge)
            inside = range(left + 4, int(x + w) - 3)
            stripe = (_row_mean(image, top + 3, inside) + _row_mean(image, top + 4, inside)) / 2
            fill = (_row_mean(image, top + 6, inside) + _row_mean(image, top + 7, inside)) / 2
            dark = "dark" in obj["attribute"][0]
            if "striped" in obj["attribute"][2]:
                assert stripe - fill > 60 if dark else fill - stripe > 60, (graph["image"], obj, stripe, fill)
            else:
                assert abs(stripe - fill) < 15, (graph["image"], obj, stripe, fill)
            checked[border] += 1
            checked[obj["attribute"][2]] += 1
    assert min(checked.values()) >= 2 and len(checked) == 4, checked


@pytest.mark.parametrize("shape", ["rectangle", "ellipse", "triangle"])
def test_stripes_are_clipped_to_the_shape_under_its_border(shape: str) -> None:
    """Exact pixels (no JPEG): the 2-px outline in the border colour, stripes on rows 3-4, 9-10, ... below the
    box's top inside the shape (black on a light fill), nothing outside the shape."""
    from miniature.world import draw_attributed_shape

    background, fill = (200, 200, 200), (240, 120, 120)
    image = Image.new("RGB", (40, 40), background)
    draw_attributed_shape(image, shape, (4, 4, 30, 30), fill, shade="light", border="white", pattern="striped")
    middle = 4 + 15
    assert image.getpixel((middle, 34)) == image.getpixel((middle, 33)) == (255, 255, 255)  # bottom outline
    assert [image.getpixel((middle, row)) for row in (13, 14, 15, 16, 19, 20)] == [
        (0, 0, 0),
        (0, 0, 0),
        fill,
        fill,
        (0, 0, 0),
        (0, 0, 0),
    ]
    assert image.getpixel((5, 7)) == (background if shape != "rectangle" else (255, 255, 255))  # top-left corner
    plain = Image.new("RGB", (40, 40), background)
    draw_attributed_shape(plain, shape, (4, 4, 30, 30), fill, shade="dark", border="black", pattern="plain")
    assert {plain.getpixel((middle, row)) for row in range(13, 21)} == {fill}
    assert plain.getpixel((middle, 34)) == (0, 0, 0)


def test_instance_attributes_are_part_of_the_build_identity(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A default world keeps the identity it had before the option (its cached builds stay valid); a drawn
    world records it, so neither is taken for the other."""
    sizes = ["--train-images", "2", "--val-images", "1"]
    assert main(["build", "synthetic-world", "--out", str(tmp_path / "a"), *sizes]) == 0
    settings = json.loads((tmp_path / "a" / ".veritune_build.json").read_text())["build"]["settings"]
    assert sorted(settings) == sorted(
        [
            "num_train_images",
            "num_val_images",
            "num_dev_images",
            "image_size",
            "backgrounds",
            "in_context_rate",
            "out_of_context_rate",
            "seed",
        ]
    )
    drawn = ["build", "synthetic-world", "--out", str(tmp_path / "a"), *sizes, "--instance-attributes", "drawn"]
    with pytest.raises(SystemExit) as refused:
        main(drawn)
    assert refused.value.code == 2 and "instance_attributes differ" in capsys.readouterr().err
    assert main([*drawn, "--force"]) == 0
    settings = json.loads((tmp_path / "a" / ".veritune_build.json").read_text())["build"]["settings"]
    assert settings["instance_attributes"] == "drawn"
    with pytest.raises(UserError, match="instance_attributes: expected one of none, drawn, got 'painted'"):
        build_synthetic_world(tmp_path / "b", num_train_images=1, num_val_images=1, instance_attributes="painted")

"""The synthetic image world: valid COCO annotations, deterministic, with co-occurrence structure."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from PIL import Image

from data_builders.synthetic_world import (
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
from veritune.core.errors import UserError


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

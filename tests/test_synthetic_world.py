"""The synthetic image world: valid COCO annotations, deterministic, with co-occurrence structure."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from PIL import Image

from data_builders.synthetic_world import build_synthetic_world, generate_coco_scale_annotations
from veritune.cli import main


def test_world_is_valid_coco(tmp_path: Path) -> None:
    from pycocotools.coco import COCO

    paths = build_synthetic_world(tmp_path, num_train_images=8, num_val_images=4)
    coco = COCO(str(paths["train_annotations"]))
    assert len(coco.imgs) == 8 and len(coco.cats) == 12
    for image in coco.imgs.values():
        with Image.open(paths["train_images"] / image["file_name"]) as opened:
            assert opened.size == (image["width"], image["height"])
        classes = {coco.anns[a]["category_id"] for a in coco.getAnnIds(imgIds=image["id"])}
        assert len(classes) >= 2
    assert any(a["iscrowd"] for a in coco.anns.values()) or len(coco.anns) < 40


def test_world_is_deterministic(tmp_path: Path) -> None:
    first = build_synthetic_world(tmp_path / "a", num_train_images=4, num_val_images=2, seed=7)
    second = build_synthetic_world(tmp_path / "b", num_train_images=4, num_val_images=2, seed=7)
    assert first["train_annotations"].read_bytes() == second["train_annotations"].read_bytes()
    names = sorted(p.name for p in first["train_images"].iterdir())
    assert all((first["train_images"] / n).read_bytes() == (second["train_images"] / n).read_bytes() for n in names)


def test_scene_context_drives_cooccurrence(tmp_path: Path) -> None:
    paths = build_synthetic_world(tmp_path, num_train_images=80, num_val_images=2)
    data = json.loads(paths["train_annotations"].read_text())
    names = {c["id"]: c["name"] for c in data["categories"]}
    scenes = {i["id"]: i["scene"] for i in data["images"]}
    cars = Counter(scenes[a["image_id"]] for a in data["annotations"] if names[a["category_id"]] == "car")
    assert cars["street"] > cars["kitchen"]


def test_coco_scale_annotations(tmp_path: Path) -> None:
    path = generate_coco_scale_annotations(tmp_path / "big.json", num_images=500)
    data = json.loads(path.read_text())
    assert len(data["images"]) == 500 and len(data["categories"]) == 80
    assert 5 * 500 < len(data["annotations"]) < 10 * 500


def test_cli_builds_world(tmp_path: Path, capsys) -> None:
    assert main(["build", "synthetic-world", "--out", str(tmp_path), "--train-images", "2", "--val-images", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["val_images"] == str(tmp_path / "val" / "images")

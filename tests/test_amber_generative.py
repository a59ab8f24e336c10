"""AMBER generative (CHAIR, Cover, Hal, Cog) against hand-computed values, in the official file formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import UserError
from eval_hooks.registry import get_benchmark

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "benchmarks" / "amber"


def amber_dir(tmp_path: Path) -> Path:
    root = tmp_path / "amber"
    (root / "query").mkdir(parents=True)
    (root / "image").mkdir()
    annotations = [
        {"id": 1, "type": "generative", "truth": ["dog", "grass", "person"], "hallu": ["cat", "ball"]},
        {"id": 2, "type": "generative", "truth": ["table", "cup"], "hallu": ["knife"]},
        {"id": 3, "type": "discriminative-hallucination", "truth": "no"},
    ]
    (root / "annotations.json").write_text(json.dumps(annotations))
    (root / "relation.json").write_text(
        json.dumps(
            {
                "dog": [],
                "grass": ["ground"],
                "person": ["man", "woman"],
                "cat": [],
                "ball": [],
                "table": ["desk"],
                "cup": [],
                "knife": [],
                "camera": [],
                "bench": [],
            }
        )
    )
    (root / "safe_words.txt").write_text("camera\nlight\n")
    (root / "query" / "query_generative.json").write_text(
        json.dumps([{"id": i, "image": f"AMBER_{i}.jpg", "query": "Describe this image."} for i in (1, 2)])
    )
    for i in (1, 2):
        (root / "image" / f"AMBER_{i}.jpg").write_bytes(b"x")
    return root


def test_amber_generative_metrics_hand_computed(tmp_path: Path) -> None:
    root = amber_dir(tmp_path)
    benchmark = get_benchmark("amber_generative")
    items = benchmark.load(root / "query" / "query_generative.json", root / "image")
    assert [i.max_new_tokens for i in items] == [512, 512]
    predictions = {
        # dogs -> dog (truth), men -> man (covers person), ground (covers grass), camera (safe word),
        # cat (hallu: Cog, hallucinated), bench (vocabulary, not truth: hallucinated), "sunny" (not vocabulary: ignored)
        "1": "Two dogs and three men stand on the ground near a camera, a cat and a bench on a sunny day.",
        # desk covers table; nothing hallucinated
        "2": "A desk.",
    }
    result = benchmark.score(items, predictions)
    # kept nouns: dog, man, ground, camera, cat, bench (6) + desk (1) = 7; hallucinated: cat, bench = 2
    assert result["metrics"]["CHAIR"] == pytest.approx(100 * 2 / 7)
    # truth covered: dog, person, grass (3 of 3) + table (1 of 2) = 4 of 5
    assert result["metrics"]["Cover"] == pytest.approx(80.0)
    # one of two responses hallucinates
    assert result["metrics"]["Hal"] == pytest.approx(50.0)
    # hallu covered: cat (1 of 2) + none (0 of 1) = 1 of 3
    assert result["metrics"]["Cog"] == pytest.approx(100 / 3)
    assert result["extraction"] in ("rule-based approximation", "nltk+spacy") and "Cog" in result["lower_is_better"]


def test_empty_responses_and_missing_images(tmp_path: Path) -> None:
    root = amber_dir(tmp_path)
    (root / "image" / "AMBER_2.jpg").unlink()
    benchmark = get_benchmark("amber_generative")
    items = benchmark.load(root / "query" / "query_generative.json", root / "image")
    assert items[1].missing_images
    result = benchmark.score(
        items, {"1": "", "2": "A table and a cup."}
    )  # item 2's answer never counts: its image is missing
    assert result["metrics"] == {"CHAIR": 0.0, "Cover": 0.0, "Hal": 0.0, "Cog": 0.0}
    assert result["counts"]["missing_images"] == 1


def test_query_pointing_at_a_discriminative_annotation_is_named(tmp_path: Path) -> None:
    root = amber_dir(tmp_path)
    (root / "query" / "query_generative.json").write_text(
        json.dumps([{"id": 3, "image": "x.jpg", "query": "Describe this image."}])
    )
    with pytest.raises(UserError, match=r"query_generative.json: row 0: id 3 has no generative annotation"):
        get_benchmark("amber_generative").load(root / "query" / "query_generative.json", root / "image")


def test_missing_relation_file_is_named(tmp_path: Path) -> None:
    root = amber_dir(tmp_path)
    (root / "relation.json").unlink()
    with pytest.raises(UserError, match="relation.json not found"):
        get_benchmark("amber_generative").load(root / "query" / "query_generative.json", root / "image")


@pytest.mark.skipif(not SHARED.is_dir(), reason="official benchmark files not beside the checkout")
def test_official_generative_files(tmp_path: Path) -> None:
    benchmark = get_benchmark("amber_generative")
    items = benchmark.load(SHARED / "query" / "query_generative.json", tmp_path)
    assert len(items) == 1004 and all(i.meta["truth"] for i in items)
    for item in items:  # no images here: score the answers as `eval score` does
        item.missing_images = []
    predictions = {item.id: "" for item in items}
    predictions["1"] = (
        "A person walks on a road past a lake under the mountains; there is a dog."  # AMBER_1: dog is a hallu object
    )
    result = benchmark.score(items, predictions)
    assert 0 < result["metrics"]["Cover"] < 1 and result["metrics"]["Hal"] == pytest.approx(100 / 1004)
    assert result["metrics"]["Cog"] > 0

"""FINER builder and loader checks, each with the case that once slipped through: caption phrases are matched
as whole words, a q+/q- pair asks about one image, and a relation belongs to its ``object_a``."""

from __future__ import annotations

import copy
import csv
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from core.errors import UserError
from data_builders.finer import phrases
from data_builders.finer.bench import BenchSettings, BenchStats, build_mcqs, multi_rel_pairs
from data_builders.finer.phrases import Rejected
from data_builders.finer.scene_graph import parse_scene_graph, tuples_for_image
from eval_hooks.benchmarks.finer import FIELDS, Finer

NEGATIVES = ["is under the", "is beside the", "is behind the", "is inside the"]

# A cat and a cup on a table; the cup's "is on the table" is listed under the cat (object_a says the cup).
MISFILED = {
    "example_id": "misfiled",
    "image": "kitchen.jpg",
    "objects": [
        {
            "object": "cat",
            "object_index": 0,
            "neg_object": ["dog", "fox", "rabbit", "owl"],
            "attribute": ["with black fur"],
            "neg_attribute": [["with white fur", "with grey fur", "with red fur", "with no fur"]],
            "parsed_relation": [{"object_a": 1, "rel": "is on the", "object_b": 2}],
            "neg_relation": [NEGATIVES],
        },
        {
            "object": "cup",
            "object_index": 1,
            "neg_object": ["bowl", "glass", "vase", "jar"],
            "attribute": ["with a blue handle"],
            "neg_attribute": [["with a red handle", "with no handle", "with a gold handle", "with a bent handle"]],
            "parsed_relation": [],
            "neg_relation": [],
        },
        {
            "object": "table",
            "object_index": 2,
            "neg_object": ["desk", "bench", "shelf", "stool"],
            "attribute": ["with a wooden top"],
            "neg_attribute": [["with a glass top", "with a marble top", "with a metal top", "with a tiled top"]],
        },
    ],
}


# ---- the caption path matches whole words


def test_invented_object_is_not_passed_by_a_longer_caption_word() -> None:
    """An invented positive "a car" passed for a caption that says "carpet"."""
    with pytest.raises(Rejected, match=re.escape("object 'a car' is not in the caption")):
        phrases.check_objects("a dog and a car", "A dog sleeps on a carpet.")


def test_valid_negative_is_not_rejected_for_a_longer_caption_word() -> None:
    """A valid negative "a cat" was rejected for a caption that says "catching"."""
    caption = "A dog catching a ball on the grass."
    assert phrases.check_object_negative(["a dog", "a ball"], "a cat and a ball", 1, caption) == ["a cat", "a ball"]


@pytest.mark.parametrize(
    ("item", "caption"),
    [
        ("two dogs", "a dog runs"),
        ("a dog", "two dogs run"),
        ("a box", "three boxes"),
        ("a knife", "two knives"),
        ("a strawberry", "a bowl of strawberries"),
        ("a woman", "three women talk"),
        ("a dog", "the dog's tail"),
    ],
)
def test_plural_singular_and_possessive_forms_match(item: str, caption: str) -> None:
    assert phrases.mentioned(item, caption)


def test_attribute_head_matches_whole_words() -> None:
    with pytest.raises(Rejected):
        phrases.check_attributes("a black cat with green eyes", "A dog catching a frisbee.")


# ---- a q+/q- pair asks about one image


def write_finer_csv(path: Path, images: tuple[str, str]) -> Path:
    rows = []
    for image, qtype, answer in ((images[0], "multi_obj_pos", 0), (images[1], "multi_obj_neg", 1)):
        rows.append(
            {
                "image": image,
                "qtype": qtype,
                "question": "Which is right?",
                "choice1": "Yes, a dog.",
                "choice2": "No, but a cat.",
                "choice3": "No, but a fox.",
                "choice4": "No, but a owl.",
                "choice5": "No, but a cow.",
                "gt_index": answer,
            }
        )
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(FIELDS))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_pair_with_two_images_is_refused_naming_its_rows(tmp_path: Path) -> None:
    """A q+/q- pair with different images was accepted and scored."""
    data = write_finer_csv(tmp_path / "finer.csv", ("a.jpg", "b.jpg"))
    with pytest.raises(
        UserError,
        match=r"finer\.csv: rows 2-3: the q\+ and q- rows of a pair must ask about the same image, "
        r"found 'a\.jpg' and 'b\.jpg'",
    ):
        Finer().load(data)


def test_pair_on_one_image_loads(tmp_path: Path) -> None:
    items = Finer().load(write_finer_csv(tmp_path / "finer.csv", ("a.jpg", "a.jpg")))
    assert [item.meta["polarity"] for item in items] == ["pos", "neg"]
    assert items[0].meta["pair"] == items[1].meta["pair"]


# ---- a relation belongs to its object_a


def test_relation_listed_under_another_object_moves_to_its_object_a() -> None:
    graph = parse_scene_graph(copy.deepcopy(MISFILED), "graphs.json: record 1")
    cat, cup, _ = graph.objects
    assert cat.relations == []
    assert [(r.subject, r.rel, r.object, r.negatives) for r in cup.relations] == [(1, "is on the", 2, NEGATIVES)]
    assert graph.to_json()["objects"][1]["parsed_relation"] == [{"object_a": 1, "rel": "is on the", "object_b": 2}]


def test_misfiled_relation_yields_no_mcq_about_the_wrong_subject() -> None:
    """Once, "the cat that is on the table" came out where the graph says the cup is."""
    graph = parse_scene_graph(copy.deepcopy(MISFILED), "graphs.json: record 1")
    pos, _ = multi_rel_pairs(graph, 1, random.Random(0))
    texts = " ".join(str(value) for value in pos.values())
    assert "the cup that is on the table" in texts
    rows = build_mcqs([graph], BenchSettings(), BenchStats())
    everything = " ".join(str(v) for row in rows for v in row.values())
    assert "cat that is on the table" not in everything


def test_misfiled_relation_yields_no_tuple_about_the_wrong_subject() -> None:
    graph = parse_scene_graph(copy.deepcopy(MISFILED), "graphs.json: record 1")
    relation_texts = []
    for seed in range(20):
        for item in tuples_for_image(graph, random.Random(seed), Counter()):
            text = f"{item.question} {item.chosen} {item.rejected}".lower()
            assert "cat is on the table" not in text and "cat that is on the table" not in text
            if item.subset == "rel":
                relation_texts.append(text)
    assert relation_texts and all("cup" in text for text in relation_texts)

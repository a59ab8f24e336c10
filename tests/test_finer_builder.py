"""FINER-Tuning offline path and FINER MCQs: exact tuples and MCQs from a hand-written scene graph, the
dataset directory, and bad input."""

from __future__ import annotations

import copy
import csv
import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from core.errors import UserError
from data_builders.finer.bench import (
    CSV_COLUMNS,
    BenchSettings,
    BenchStats,
    build_finer_bench,
    multi_obj_pairs,
    wh_pairs,
)
from data_builders.finer.build import build_finer_from_scene_graphs
from data_builders.finer.scene_graph import parse_scene_graph, tuples_for_image
from data_builders.finer.templates import TEMPLATES
from miniature.scene_graphs import scene_graphs_from_coco
from veritune.cli import main

# One image: a dog lying on a rug, in the layout of the FINER benchmark files (four negatives everywhere).
GRAPH = {
    "example_id": "test_00001",
    "image": "dog.jpg",
    "objects": [
        {
            "object": "dog",
            "object_index": 0,
            "neg_object": ["cat", "fox", "wolf", "sheep"],
            "attribute": ["with a brown color", "with floppy ears"],
            "neg_attribute": [
                ["with a white color", "with a black color", "with a grey color", "with a spotted color"],
                ["with pointed ears", "with folded ears", "with no ears", "with tiny ears"],
            ],
            "parsed_relation": [{"object_a": 0, "rel": "is lying on the", "object_b": 1}],
            "neg_relation": [
                ["is jumping over the", "is hiding under the", "is standing behind the", "is chewing the"]
            ],
        },
        {
            "object": "rug",
            "object_index": 1,
            "neg_object": ["mat", "towel", "blanket", "carpet"],
            "attribute": ["with a red pattern"],
            "neg_attribute": [
                ["with a blue pattern", "with a green pattern", "with a plain surface", "with a striped pattern"]
            ],
            "parsed_relation": [],
            "neg_relation": [],
        },
    ],
}


class FirstChoice(random.Random):
    """Always the first option, the largest count and no reordering, so the expected text follows by hand."""

    def choice(self, seq):  # noqa: D102
        return seq[0]

    def randrange(self, *args):  # noqa: D102
        return 0

    def randint(self, a, b):  # noqa: D102
        return b

    def sample(self, population, k, **kwargs):  # noqa: D102
        return list(population)[:k]

    def shuffle(self, x, *args):  # noqa: D102
        pass


def graph():
    return parse_scene_graph(copy.deepcopy(GRAPH), "GRAPH")


@pytest.fixture()
def graph_files(tmp_path: Path) -> tuple[Path, Path]:
    """Twelve images sharing GRAPH, as a FINER-layout JSON list; returns (graphs.json, image root)."""
    images = tmp_path / "images"
    images.mkdir()
    records = []
    for index in range(12):
        Image.new("RGB", (32, 24), (index * 20, 90, 120)).save(images / f"{index}.jpg")
        records.append({**copy.deepcopy(GRAPH), "image": f"{index}.jpg", "example_id": f"test_{index:05d}"})
    path = tmp_path / "graphs.json"
    path.write_text(json.dumps(records))
    return path, images


# ---- tuples


def test_scene_graph_yields_the_eight_expected_tuples() -> None:
    tuples = tuples_for_image(graph(), FirstChoice(), Counter())
    got = {(t.subset, t.polarity): (t.question, t.chosen, t.rejected, t.template_id) for t in tuples}
    assert got == {
        ("obj", "pos"): (
            "Does this image contain a dog and a rug?",
            "Yes, this image contains a dog and a rug.",
            "No, but this image contains a cat and a rug.",
            1,
        ),
        ("obj", "neg"): (
            "Does this image contain a cat and a rug?",
            "No, but this image contains a dog and a rug.",
            "Yes, this image contains a cat and a rug.",
            1,
        ),
        ("attr", "pos"): (
            "Does this image contain a dog with a brown color and with floppy ears?",
            "Yes, this image contains a dog with a brown color and with floppy ears.",
            "No, but this image contains a dog with a white color and with floppy ears.",
            1,
        ),
        ("attr", "neg"): (
            "Does this image contain a dog with a white color and with floppy ears?",
            "No, but this image contains a dog with a brown color and with floppy ears.",
            "Yes, this image contains a dog with a white color and with floppy ears.",
            1,
        ),
        ("rel", "pos"): (
            "Does this image contain the dog that is lying on the rug?",
            "Yes, this image contains the dog that is lying on the rug.",
            "No, but this image contains the dog that is jumping over the rug.",
            1,
        ),
        ("rel", "neg"): (
            "Does this image contain the dog that is jumping over the rug?",
            "No, but this image contains the dog that is lying on the rug.",
            "Yes, this image contains the dog that is jumping over the rug.",
            1,
        ),
        # WH, symmetrised: a-+ := a+- and a-- := a++
        ("wh", "pos"): (
            "What is lying on the rug with a red pattern?",
            "A dog with a brown color and with floppy ears.",
            "The rug does not have a blue pattern, but it has a red pattern.",
            0,
        ),
        ("wh", "neg"): (
            "What is lying on the rug with a blue pattern?",
            "The rug does not have a blue pattern, but it has a red pattern.",
            "A dog with a brown color and with floppy ears.",
            0,
        ),
    }


def test_templates_are_the_five_of_the_paper() -> None:
    assert [t[0] for t in TEMPLATES] == [
        "Does this image contain {x}?",
        "Does this image show {x}?",
        "Does this image include {x}?",
        "Can you see {x} in this image?",
        "Can {x} be seen in this image?",
    ]
    assert TEMPLATES[4][1:] == ("Yes, {y} can be seen in this image.", "No, but {z} can be seen in this image.")


def slot(template: str, text: str) -> str:
    """The phrase a template's placeholder holds in ``text``."""
    prefix, suffix = re.split(r"\{[xyz]\}", template)
    assert text.startswith(prefix) and text.endswith(suffix), (template, text)
    return text[len(prefix) : len(text) - len(suffix)]


@pytest.mark.parametrize("seed", range(10))
def test_seeded_configurations_swap_the_positive_and_negative_phrases(seed: int) -> None:
    tuples = tuples_for_image(graph(), random.Random(seed), Counter())
    assert [(t.subset, t.polarity) for t in tuples] == [
        (s, p) for s in ("obj", "attr", "rel", "wh") for p in ("pos", "neg")
    ]
    for pos, neg in zip(tuples[0:6:2], tuples[1:6:2]):
        (q_pos, yes_pos, no_pos), (q_neg, yes_neg, no_neg) = (
            TEMPLATES[pos.template_id - 1],
            TEMPLATES[neg.template_id - 1],
        )
        psi_plus, psi_minus = slot(q_pos, pos.question), slot(no_pos, pos.rejected)
        assert slot(yes_pos, pos.chosen) == psi_plus != psi_minus
        assert slot(q_neg, neg.question) == slot(yes_neg, neg.rejected) == psi_minus  # X = Ψ−, rejected "Yes ... Ψ−"
        assert slot(no_neg, neg.chosen) == psi_plus  # chosen "No, but ... Ψ+"
    wh_pos, wh_neg = tuples[6:]
    assert (wh_pos.chosen, wh_pos.rejected) == (wh_neg.rejected, wh_neg.chosen)


def test_templates_are_drawn_per_example() -> None:
    drawn = {
        t.template_id
        for seed in range(10)
        for t in tuples_for_image(graph(), random.Random(seed), Counter())
        if t.subset != "wh"
    }
    assert drawn == {1, 2, 3, 4, 5}


def test_object_without_negatives_is_skipped_and_counted() -> None:
    bare = {"image": "x.jpg", "objects": [{"object": "lamp"}]}
    skipped: Counter[str] = Counter()
    assert tuples_for_image(parse_scene_graph(bare, "bare"), random.Random(0), skipped) == []
    assert skipped == {
        "obj_no_object_with_negatives": 1,
        "attr_no_attribute_with_negatives": 1,
        "rel_no_relation_with_negatives": 1,
        "wh_no_relation_with_described_object": 1,
    }


def test_negative_present_in_the_image_is_never_used() -> None:
    record = copy.deepcopy(GRAPH)
    record["objects"][0]["neg_object"] = ["rug", "cat"]  # "rug" is in the image: only "cat" may replace "dog"
    record["objects"][1]["neg_object"] = []
    for seed in range(10):
        pos = tuples_for_image(parse_scene_graph(record, "g"), random.Random(seed), Counter())[0]
        psi_plus, psi_minus = (
            slot(TEMPLATES[pos.template_id - 1][0], pos.question),
            slot(TEMPLATES[pos.template_id - 1][2], pos.rejected),
        )
        assert psi_minus == psi_plus.replace("a dog", "a cat")


# ---- dataset directory


def test_build_writes_trl_preference_rows(graph_files: tuple[Path, Path], tmp_path: Path) -> None:
    graphs, images = graph_files
    manifest = build_finer_from_scene_graphs(graphs, images, tmp_path / "out", max_tuples=50, seed=1)
    train = [json.loads(line) for line in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    row = train[0]
    assert set(row) == {
        "images",
        "prompt",
        "chosen",
        "rejected",
        "subset",
        "polarity",
        "template_id",
        "source_image",
        "source_id",
    }
    assert row["prompt"][0]["role"] == "user" and row["prompt"][0]["content"][0] == {"type": "image"}
    assert row["chosen"][0]["role"] == "assistant" and row["images"] == [row["source_image"]]
    assert (images / row["images"][0]).is_file() and manifest["image_root"] == str(images.resolve())
    assert (
        manifest["counts"]["tuples_built"] == 96 and manifest["counts"]["written"] == 50
    )  # 12 images x 8 tuples, subsampled
    assert (manifest["counts"]["train"], manifest["counts"]["validation"]) == (49, 1)  # 0.5%, at least one row


def test_build_is_deterministic_for_a_seed(graph_files: tuple[Path, Path], tmp_path: Path) -> None:
    graphs, images = graph_files
    build_finer_from_scene_graphs(graphs, images, tmp_path / "a", max_tuples=40, seed=7)
    build_finer_from_scene_graphs(graphs, images, tmp_path / "b", max_tuples=40, seed=7)
    build_finer_from_scene_graphs(graphs, images, tmp_path / "c", max_tuples=40, seed=8)
    assert (tmp_path / "a" / "train.jsonl").read_text() == (tmp_path / "b" / "train.jsonl").read_text()
    assert (tmp_path / "a" / "train.jsonl").read_text() != (tmp_path / "c" / "train.jsonl").read_text()


def test_manifest_records_input_hash_and_seed(graph_files: tuple[Path, Path], tmp_path: Path) -> None:
    import hashlib

    graphs, images = graph_files
    manifest = build_finer_from_scene_graphs(graphs, images, tmp_path / "out", seed=3)
    assert manifest["input"] == {
        "kind": "scene-graphs",
        "path": str(graphs),
        "sha256": hashlib.sha256(graphs.read_bytes()).hexdigest(),
    }
    assert manifest["seed"] == 3 and manifest["counts"]["by_polarity"] == {"neg": 48, "pos": 48}
    assert json.loads((tmp_path / "out" / "manifest.json").read_text()) == manifest


def test_missing_images_are_listed_skipped_and_counted(graph_files: tuple[Path, Path], tmp_path: Path) -> None:
    graphs, images = graph_files
    (images / "3.jpg").unlink()
    manifest = build_finer_from_scene_graphs(graphs, images, tmp_path / "out")
    assert manifest["skipped"]["missing_image"] == 1 and manifest["missing_images"] == ["3.jpg"]
    assert (tmp_path / "out" / "missing_images.txt").read_text() == "3.jpg\n"
    assert manifest["counts"]["tuples_built"] == 88


def test_relation_to_missing_object_is_an_error_naming_it() -> None:
    record = copy.deepcopy(GRAPH)
    record["objects"][0]["parsed_relation"][0]["object_b"] = 9
    with pytest.raises(
        UserError,
        match=(
            r"record 1 \(test_00001\): object 'dog' \(object_index 0\): "
            r"relation 0 'is lying on the' points to missing object object_b 9"
        ),
    ):
        parse_scene_graph(record, "record 1")


def test_negative_lists_must_match_their_attributes() -> None:
    record = copy.deepcopy(GRAPH)
    record["objects"][1]["neg_attribute"] = []
    with pytest.raises(
        UserError,
        match=(
            r"object 'rug' \(object_index 1\): "
            r"neg_attribute must hold one list of negatives per attribute \(1\), got 0"
        ),
    ):
        parse_scene_graph(record, "g")


def test_cli_bad_scene_graph_exits_2_with_one_line(
    graph_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graphs, images = graph_files
    record = copy.deepcopy(GRAPH)
    record["objects"][0]["parsed_relation"][0]["object_a"] = 5
    graphs.write_text(json.dumps([record]))
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "build",
                "finer",
                "--scene-graphs",
                str(graphs),
                "--image-root",
                str(images),
                "--out",
                str(tmp_path / "out"),
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert (
        err.startswith(f"error: {graphs}: record 1 (test_00001): object 'dog'") and "missing object object_a 5" in err
    )


def test_cli_builds_the_dataset(
    graph_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graphs, images = graph_files
    assert (
        main(
            [
                "build",
                "finer",
                "--scene-graphs",
                str(graphs),
                "--image-root",
                str(images),
                "--out",
                str(tmp_path / "out"),
                "--max-tuples",
                "20",
            ]
        )
        == 0
    )
    assert "wrote" in capsys.readouterr().out
    assert len((tmp_path / "out" / "train.jsonl").read_text().splitlines()) == 19


def test_captions_need_an_llm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.jsonl").write_text(json.dumps({"image": "a.jpg", "caption": "A dog."}) + "\n")
    with pytest.raises(SystemExit):
        main(
            [
                "build",
                "finer",
                "--captions",
                str(tmp_path / "c.jsonl"),
                "--image-root",
                str(tmp_path),
                "--out",
                str(tmp_path / "o"),
            ]
        )
    assert capsys.readouterr().err == "error: --captions: needs --llm-base-url and --llm-model\n"


# ---- MCQs


def test_multi_obj_mcq_pair_is_exact() -> None:
    pos, neg = multi_obj_pairs(graph(), 2, FirstChoice())
    assert pos == {
        "image": "dog.jpg",
        "qtype": "multi_obj_pos",
        "question": "Can you see dog and rug in this image?",
        "choice1": "Yes, I can see dog and rug in this image.",
        "choice2": "No, but I can see cat and rug in this image.",
        "choice3": "No, but I can see fox and rug in this image.",
        "choice4": "No, but I can see wolf and rug in this image.",
        "choice5": "No, but I can see sheep and rug in this image.",
        "gt_index": 0,
    }
    assert neg == {
        "image": "dog.jpg",
        "qtype": "multi_obj_neg",
        "question": "Can you see cat and rug in this image?",
        "choice1": "Yes, I can see cat and rug in this image.",
        "choice2": "No, but I can see dog and rug in this image.",
        "choice3": "No, but I can see fox and rug in this image.",
        "choice4": "No, but I can see wolf and rug in this image.",
        "choice5": "No, but I can see sheep and rug in this image.",
        "gt_index": 1,
    }


def test_wh_mcq_pair_is_exact() -> None:
    pos, neg = wh_pairs(graph(), FirstChoice(), BenchStats())
    objects = [f"The {n} with a brown color and with floppy ears." for n in ("dog", "cat", "fox", "wolf")]
    assert pos == {
        "image": "dog.jpg",
        "qtype": "wh_pos",
        "question": "What is lying on the rug with a red pattern?",
        **{f"choice{i}": o for i, o in enumerate(objects, start=1)},
        "choice5": "The rug is not with a red pattern, but is with a blue pattern.",
        "gt_index": 0,
    }
    assert neg == {
        "image": "dog.jpg",
        "qtype": "wh_neg",
        "question": "What is lying on the rug with a blue pattern?",
        **{f"choice{i}": o for i, o in enumerate(objects, start=1)},
        "choice5": "The rug is not with a blue pattern, but is with a red pattern.",
        "gt_index": 4,
    }


def test_bench_csv_has_the_public_layout_and_seeded_answer_letters(
    graph_files: tuple[Path, Path], tmp_path: Path
) -> None:
    graphs, _ = graph_files
    graphs.write_text(json.dumps([GRAPH]))
    manifest = build_finer_bench(graphs, tmp_path / "finer.csv", BenchSettings(seed=0))
    with (tmp_path / "finer.csv").open() as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert tuple(reader.fieldnames) == (*CSV_COLUMNS, "k")
    assert [r["qtype"] for r in rows] == ["multi_obj_pos", "multi_obj_neg"] * 2 + [
        "multi_attr_pos",
        "multi_attr_neg",
    ] * 2 + ["multi_rel_pos", "multi_rel_neg", "wh_pos", "wh_neg"]
    assert [r["k"] for r in rows] == ["1", "1", "2", "2", "1", "1", "2", "2", "1", "1", "", ""]
    letters = ["ABCDE"[int(r["gt_index"])] for r in rows]
    assert letters == ["D", "B", "D", "E", "E", "D", "D", "C", "E", "E", "A", "E"]  # seed 0
    for pos, neg in zip(rows[0::2], rows[1::2]):
        assert pos["image"] == neg["image"] == "dog.jpg"
        truth_pos, truth_neg = pos[f"choice{int(pos['gt_index']) + 1}"], neg[f"choice{int(neg['gt_index']) + 1}"]
        if pos["qtype"] == "wh_pos":  # seed 0 asks for the rug given the dog (B-mode)
            assert (truth_pos, truth_neg) == (
                "The rug with a red pattern.",
                "The dog is not with a spotted color, but is with a brown color.",
            )
            continue
        positive = pos["question"].removeprefix("Can you see ").removesuffix(" in this image?")
        assert truth_pos == f"Yes, I can see {positive} in this image."
        assert truth_neg == f"No, but I can see {positive} in this image."  # q−'s answer restores P+
    assert manifest["counts"]["pairs_by_setting_and_k"] == {
        "multi_attr_k1": 1,
        "multi_attr_k2": 1,
        "multi_obj_k1": 1,
        "multi_obj_k2": 1,
        "multi_rel_k1": 1,
        "wh": 1,
    }
    assert manifest["skipped"]["multi_obj_k3_not_enough_entities_or_negatives"] == 1


def test_bench_cli_lists_missing_images(graph_files: tuple[Path, Path], tmp_path: Path) -> None:
    graphs, images = graph_files
    (images / "0.jpg").unlink()
    assert (
        main(
            [
                "build",
                "finer-bench",
                "--scene-graphs",
                str(graphs),
                "--image-root",
                str(images),
                "--out",
                str(tmp_path / "b.csv"),
                "--settings",
                "wh",
            ]
        )
        == 0
    )
    manifest = json.loads((tmp_path / "b.manifest.json").read_text())
    assert (
        manifest["missing_images"] == ["0.jpg"]
        and manifest["skipped"]["missing_image"] == 1
        and manifest["counts"]["pairs"] == 11
    )


def test_bench_rejects_unknown_setting() -> None:
    with pytest.raises(UserError, match="--settings: unknown setting 'multi_color'"):
        BenchSettings(settings=("multi_obj", "multi_color"))


# ---- synthetic scene graphs


def test_synthetic_scene_graphs_feed_both_builders(tmp_path: Path) -> None:
    from miniature.world import build_synthetic_world

    world = build_synthetic_world(tmp_path / "world", num_train_images=6, num_val_images=2, seed=0, image_size=64)
    graphs = scene_graphs_from_coco(Path(world["train_annotations"]), tmp_path / "graphs.json")
    records = json.loads(graphs.read_text())
    assert len(records) == 6 and all(
        len(o["neg_object"]) == 4 and len(o["neg_attribute"]) == 2 for r in records for o in r["objects"]
    )
    manifest = build_finer_from_scene_graphs(graphs, Path(world["train_images"]), tmp_path / "out")
    assert set(manifest["counts"]["by_subset"]) == {"obj", "attr", "rel", "wh"}
    assert build_finer_bench(graphs, tmp_path / "bench.csv", BenchSettings())["counts"]["pairs"] > 6

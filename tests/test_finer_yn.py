"""FINER's yes/no granularity probe (arXiv 2603.17662, Sec. 1 and Fig. 1): the builder (``veritune build
finer-bench --protocol yn``), the ``finer_yn`` scorer on hand-computed cases, limits, the paired bootstrap,
the eval hook's files, W&B payload and report curve."""

from __future__ import annotations

import copy
import csv
import json
import random
import re
import types
from pathlib import Path

import pytest
from PIL import Image

from core.errors import UserError
from core.finer_yn import COLUMNS, PATTERNS
from data_builders.finer.scene_graph import SceneGraph, parse_scene_graph
from data_builders.finer.yn import (
    Chain,
    YnSettings,
    YnStats,
    build_finer_yn,
    level_pair,
    negative_attributes,
    negative_objects,
    negative_relations,
    yn_rows,
)
from eval_hooks.base import EvalItem
from eval_hooks.bootstrap import metric_difference_intervals
from eval_hooks.evaluate import score_benchmark
from eval_hooks.prepare import prepare_benchmark
from eval_hooks.registry import get_benchmark
from veritune.cli import main

A1 = "with predominantly white coat featuring black and grey markings"
A2 = "with its head turned downwards"
A3 = "with perked ears"
B1 = "with primarily blue and white in color exhibiting signs of wear"

# Fig. 1a's cat on the chair. Each negative list holds values that are true of the image (so unusable) beside
# exactly one usable value, so every query below follows by hand. A second cat (drooping ears, below the chair)
# makes "with drooping ears" and "is sitting below the" true of *a* cat of the image.
CAT_GRAPH = {
    "example_id": "cat_0001",
    "image": "cat.jpg",
    "objects": [
        {
            "object": "cat",
            "object_index": 0,
            "neg_object": ["chair", "wolf", "Cat"],
            "attribute": [A1, A2, A3],
            "neg_attribute": [
                [A3, "with predominantly brown coat featuring orange and pink markings"],
                ["with its head tilted backward", A2],
                ["with drooping ears", "with folded ears"],
            ],
            "parsed_relation": [{"object_a": 0, "rel": "is sitting on the", "object_b": 1}],
            "neg_relation": [["is sitting below the", "is sitting on the", "is sitting beside the"]],
        },
        {
            "object": "chair",
            "object_index": 1,
            "neg_object": ["cat", "sofa"],
            "attribute": [B1],
            "neg_attribute": [[B1, "with largely purple and orange in color indicating heavy use"]],
            "parsed_relation": [],
            "neg_relation": [],
        },
        {
            "object": "cat",
            "object_index": 2,
            "neg_object": [],
            "attribute": ["with drooping ears"],
            "neg_attribute": [[]],
            "parsed_relation": [{"object_a": 2, "rel": "is sitting below the", "object_b": 1}],
            "neg_relation": [[]],
        },
    ],
}

Q = "Can you see the {} in this image?"
FULL = f"cat {A1}, {A2}, {A3}"
EXPECTED = {  # level -> (positive twin, negative query)
    1: (Q.format("cat"), Q.format("wolf")),
    2: (Q.format(f"cat {A1}"), Q.format("cat with predominantly brown coat featuring orange and pink markings")),
    3: (Q.format(f"cat {A1}, {A2}"), Q.format(f"cat {A1}, with its head tilted backward")),
    4: (Q.format(FULL), Q.format(f"cat {A1}, {A2}, with folded ears")),
    5: (Q.format(f"{FULL}, that is sitting on the chair"), Q.format(f"{FULL}, that is sitting beside the chair")),
    6: (Q.format(f"{FULL}, that is sitting on the chair"), Q.format(f"{FULL}, that is sitting on the sofa")),
    7: (
        Q.format(f"{FULL}, that is sitting on the chair {B1}"),
        Q.format(f"{FULL}, that is sitting on the chair with largely purple and orange in color indicating heavy use"),
    ),
}


def cat_graph() -> SceneGraph:
    return parse_scene_graph(copy.deepcopy(CAT_GRAPH), "CAT_GRAPH")


def test_each_level_follows_figure_1_with_its_positive_twin() -> None:
    graph = cat_graph()
    chain = Chain(graph.object(0), [0, 1, 2], graph.object(0).relations[0], 0)
    for level, expected in EXPECTED.items():
        assert level_pair(graph, chain, level, random.Random(level)) == expected, level


def test_negatives_true_of_some_object_of_the_image_are_never_used() -> None:
    graph = cat_graph()
    cat, chair = graph.object(0), graph.object(1)
    assert negative_objects(graph, cat) == ["wolf"]  # chair is in the image, "Cat" is the cat
    assert negative_objects(graph, chair) == ["sofa"]
    assert negative_attributes(graph, cat, 0) == [
        "with predominantly brown coat featuring orange and pink markings"
    ]  # the cat's own A3
    assert negative_attributes(graph, cat, 2) == ["with folded ears"]  # the other cat has drooping ears
    assert negative_relations(graph, cat.relations[0]) == ["is sitting beside the"]  # the other cat is below


def test_built_rows_pair_each_negative_with_its_twin_at_all_seven_levels(tmp_path: Path) -> None:
    graphs = tmp_path / "graphs.json"
    graphs.write_text(json.dumps([CAT_GRAPH]))
    manifest = build_finer_yn(graphs, tmp_path / "yn.csv", YnSettings(seed=3))
    with (tmp_path / "yn.csv").open() as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert tuple(reader.fieldnames) == COLUMNS
    assert [(int(r["level"]), r["polarity"], r["answer"]) for r in rows] == [
        (level, polarity, answer) for level in range(1, 8) for polarity, answer in (("pos", "yes"), ("neg", "no"))
    ]
    assert {r["sample"] for r in rows} == {"cat_0001/o0"}  # the first cat: it fills every level
    assert [r["pattern"] for r in rows[::2]] == list(PATTERNS.values())
    assert [r["negated"] for r in rows[::2]] == ["obj", "attr", "attr", "attr", "rel", "obj", "attr"]
    # the attributes' order is drawn, so the texts are checked as sets: every query is one of Fig. 1's forms
    negatives = {r["question"] for r in rows if r["polarity"] == "neg"}
    assert Q.format("wolf") in negatives and Q.format(f"{FULL}, that is sitting on the sofa") in negatives
    for pos, neg in zip(rows[::2], rows[1::2]):
        assert pos["question"] != neg["question"] and pos["image"] == neg["image"] == "cat.jpg"
    assert manifest["counts"] == {
        "rows": 14,
        "pairs": 7,
        "samples": 1,
        "pairs_by_level": {f"L{level}": 1 for level in range(1, 8)},
    }
    assert manifest["skipped"] == {} and manifest["seed"] == 3


def test_levels_a_graph_cannot_fill_are_skipped_and_counted() -> None:
    plain = {  # two attributes, no relation: levels 1-3 only
        "example_id": "dog_1",
        "image": "dog.jpg",
        "objects": [
            {
                "object": "dog",
                "neg_object": ["cat"],
                "attribute": ["with a brown color", "with floppy ears"],
                "neg_attribute": [["with a white color"], ["with pointed ears"]],
            }
        ],
    }
    related = copy.deepcopy(CAT_GRAPH)  # three attributes and a relation, but nothing usable about the chair
    related["example_id"] = "cat_2"
    related["objects"][1].update({"neg_object": ["cat"], "attribute": [], "neg_attribute": []})
    related["objects"] = related["objects"][:2]
    bare = {"example_id": "x", "image": "x.jpg", "objects": [{"object": "lamp"}]}  # nothing to negate
    stats = YnStats()
    settings = YnSettings()
    rows = [r for record in (plain, related, bare) for r in yn_rows(parse_scene_graph(record, "g"), settings, stats)]
    assert [(r["sample"], r["level"]) for r in rows[::2]] == [
        ("dog_1/o0", 1),
        ("dog_1/o0", 2),
        ("dog_1/o0", 3),
        ("cat_2/o0", 1),
        ("cat_2/o0", 2),
        ("cat_2/o0", 3),
        ("cat_2/o0", 4),
        ("cat_2/o0", 5),
    ]
    assert dict(stats.skipped) == {
        "L4_fewer_than_3_attributes": 1,
        "L5_fewer_than_3_attributes": 1,
        "L6_fewer_than_3_attributes": 1,
        "L7_fewer_than_3_attributes": 1,
        "L6_no_usable_object_negative_for_the_related_object": 1,
        "L7_related_object_has_no_attribute_with_a_usable_negative": 1,
        "image_without_a_fillable_level": 1,
    }
    assert stats.pairs == {"L1": 2, "L2": 2, "L3": 2, "L4": 1, "L5": 1} and stats.samples == 2


def _world(tmp_path: Path) -> tuple[Path, Path]:
    from miniature.world import build_synthetic_world

    world = build_synthetic_world(tmp_path / "world", num_train_images=1, num_val_images=12, seed=0, image_size=64)
    return Path(world["val_scene_graphs"]), Path(world["val_images"])


def test_on_the_synthetic_world_no_negative_is_true_and_builds_are_deterministic(tmp_path: Path) -> None:
    graphs, images = _world(tmp_path)
    records = json.loads(graphs.read_text())
    one = build_finer_yn(graphs, tmp_path / "a.csv", YnSettings(seed=0, anchors_per_image=3), image_root=images)
    build_finer_yn(graphs, tmp_path / "b.csv", YnSettings(seed=0, anchors_per_image=3), image_root=images)
    build_finer_yn(graphs, tmp_path / "c.csv", YnSettings(seed=1, anchors_per_image=3), image_root=images)
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    assert (tmp_path / "a.csv").read_bytes() != (tmp_path / "c.csv").read_bytes()
    assert one["counts"]["samples"] > 12  # several anchors per image
    # the world's objects have two attributes: levels 4-7 are skipped and counted, once per sample
    assert one["counts"]["pairs_by_level"]["L4"] == 0
    assert one["skipped"]["L4_fewer_than_3_attributes"] == one["counts"]["samples"]
    # an independent check of every negative against the raw records: no negative query names something the
    # image has, as the one element the query changed
    with (tmp_path / "a.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    by_image = {r["image"]: r for r in records}
    for pos, neg in zip(rows[::2], rows[1::2]):
        record = by_image[neg["image"]]
        names = {o["object"] for o in record["objects"]}
        anchor = record["objects"][int(neg["sample"].rsplit("/o", 1)[1])]
        if neg["level"] == "1":
            wrong = neg["question"].removeprefix("Can you see the ").removesuffix(" in this image?")
            assert wrong not in names and wrong in anchor["neg_object"]
        else:
            wrong = "with " + neg["question"].removesuffix(" in this image?").rsplit("with ", 1)[-1]
            same_name = [o for o in record["objects"] if o["object"] == anchor["object"]]
            assert all(wrong not in o["attribute"] for o in same_name)
            assert any(wrong in negs for negs in anchor["neg_attribute"])
        assert pos["question"] != neg["question"]


def test_cli_builds_the_probe_and_keeps_the_mcq_build_identity(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    graphs, images = _world(tmp_path)
    out = tmp_path / "yn" / "finer_yn.csv"
    args = ["build", "finer-bench", "--scene-graphs", str(graphs), "--image-root", str(images), "--out", str(out)]
    assert main([*args, "--protocol", "yn"]) == 0
    assert "yes/no pairs from 12 samples" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "yn" / "finer_yn.manifest.json").read_text())
    assert manifest["protocol"] == "yn" and manifest["build"]["settings"]["protocol"] == "yn"
    assert "max_objects" not in manifest["build"]["settings"]
    assert main([*args, "--protocol", "yn"]) == 0  # the same build again: accepted
    with pytest.raises(SystemExit) as refused:  # another build into it: refused with one line
        main([*args, "--protocol", "yn", "--seed", "1"])
    assert refused.value.code == 2 and "seed differ" in capsys.readouterr().err
    assert main([*args[:-1], str(tmp_path / "mcq.csv")]) == 0
    mcq = json.loads((tmp_path / "mcq.manifest.json").read_text())["build"]["settings"]
    assert "protocol" not in mcq and "anchors_per_image" not in mcq and mcq["max_objects"] == 6


def test_a_drawn_world_fills_all_seven_levels_with_image_only_negatives(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``build synthetic-world --instance-attributes drawn``: three attributes (shade, border, pattern) and a
    relation per anchor, so every sample fills L1-L7; each negative swaps one value for its other one (never a
    hue). The letter protocol builds what four negatives allow and counts the rest; FINER-Tuning tuples build."""
    from miniature.world import build_synthetic_world

    world = build_synthetic_world(
        tmp_path / "world", num_train_images=1, num_val_images=12, seed=0, instance_attributes="drawn"
    )
    bench = ["build", "finer-bench", "--scene-graphs", str(world["val_scene_graphs"])]
    bench += ["--image-root", str(world["val_images"])]
    assert main([*bench, "--protocol", "yn", "--out", str(tmp_path / "yn.csv")]) == 0
    manifest = json.loads((tmp_path / "yn.manifest.json").read_text())
    assert manifest["counts"]["pairs_by_level"] == {f"L{level}": 12 for level in range(1, 8)}
    assert manifest["skipped"] == {}
    swaps = [{"light", "dark"}, {"black", "white"}, {"striped", "plain"}, {"left", "right"}, {"above", "below"}]
    with (tmp_path / "yn.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    for pos, neg in zip(rows[::2], rows[1::2]):
        if neg["level"] in ("1", "6"):  # a negative object: an absent class
            continue
        changed = [(a, b) for a, b in zip(pos["question"].split(), neg["question"].split()) if a != b]
        assert len(changed) == 1 and set(changed[0]) in swaps, (pos["question"], neg["question"])
    capsys.readouterr()
    assert main([*bench, "--out", str(tmp_path / "mcq.csv")]) == 0  # the letter protocol: what it can, counted
    out = capsys.readouterr().out
    assert '"multi_obj_k1": 12' in out and '"multi_attr_k1_not_enough_entities_or_negatives": 12' in out
    with pytest.raises(SystemExit) as refused:
        main([*bench, "--settings", "multi_attr", "--out", str(tmp_path / "attr.csv")])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "no MCQ could be built" in err and len(err.strip().splitlines()) == 1
    finer = ["build", "finer", "--scene-graphs", str(world["val_scene_graphs"])]
    assert main([*finer, "--image-root", str(world["val_images"]), "--out", str(tmp_path / "tuples")]) == 0
    built = json.loads((tmp_path / "tuples" / "manifest.json").read_text())["counts"]["by_subset"]
    assert all(built[subset] > 0 for subset in ("obj", "attr", "rel", "wh")), built


# ---- the scorer


def write_probe(path: Path, pairs: list[tuple[str, int]]) -> Path:
    """A finer_yn CSV with one pos/neg pair per (sample, level); images beside it."""
    rows = []
    for sample, level in pairs:
        image = f"{sample}.jpg"
        if not (path.parent / image).is_file():
            Image.new("RGB", (32, 32), (90, 90, 90)).save(path.parent / image)
        for polarity in ("pos", "neg"):
            rows.append(
                {
                    "image": image,
                    "sample": sample,
                    "level": level,
                    "pattern": PATTERNS[level],
                    "polarity": polarity,
                    "negated": "obj" if level == 1 else "attr",
                    "question": f"Can you see the {'cat' if polarity == 'pos' else 'dog'} ({level}) in this image?",
                    "answer": "yes" if polarity == "pos" else "no",
                }
            )
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return path


HAND = [("s1", 1), ("s1", 3), ("s1", 5), ("s2", 1), ("s2", 3)]
HAND_PREDICTIONS = {
    "p/s1/L1/pos": "Yes",
    "p/s1/L1/neg": "No",  # both right
    "p/s1/L3/pos": "Yes.",
    "p/s1/L3/neg": "Yes",  # a false positive
    "p/s1/L5/pos": "No",
    "p/s1/L5/neg": "No",  # a false negative
    "p/s2/L1/pos": "yes, I can",
    "p/s2/L1/neg": "I cannot tell",  # unresolved: wrong
    # p/s2/L3/pos: no answer (wrong)
    "p/s2/L3/neg": "no",
}


def hand_items(tmp_path: Path) -> list[EvalItem]:
    return prepare_benchmark("finer_yn", data={"finer_yn": write_probe(tmp_path / "p.csv", HAND)}).items


def test_scorer_on_a_hand_computed_prediction_set(tmp_path: Path) -> None:
    items = hand_items(tmp_path)
    assert items[0].prompt == "Can you see the cat (1) in this image?\nPlease answer with Yes or No."
    assert items[0].max_new_tokens == 3
    # the scorer itself (score_benchmark refuses predictions that leave an item unanswered; see test_eval_coverage)
    result = get_benchmark("finer_yn").score(items, HAND_PREDICTIONS)
    m = result["metrics"]
    # negatives right: s1L1, s1L5, s2L3 (3 of 5); positives right: s1L1, s1L3, s2L1 (3 of 5); pairs: s1L1 only
    assert m["neg_accuracy"] == pytest.approx(60.0) and m["pos_accuracy"] == pytest.approx(60.0)
    assert m["paired_accuracy"] == pytest.approx(20.0) and m["accuracy"] == pytest.approx(60.0)
    assert m["yes_proportion"] == pytest.approx(40.0)  # yes: s1L1+, s1L3+, s1L3-, s2L1+ of 10 answers
    assert m["neg_accuracy_l3_l7"] == pytest.approx(200 / 3)  # L3: wrong, right; L5: right
    assert m["paired_accuracy_l3_l7"] == 0.0  # s1L3: neg wrong; s2L3: pos wrong; s1L5: pos wrong
    assert (m["L1/neg_accuracy"], m["L1/pos_accuracy"], m["L1/paired_accuracy"], m["L1/yes_proportion"]) == (
        50.0,
        100.0,
        50.0,
        50.0,
    )
    assert (m["L3/neg_accuracy"], m["L3/pos_accuracy"], m["L3/paired_accuracy"], m["L3/yes_proportion"]) == (
        50.0,
        50.0,
        0.0,
        50.0,
    )
    assert (m["L5/neg_accuracy"], m["L5/pos_accuracy"], m["L5/paired_accuracy"]) == (100.0, 0.0, 0.0)
    assert "L2/neg_accuracy" not in m
    assert [(row["level"], row["pairs"]) for row in result["tables"]["by_level"]] == [(1, 2), (3, 2), (5, 1)]
    # write_probe marks every pair "attr" but level 1's ("obj"): obj = the two L1 pairs, attr = the other three
    assert (m["negated_obj/neg_accuracy"], m["negated_obj/pos_accuracy"], m["negated_obj/paired_accuracy"]) == (
        50.0,
        100.0,
        50.0,
    )
    assert m["negated_attr/neg_accuracy"] == pytest.approx(200 / 3) and m["negated_attr/pos_accuracy"] == 100 / 3
    assert m["negated_attr/paired_accuracy"] == 0.0
    assert result["counts"] == {
        "items": 10,
        "pairs": 5,
        "samples": 2,
        "neg_l3_l7": 3,
        "pairs_l3_l7": 3,
        "unresolved": 2,
        "missing_images": 0,
    }


def test_always_yes_and_always_no_both_score_zero_paired(tmp_path: Path) -> None:
    items = hand_items(tmp_path)
    for answer, neg, pos, yes in (("Yes", 0.0, 100.0, 100.0), ("No", 100.0, 0.0, 0.0)):
        m = score_benchmark("finer_yn", items, {i.id: answer for i in items})["metrics"]
        assert (m["paired_accuracy"], m["neg_accuracy"], m["pos_accuracy"], m["yes_proportion"]) == (0.0, neg, pos, yes)
        assert m["paired_accuracy_l3_l7"] == 0.0


def test_a_limit_counts_pairs_and_keeps_twins_together(tmp_path: Path) -> None:
    path = write_probe(tmp_path / "p.csv", HAND)
    items = prepare_benchmark("finer_yn", data={"finer_yn": path}, limit=3, limit_mode="first").items
    assert [i.id for i in items] == [f"p/{s}/L{lv}/{p}" for s, lv in HAND[:3] for p in ("pos", "neg")]
    sampled = prepare_benchmark("finer_yn", data={"finer_yn": path}, limit=3).items  # stratified: twins whole too
    assert len(sampled) == 6 and all(sampled[i].meta["pair"] == sampled[i + 1].meta["pair"] for i in (0, 2, 4))


def test_paired_bootstrap_resamples_pairs(tmp_path: Path) -> None:
    items = hand_items(tmp_path)
    base = {i.id: "Yes" for i in items}
    rows = metric_difference_intervals(
        "finer_yn", items, base, HAND_PREDICTIONS, ["neg_accuracy_l3_l7", "paired_accuracy"], resamples=200
    )
    assert [r["questions"] for r in rows] == [5, 5]
    assert rows[1]["base"] == 0.0 and rows[1]["trained"] == pytest.approx(20.0)
    assert rows[1]["low"] <= rows[1]["difference"] <= rows[1]["high"]
    same = metric_difference_intervals("finer_yn", items, base, base, ["paired_accuracy"], resamples=50)[0]
    assert (same["low"], same["high"]) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda rows: rows.pop(1), "row 2: sample 's1' level 1 has a pos query without its neg twin"),
        (lambda rows: rows[1].update(answer="yes"), "row 3: a neg query's answer must be no"),
        (lambda rows: rows[0].update(level="9"), "row 2: level '9' is not one of 1..7"),
        (lambda rows: rows[1].update(polarity="pos", answer="yes"), "rows 2 and 3: two pos queries"),
        (lambda rows: rows[1].update(image="other.jpg"), "must ask about the same image"),
    ],
)
def test_malformed_files_are_one_line_errors(tmp_path: Path, edit, message: str) -> None:
    path = write_probe(tmp_path / "p.csv", HAND[:1])
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    edit(rows)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(UserError, match=re.escape(message)):
        get_benchmark("finer_yn").load(path)


# ---- the eval hook: files per checkpoint, W&B, the report's Fig. 1 curve


def test_hook_results_reach_wandb_and_the_report_draws_the_curve(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from eval_hooks.callback import EvalHookCallback, wandb_payload
    from veritune.report import write_report

    graphs, images = _world(tmp_path)
    probe = tmp_path / "finer_yn.csv"
    build_finer_yn(graphs, probe, YnSettings(seed=0), image_root=images)
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl, dtype="float32")
    processor = AutoProcessor.from_pretrained(tiny_qwen3vl)
    hook = EvalHookCallback(["finer_yn:4"], None, data={"finer_yn": str(probe)}, image_root=str(images), batch_size=8)
    run = tmp_path / "run"
    results = {}
    for step in (0, 2):
        results[step] = hook.evaluate_model(model, processor, run / "eval" / f"checkpoint-{step}", step=step)
    result = results[2]["finer_yn"]
    assert result["counts"]["items"] == 8 and result["counts"]["pairs"] == 4
    assert {row["level"] for row in result["tables"]["by_level"]} == {1, 2, 3}

    wandb = types.SimpleNamespace(
        Table=lambda columns, data: {"columns": columns, "data": data}, Image=lambda image, caption: caption
    )
    payload = wandb_payload(results[2], 2, wandb)
    assert payload["eval/finer_yn/L1/neg_accuracy"] == result["metrics"]["L1/neg_accuracy"]
    assert payload["eval/finer_yn/by_level"]["columns"][:3] == ["level", "pattern", "pairs"]

    page = write_report(run).read_text()
    assert "finer_yn: accuracy on negative queries by level (FINER Fig. 1b)" in page
    assert "step 0 (base)" in page and "step 2" in page
    assert "neg_accuracy_l3_l7" in page  # the world's level 3 gives the before/after row


def test_cli_filters_the_negatives_before_composing_queries(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from test_finer_builder import GRAPH

    Image.new("RGB", (20, 20)).save(tmp_path / "dog.jpg")
    (tmp_path / "g.json").write_text(json.dumps([GRAPH]))
    out = tmp_path / "yn.csv"
    thresholds = ["--theta-obj", "2", "--theta-attr", "2", "--theta-rel", "2"]  # > log 5: drop every confusion
    args = ["build", "finer-bench", "--protocol", "yn", "--scene-graphs", str(tmp_path / "g.json")]
    args += ["--image-root", str(tmp_path), "--out", str(out), "--filter-model", str(tiny_qwen3vl)]
    assert main([*args, "--filter-device", "cpu", *thresholds]) == 0
    levels = json.loads((tmp_path / "yn.manifest.json").read_text())["filter"]["levels"]
    assert {level: levels[level]["checked"] for level in levels} == {"obj": 2, "attr": 3, "rel": 1}


def test_the_filter_runs_on_the_graphs_before_any_query_is_composed(tmp_path: Path) -> None:
    graphs = tmp_path / "graphs.json"
    graphs.write_text(json.dumps([CAT_GRAPH]))

    def drop_wolf(loaded: list[SceneGraph], out: Path) -> dict[str, str]:
        loaded[0].object(0).negatives.remove("wolf")  # as App. B.3's filter drops a negative the image shows
        return {"model": "scripted"}

    manifest = build_finer_yn(graphs, tmp_path / "yn.csv", YnSettings(), filter_negatives=drop_wolf)
    assert manifest["filter"] == {"model": "scripted"} and manifest["skipped"] == {"L1_no_usable_object_negative": 1}
    assert "wolf" not in (tmp_path / "yn.csv").read_text()


def test_of_two_objects_with_one_name_the_one_filling_more_levels_is_described() -> None:
    record = copy.deepcopy(CAT_GRAPH)
    record["objects"] = [record["objects"][2], *record["objects"][:2]]  # the other cat listed first
    stats = YnStats()
    rows = yn_rows(parse_scene_graph(record, "g"), YnSettings(anchors_per_image=3), stats)
    assert {r["sample"] for r in rows} == {"cat_0001/o0", "cat_0001/o1"}  # the full cat, and the chair
    assert stats.samples == 2 and stats.pairs["L7"] == 1

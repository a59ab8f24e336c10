"""``veritune build finer-contrast``: one yes/no-probe description asked on an image where it is true and on one
where it is false, as two rows of TRL's preference format."""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from pathlib import Path

import pytest

from data_builders.finer.contrast import ContrastSettings, Description, descriptions, false_image
from data_builders.finer.scene_graph import parse_scene_graph
from finetune.preference_data import PreferenceReport, iter_preference_rows
from veritune.cli import main

BORDER = {"with a white border": "with a black border", "with a black border": "with a white border"}


def graph(example: str, objects: list[tuple[str, list[str]]], relation: tuple[int, str, int] | None = None):
    """A scene graph whose objects carry the given attributes (each attribute's negative: the other border)."""
    records = []
    for index, (name, attributes) in enumerate(objects):
        records.append(
            {
                "object": name,
                "object_index": index,
                "neg_object": ["wolf"],
                "attribute": attributes,
                "neg_attribute": [[BORDER.get(a, "with a striped pattern")] for a in attributes],
                "parsed_relation": [],
                "neg_relation": [],
            }
        )
    if relation is not None:
        subject, rel, obj = relation
        records[subject]["parsed_relation"] = [{"object_a": subject, "rel": rel, "object_b": obj}]
        records[subject]["neg_relation"] = [["is to the right of the"]]
    return parse_scene_graph(
        copy.deepcopy({"example_id": example, "image": f"{example}.jpg", "objects": records}), example
    )


WHITE, BLACK, LIGHT, PLAIN = (
    "with a white border",
    "with a black border",
    "with a light red color",
    "with a plain pattern",
)


def test_a_description_holds_element_by_element_as_the_probe_judges_negatives() -> None:
    scene = graph("a", [("cup", [WHITE, LIGHT, PLAIN]), ("cup", [BLACK]), ("dog", [WHITE])], (0, "is left of the", 2))
    desc = Description("cup", (BLACK, LIGHT), "is left of the", "dog", (WHITE,))
    # "any cup is black-bordered" and "any cup is light red" both hold, though no one cup is both
    assert desc.holds(scene) == [True, True, True, True, True]
    assert Description("cup", (WHITE,), "is left of the", "dog", (BLACK,)).holds(scene) == [True, True, True, False]
    assert Description("dog", (), "is left of the", "cup").holds(scene) == [True, False]
    assert Description("cat").holds(scene) == [False]
    assert desc.text() == f"cup {BLACK}, {LIGHT}, that is left of the dog {WHITE}"


def test_the_false_image_is_the_nearest_miss_and_level_1_asks_an_absent_object() -> None:
    source = graph("src", [("cup", [WHITE, LIGHT, PLAIN]), ("dog", [WHITE])], (0, "is left of the", 1))
    graphs = [
        source,
        graph("far", [("cup", [BLACK, "with a dark red color", "with a striped pattern"])]),  # 1 of 4 hold
        graph("near", [("cup", [WHITE, LIGHT, "with a striped pattern"])]),  # 3 of 4 hold
        graph("same", [("cup", [WHITE, LIGHT, PLAIN]), ("kite", [])]),  # true: never the false image
        graph("none", [("kite", [BLACK])]),
    ]
    with_name: dict[str, list[int]] = {}
    for i, g in enumerate(graphs):
        for name in {o.name for o in g.objects}:
            with_name.setdefault(name, []).append(i)
    settings = ContrastSettings(false_image="nearest")
    three = Description("cup", (WHITE, LIGHT, PLAIN))
    for seed in range(20):
        assert false_image(three, 0, graphs, with_name, settings, random.Random(seed)) == (2, "nearest_miss")
        assert false_image(Description("cup"), 0, graphs, with_name, settings, random.Random(seed)) == (
            4,
            "object_absent",
        )
    drawn = {
        false_image(three, 0, graphs, with_name, ContrastSettings(false_image="random"), random.Random(seed))
        for seed in range(40)
    }
    assert drawn == {(1, "random_miss"), (2, "random_miss")}  # any image with the object where it is false
    # a description no image with the object contradicts falls back to an image without it
    assert false_image(Description("cup", (WHITE,)), 3, graphs[:4] + graphs[4:], with_name, settings, random.Random(0))[
        1
    ] in {"nearest_miss", "object_absent"}
    everywhere = [source, graph("b", [("cup", [WHITE])])]
    assert false_image(Description("cup"), 0, everywhere, {"cup": [0, 1]}, settings, random.Random(0)) is None


def test_each_level_is_the_probes_positive_description_and_level_6_repeats_level_5() -> None:
    scene = graph("a", [("cup", [WHITE, LIGHT, PLAIN]), ("dog", [BLACK])], (0, "is left of the", 1))
    found = descriptions(scene, ContrastSettings(anchors_per_image=1), random.Random(0))
    assert [level for _, level, _ in found] == [1, 2, 3, 4, 5, 7]
    texts = {level: d.text() for _, level, d in found}
    assert texts[1] == "cup"
    assert texts[4].startswith("cup with ") and texts[4].count("with ") == 3
    assert texts[5] == f"{texts[4]}, that is left of the dog"
    assert texts[7] == f"{texts[5]} {BLACK}"
    assert all(d.holds(scene) == [True] * len(d.holds(scene)) for _, _, d in found)
    only = descriptions(scene, ContrastSettings(levels=(2, 6), anchors_per_image=1), random.Random(0))
    assert [level for _, level, _ in only] == [2, 6]


def held(record: dict, name: str, named: list[str]) -> bool:
    """An object called ``name`` is in the image, and each named attribute is held by some object so called."""
    same = [o for o in record["objects"] if o["object"] == name]
    return bool(same) and all(any(a in o["attribute"] for o in same) for a in named)


@pytest.fixture(scope="module")
def drawn_world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from miniature.world import build_synthetic_world

    root = tmp_path_factory.mktemp("contrast")
    return build_synthetic_world(
        root / "world", num_train_images=1, num_val_images=40, seed=0, instance_attributes="drawn"
    )


def test_built_pairs_share_the_text_and_differ_in_whether_it_is_true(
    drawn_world: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    graphs, images = str(drawn_world["val_scene_graphs"]), str(drawn_world["val_images"])
    args = ["build", "finer-contrast", "--scene-graphs", graphs, "--image-root", images]
    assert main([*args, "--out", str(tmp_path / "a"), "--validation-ratio", "0"]) == 0
    assert "image-contrast pairs" in capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "a" / "train.jsonl").read_text().splitlines()]
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["counts"]["by_polarity"]["pos"] == manifest["counts"]["by_polarity"]["neg"] == len(rows) // 2
    assert set(manifest["counts"]["by_subset"]) == {"L1", "L2", "L3", "L4", "L5", "L7"}
    # an independent check against the raw records: the positive's image has an object with every named
    # element; the negative's image lacks at least one of them (by name, any instance)
    records = {r["image"]: r for r in json.loads(Path(graphs).read_text())}
    names = {o["object"] for r in records.values() for o in r["objects"]}
    by_pair: dict[str, list[dict]] = {}
    for row in rows:
        by_pair.setdefault(row["source_id"], []).append(row)
    assert all(len(pair) == 2 for pair in by_pair.values())
    for pair in by_pair.values():
        pos, neg = sorted(pair, key=lambda r: r["polarity"] != "pos")
        question = pos["prompt"][0]["content"][1]["text"]
        assert neg["prompt"][0]["content"][1]["text"] == question
        assert (pos["chosen"][0]["content"][0]["text"], neg["chosen"][0]["content"][0]["text"]) == ("Yes.", "No.")
        assert pos["images"] != neg["images"]
        text = question.removeprefix("Can you see the ").removesuffix(" in this image?")
        name = max((n for n in names if text == n or text.startswith(n + " ")), key=len)
        if pos["subset"] in ("L5", "L7"):  # a relation: the anchor with its three attributes is on the true image
            text = text.split(", that ")[0]
        rest = text.removeprefix(name).strip()
        named = rest.split(", ") if rest else []
        assert held(records[pos["images"][0]], name, named), question
        if pos["subset"] in ("L1", "L2", "L3", "L4"):  # no relation: this check is the whole description
            assert not held(records[neg["images"][0]], name, named), question
    # deterministic; another seed, another build; a second build into the same --out is refused
    assert main([*args, "--out", str(tmp_path / "b"), "--validation-ratio", "0"]) == 0
    assert (tmp_path / "a" / "train.jsonl").read_bytes() == (tmp_path / "b" / "train.jsonl").read_bytes()
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        main([*args, "--out", str(tmp_path / "a"), "--validation-ratio", "0", "--seed", "1"])
    assert refused.value.code == 2 and "seed differ" in capsys.readouterr().err


def test_the_dpo_reader_takes_the_rows_and_max_tuples_keeps_whole_pairs(
    drawn_world: dict[str, str], tmp_path: Path
) -> None:
    args = ["build", "finer-contrast", "--scene-graphs", str(drawn_world["val_scene_graphs"])]
    args += ["--image-root", str(drawn_world["val_images"]), "--out", str(tmp_path / "c")]
    assert main([*args, "--max-tuples", "40", "--validation-ratio", "0"]) == 0
    report = PreferenceReport()
    rows = list(iter_preference_rows(tmp_path / "c", report=report))
    assert report.kept == len(rows) == 40 and not report.dropped
    assert Counter(r["polarity"] for r in rows) == {"pos": 20, "neg": 20}
    assert rows[0]["prompt"][0]["content"][0] == {"type": "image"} and Path(rows[0]["images"][0]).is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--levels", "2,9"], "--levels 2,9: each level must be one of 1..7"),
        (["--levels", "two"], "--levels two: expected comma-separated integers"),
        (["--candidates", "0"], "--candidates: must be at least 1"),
        (["--false-image", "far"], "argument --false-image: invalid choice"),
        (["--max-tuples", "1"], "--max-tuples 1: must be at least 2"),
    ],
)
def test_bad_settings_are_one_line_errors(
    drawn_world: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture, extra: list[str], message: str
) -> None:
    args = ["build", "finer-contrast", "--scene-graphs", str(drawn_world["val_scene_graphs"])]
    args += ["--image-root", str(drawn_world["val_images"]), "--out", str(tmp_path / "x"), *extra]
    with pytest.raises(SystemExit) as refused:
        main(args)
    err = capsys.readouterr().err
    assert refused.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_missing_inputs_are_named(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(
            ["build", "finer-contrast", "--scene-graphs", str(tmp_path / "no.json")]
            + ["--image-root", str(tmp_path), "--out", str(tmp_path / "o")]
        )
    assert "--scene-graphs" in capsys.readouterr().err
    one = tmp_path / "one.json"
    one.write_text(json.dumps([{"example_id": "x", "image": "x.jpg", "objects": []}]))
    with pytest.raises(SystemExit) as refused:
        main(
            ["build", "finer-contrast", "--scene-graphs", str(one), "--image-root", str(tmp_path)]
            + ["--out", str(tmp_path / "o")]
        )
    err = capsys.readouterr().err
    assert refused.value.code == 2 and "need at least two images with their files present" in err
    assert not (tmp_path / "o").exists()


def test_the_contrast_recipe_is_the_measured_dpo() -> None:
    # recipes/miniature/tiny_finer_contrast.yaml: the DPO chosen on dev (docs/LAB_NOTEBOOK_ARCHIVE.md#seeing-base:
    # full parameters, tower frozen, sigmoid + SFT)
    from finetune.configs import DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig
    from finetune.recipe import parse_recipe

    types = (DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig)
    script_args, args, model_args = parse_recipe(["recipes/miniature/tiny_finer_contrast.yaml"], types)
    assert model_args.freeze_vision_tower and not model_args.use_peft
    assert list(args.loss_type) == ["sigmoid", "sft"] and args.beta == 0.1
    assert args.learning_rate == 1e-4 and args.max_steps == 19200 and args.per_device_train_batch_size == 4
    assert script_args.dataset_path == "outputs/seeing/contrast"


def test_missing_images_are_skipped_listed_and_counted(
    drawn_world: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    import shutil

    images = tmp_path / "images"
    shutil.copytree(drawn_world["val_images"], images)
    records = json.loads(Path(drawn_world["val_scene_graphs"]).read_text())
    gone = records[0]["image"]
    (images / gone).unlink()
    args = ["build", "finer-contrast", "--scene-graphs", str(drawn_world["val_scene_graphs"])]
    assert main([*args, "--image-root", str(images), "--out", str(tmp_path / "o"), "--validation-ratio", "0"]) == 0
    assert f"missing image: {gone}" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["missing_images"] == [gone] and manifest["skipped"]["missing_image"] == 1
    assert manifest["images"] == {"records": len(records), "used": len(records) - 1}
    rows = (tmp_path / "o" / "train.jsonl").read_text()
    assert gone not in rows and (tmp_path / "o" / "missing_images.txt").read_text() == f"{gone}\n"

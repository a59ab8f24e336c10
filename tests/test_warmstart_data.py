"""``veritune build warmstart-data`` (miniature/warmstart_data.py): the SFT warm-start's table holds, row for row and
in the same order, the examples ``finetune/sft.py`` generated itself before its data generation moved to the
builder (tests/fixtures/warmstart_rows.json: written by sft.py's ``training_examples`` at commit c8f90fe on the
world below, for the two miniature recipes' settings and one that sets every option), and sft.py reads them back
as the same examples, image path strings included."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from core.errors import UserError
from core.finer_yn import QUESTION
from core.sampling import sample_indices
from finetune.sft import SFTScriptArguments, refuse_annotation_file, sft_examples, table_examples
from miniature.world import build_synthetic_world
from veritune.cli import main

REPO_ROOT = Path(__file__).resolve().parent.parent
EXPECTED = json.loads((Path(__file__).parent / "fixtures" / "warmstart_rows.json").read_text())


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_synthetic_world(tmp_path_factory.mktemp("warmstart"), **EXPECTED["world"])


def flags(settings: dict, seed: int) -> list[str]:
    """The builder's flags for the SFT recipe keys the fixture's rows were generated with."""
    argv = []
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else flag.replace("--", "--no-", 1))
        elif isinstance(value, list):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return [*argv, "--seed", str(seed)]


def build_table(world: dict[str, Path], out: Path, argv: list[str]) -> Path:
    command = ["build", "warmstart-data", "--annotations", str(world["train_annotations"])]
    assert main([*command, "--image-root", str(world["train_images"]), "--out", str(out), *argv]) == 0
    return out


@pytest.mark.parametrize("case", list(EXPECTED["cases"]))
def test_the_table_holds_the_examples_sft_generated_before_in_the_same_order(
    case: str, world: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same settings and seed give the same rows in the same order (the attribute pairs drawn with seed + 1
    and shuffled in with seed), so the same batches and the same weights; sft.py resolves each image, named
    relative to the image root, to the path string it built itself."""
    expected = EXPECTED["cases"][case]
    table = build_table(world, tmp_path / "train.jsonl", flags(expected["settings"], expected["seed"]))
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    assert rows == expected["rows"]
    images = str(world["train_images"])
    generated = [{**row, "images": [str(Path(images) / name) for name in row["images"]]} for row in expected["rows"]]
    assert table_examples(SFTScriptArguments(dataset_path=str(table), image_root=images)) == generated

    manifest = json.loads((tmp_path / "train.manifest.json").read_text())
    attribute = sum(row["prompt"][0]["content"].startswith(QUESTION.split("{")[0]) for row in rows)
    assert manifest["counts"]["examples"] == len(rows) and manifest["counts"]["attribute_questions"] == attribute
    assert manifest["settings"]["seed"] == expected["seed"] and manifest["build"]["command"] == "build warmstart-data"
    printed = capsys.readouterr().out
    assert f"{len(rows)} examples ({len(rows) - attribute} conventional, {attribute} attribute questions)" in printed
    if expected["settings"].get("attribute_pairs_per_image"):  # the line sft.py logged, now the builder's
        line = f"attribute pairs: {attribute} questions ({attribute // 2} pairs; per slot "
        assert manifest["summary"].startswith(line) and manifest["summary"] in printed
        assert f"added to {len(rows) - attribute} examples" in manifest["summary"]
    else:
        assert attribute == 0 and manifest["summary"] is None


def test_max_train_samples_is_the_seeded_uniform_subsample_of_the_table(world: dict[str, Path], tmp_path: Path) -> None:
    table = build_table(world, tmp_path / "train.jsonl", ["--seed", "3"])

    def args(limit: int | None) -> SFTScriptArguments:
        root = str(world["train_images"])
        return SFTScriptArguments(dataset_path=str(table), image_root=root, max_train_samples=limit)

    everything = sft_examples(args(None), seed=3)
    picked = sft_examples(args(10), seed=3)
    assert picked == [everything[i] for i in sample_indices(len(everything), 10, 3)]
    assert picked != everything[:10]  # not the first rows


def test_a_rebuild_keeps_the_table_and_another_seed_needs_force(
    world: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = build_table(world, tmp_path / "train.jsonl", ["--seed", "1"])
    first = table.read_bytes()
    build_table(world, table, ["--seed", "1"])  # the same build: the same bytes
    assert table.read_bytes() == first
    capsys.readouterr()
    command = ["build", "warmstart-data", "--annotations", str(world["train_annotations"]), "--out", str(table)]
    command += ["--image-root", str(world["train_images"]), "--seed", "2"]
    with pytest.raises(SystemExit) as exit_info:
        main(command)
    assert exit_info.value.code == 2 and "add --force" in capsys.readouterr().err
    assert table.read_bytes() == first
    assert main([*command, "--force"]) == 0 and table.read_bytes() != first


def test_sft_refuses_a_coco_instances_file_naming_the_builder(world: dict[str, Path], tmp_path: Path) -> None:
    annotations = world["train_annotations"]
    with pytest.raises(UserError) as info:
        refuse_annotation_file(SFTScriptArguments(dataset_path=str(annotations)))
    assert str(info.value) == (
        f"dataset_path: {annotations} is a COCO instances file, not a table of examples; build one with `veritune "
        f"build warmstart-data --annotations {annotations} --image-root IMAGES --out TABLE.jsonl` and give "
        "TABLE.jsonl as dataset_path, IMAGES as image_root"
    )
    rows = tmp_path / "rows.json"  # JSON lines in a .json file, and a JSON list: tables, not refused
    rows.write_text('{"prompt": [], "completion": [], "images": []}\n{"prompt": [], "completion": [], "images": []}\n')
    refuse_annotation_file(SFTScriptArguments(dataset_path=str(rows)))
    rows.write_text("[]")
    refuse_annotation_file(SFTScriptArguments(dataset_path=str(rows)))


def test_the_attribute_pairs_need_their_scene_graphs(
    world: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    annotations = tmp_path / "instances.json"  # a split without its scene_graphs.json
    annotations.write_text(world["train_annotations"].read_text())
    command = ["build", "warmstart-data", "--annotations", str(annotations), "--out", str(tmp_path / "t.jsonl")]
    command += ["--image-root", str(world["train_images"]), "--attribute-pairs-per-image", "1"]
    with pytest.raises(SystemExit) as exit_info:
        main(command)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'scene_graphs.json'}: scene graphs not found (--attribute-pairs-per-image reads them; "
        "see --scene-graphs)\n"
    )
    assert not (tmp_path / "t.jsonl").exists()
    graphs = world["train_annotations"].with_name("scene_graphs.json")
    assert main([*command, "--scene-graphs", str(graphs)]) == 0
    manifest = json.loads((tmp_path / "t.manifest.json").read_text())
    assert manifest["scene_graphs"] == str(graphs) and manifest["counts"]["attribute_questions"] > 0


def _warmstart_command(recipe: str) -> str:
    """The ``veritune build warmstart-data`` command a recipe's comment shows, on one line."""
    lines = (REPO_ROOT / "recipes" / "miniature" / recipe).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if "veritune build warmstart-data" in line)
    command = []
    for line in lines[start:]:
        command.append(line.lstrip("# ").rstrip("\\ "))
        if not line.rstrip().endswith("\\"):
            break
    return re.sub(r"\s+", " ", " ".join(command))


def test_the_recipes_show_the_flags_the_demo_builds_their_tables_with() -> None:
    """The values the recipes held as keys (questions_per_image 2, captions false, answer_styles [plain]; the
    attribute recipe also attribute_pairs_per_image 3) and their seed, now the builder's flags."""
    from miniature.stages import WARMSTART_DATA_FLAGS

    recipes = (("tiny_sft_warmstart.yaml", ""), ("tiny_sft_attributes.yaml", " --attribute-pairs-per-image 3"))
    for recipe, extra in recipes:
        command = _warmstart_command(recipe)
        assert command.endswith(f"{' '.join(WARMSTART_DATA_FLAGS)}{extra} --seed 0"), command
        assert "\nseed: 0\n" in (REPO_ROOT / "recipes" / "miniature" / recipe).read_text()


def test_multi_image_questions_join_the_table_worded_as_the_mioh_benchmark_asks_them(
    world: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--multi-image``: each question of a MIOH-format build once per answer style, its prompt the ``mioh``
    benchmark's, its completion the right letter, its images named relative to the image root; the conventional
    rows are those of the same flags without it."""
    from eval_hooks.benchmarks.mioh import Mioh

    mioh = tmp_path / "mioh"
    build = ["build", "mioh-rft", "--annotations", str(world["train_annotations"]), "--out", str(mioh)]
    build += ["--image-root", str(world["train_images"]), "--tasks", "existence", "--pressures", "easy"]
    assert main([*build, "--num-images", "2", "--questions", "2"]) == 0
    argv = ["--questions-per-image", "1", "--no-captions", "--answer-styles", "plain", "--seed", "0"]
    plain = build_table(world, tmp_path / "plain.jsonl", argv)
    table = build_table(world, tmp_path / "train.jsonl", [*argv, "--multi-image", str(mioh / "mioh.json")])
    rows = [json.loads(line) for line in table.read_text().splitlines()]
    items = Mioh().load(mioh / "mioh.json", world["train_images"])
    answers = {r["id"]: r["answer"] for r in json.loads((mioh / "mioh.json").read_text())}
    expected = [
        {
            "prompt": [{"role": "user", "content": item.prompt}],
            "completion": [{"role": "assistant", "content": answers[item.id]}],
            "images": [Path(image).relative_to(world["train_images"]).as_posix() for image in item.images],
        }
        for item in items
    ]
    multi = [row for row in rows if len(row["images"]) > 1]
    assert sorted(map(json.dumps, multi)) == sorted(map(json.dumps, expected)) and len(multi) == len(items)
    conventional = [row for row in rows if len(row["images"]) == 1]
    assert sorted(map(json.dumps, conventional)) == sorted(
        map(json.dumps, map(json.loads, plain.read_text().splitlines()))
    )
    manifest = json.loads((tmp_path / "train.manifest.json").read_text())
    assert manifest["counts"]["multi_image_questions"] == len(items) and manifest["build"]["inputs"]["multi_image"]
    assert f"{len(items)} multi-image questions)" in capsys.readouterr().out
    # sft.py resolves every image of a row against the image root
    examples = table_examples(SFTScriptArguments(dataset_path=str(table), image_root=str(world["train_images"])))
    assert all(Path(image).is_file() for example in examples for image in example["images"])


def test_multi_image_questions_outside_the_image_root_are_one_line(
    world: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mioh = tmp_path / "mioh.json"
    record = {"id": "q1", "images": ["../elsewhere.jpg", "b.jpg"], "question": "Which object appears in all images?"}
    record.update(options={"A": "dog", "B": "None of the above"}, answer="A", task="existence")
    mioh.write_text(json.dumps([{**record, "pattern": "comprehensive", "pressure": "easy"}]))
    command = ["build", "warmstart-data", "--annotations", str(world["train_annotations"]), "--multi-image", str(mioh)]
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--image-root", str(world["train_images"]), "--out", str(tmp_path / "t.jsonl")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith(f"error: {mioh}: question q1: image ") and err.count("\n") == 1
    assert not (tmp_path / "t.jsonl").exists()

"""`veritune build mioh-rft`: MIOH's templates word for word, answers recomputed from the annotations, balanced
letters, seeded and resumable builds, the leakage check, bad input, and the build read by the MIOH benchmark."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from data_builders.mioh.build import RELATIONS, attribute_word
from data_builders.mioh.templates import NONE_OF_THE_ABOVE, TEMPLATES, YES_SOME_NONE, answerable_letters
from eval_hooks.benchmarks.mioh import Mioh
from eval_hooks.paths import recorded_image_root
from miniature.world import build_synthetic_world
from veritune.cli import main

SEED_PAPER = Path(__file__).resolve().parents[3] / "shared" / "seeds" / "mioh_multi_image_hallucination.txt"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mioh-world")
    return build_synthetic_world(root / "world", num_train_images=40, num_val_images=24)


def build_args(world: dict[str, Path], out: Path, split: str = "train", *extra: str) -> list[str]:
    return [
        "build",
        "mioh-rft",
        "--annotations",
        str(world[f"{split}_annotations"]),
        "--image-root",
        str(world[f"{split}_images"]),
        "--scene-graphs",
        str(world[f"{split}_scene_graphs"]),
        "--out",
        str(out),
        "--questions",
        "3",
        *extra,
    ]


@pytest.fixture(scope="module")
def built(world: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mioh-build") / "mioh"
    assert main(build_args(world, out)) == 0
    return out


def records_of(out: Path) -> list[dict]:
    return json.loads((out / "mioh.json").read_text())


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    return exit_info.value.code, capsys.readouterr().err


# ---- the record format and the benchmark


def test_build_loads_and_scores_in_the_mioh_benchmark(built: Path, world: dict[str, Path]) -> None:
    assert recorded_image_root(built / "mioh.json") == world["train_images"].resolve()
    items = Mioh().load(built / "mioh.json", recorded_image_root(built / "mioh.json"))
    assert items and not any(item.missing_images for item in items)
    assert {item.meta["task"] for item in items} == {"existence", "counting", "attribute", "position"}
    assert {item.meta["pressure"] for item in items} == {"easy", "hard_negative", "hard_positive", "num_images"}
    right = Mioh().score(items, {item.id: item.meta["answer"] for item in items})
    assert right["metrics"]["accuracy"] == 100.0 and right["metrics"]["overall_average"] == 100.0
    wrong = Mioh().score(items, {item.id: "Z" for item in items})
    assert wrong["metrics"]["accuracy"] == 0.0
    manifest = json.loads((built / "manifest.json").read_text())
    assert manifest["counts"]["questions"] == len(items)
    assert manifest["clip"]["model"] is None and "skipped" in manifest["clip"]["note"]


def test_eval_score_reads_the_build_through_the_command_line(built: Path, tmp_path: Path) -> None:
    records = records_of(built)
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("".join(json.dumps({"id": r["id"], "prediction": r["answer"]}) + "\n" for r in records))
    argv = ["eval", "score", "--benchmarks", "mioh", "--data", f"mioh={built / 'mioh.json'}"]
    assert main([*argv, "--predictions", str(predictions), "--out", str(tmp_path / "scored")]) == 0
    metrics = json.loads(next((tmp_path / "scored").rglob("metrics.json")).read_text())
    assert metrics["metrics"]["accuracy"] == 100.0 and metrics["metrics"]["overall_average"] == 100.0


# ---- Table 1, word for word


def test_the_26_templates_are_table_1_word_for_word() -> None:
    assert len(TEMPLATES) == 26
    assert Counter(t.task for t in TEMPLATES) == {"existence": 7, "attribute": 7, "counting": 5, "position": 7}
    if SEED_PAPER.is_file():
        lines = {line.strip() for line in SEED_PAPER.read_text(encoding="utf-8").splitlines()}
        for template in TEMPLATES:
            assert f"{template.pattern.capitalize()}\t{template.text}" in lines, template.text


def template_pattern(text: str) -> re.Pattern[str]:
    pattern = re.escape(text).replace("most/least", "(most|least)")
    for slot in ("object", "attribute", "subject", "anchor", "count"):
        pattern = pattern.replace(re.escape("{" + slot + "}"), f"(?P<{slot}>.+?)")
    return re.compile("^" + pattern.replace(re.escape("{relation}"), "(?P<relation>" + "|".join(RELATIONS) + ")") + "$")


def test_every_question_is_its_template_filled_in(built: Path) -> None:
    records = records_of(built)
    by_number = {t.number: t for t in TEMPLATES}
    assert {r["template"] for r in records} == set(by_number)  # all 26 question types are built
    for record in records:
        template = by_number[record["template"]]
        assert template_pattern(template.text).match(record["question"]), record["question"]
        assert (record["task"], record["pattern"]) == (template.task, template.pattern)
        options = list(record["options"].values())
        if template.layout == "yes_some_none":
            assert options == list(YES_SOME_NONE)
        elif template.layout == "images_only":
            assert options == [f"Image {n}" for n in range(1, len(record["images"]) + 1)]
        else:
            assert options[-1] == NONE_OF_THE_ABOVE and len(set(options)) == len(options)


# ---- answers recomputed from the annotations


def world_facts(world: dict[str, Path]) -> dict[str, dict]:
    """Per image file: class counts, (attribute, object) pairs and box relations, from the input files."""
    coco = json.loads(world["train_annotations"].read_text())
    names = {c["id"]: c["name"] for c in coco["categories"]}
    files = {i["id"]: i["file_name"] for i in coco["images"]}
    boxes: dict[str, dict[str, list]] = {name: {} for name in files.values()}
    for a in coco["annotations"]:
        boxes[files[a["image_id"]]].setdefault(names[a["category_id"]], []).append(a["bbox"])
    graphs = {g["image"]: g for g in json.loads(world["train_scene_graphs"].read_text())}
    facts = {}
    for image, by_class in boxes.items():
        relations = set()
        for s, s_boxes in by_class.items():
            for a, a_boxes in by_class.items():
                for sb in s_boxes if s != a else ():
                    for ab in a_boxes:
                        if sb[0] + sb[2] <= ab[0]:
                            relations.add(f"{s} to the left of {a}")
                        if ab[0] + ab[2] <= sb[0]:
                            relations.add(f"{s} to the right of {a}")
                        if sb[1] + sb[3] <= ab[1]:
                            relations.add(f"{s} above {a}")
                        if ab[1] + ab[3] <= sb[1]:
                            relations.add(f"{s} below {a}")
        attributes = {
            f"{attribute_word(phrase)} {o['object']}"
            for o in graphs[image]["objects"]
            for phrase in o["attribute"]
            if attribute_word(phrase)
        }
        facts[image] = {"counts": {k: len(v) for k, v in by_class.items()}, "attr": attributes, "rel": relations}
    return facts


def holds(facts: dict, task: str, text: str) -> bool:
    if task == "attribute":
        return text in facts["attr"]
    if task == "position":
        return text in facts["rel"]
    return facts["counts"].get(text, 0) > 0


def asked_fact(template, question: str) -> str | None:
    match = template_pattern(template.text).match(question)
    slots = match.groupdict()
    if not slots or "count" in slots and "object" not in slots:
        return None
    if template.task == "attribute":
        return f"{slots['attribute']} {slots['object']}"
    if template.task == "position":
        return f"{slots['subject']} {slots['relation']} {slots['anchor']}"
    return slots.get("object")


def true_options(record: dict, facts: dict[str, dict]) -> list[str]:
    """The letters whose option is true of the record's images (recomputed without the builder)."""
    template = next(t for t in TEMPLATES if t.number == record["template"])
    task, rule, images = template.task, template.rule, [facts[i] for i in record["images"]]
    fact = asked_fact(template, record["question"])
    count = lambda f, image: image["counts"].get(f, 0)  # noqa: E731
    options = record["options"]
    truth: dict[str, bool] = {}
    if rule in ("any", "all"):
        held = sum(holds(image, task, fact) for image in images)
        verdict = YES_SOME_NONE[0] if held == len(images) else YES_SOME_NONE[1] if held else YES_SOME_NONE[2]
        return [letter for letter, text in options.items() if text == verdict]
    for letter, text in options.items():
        if text == NONE_OF_THE_ABOVE:
            continue
        if text.startswith("Image "):
            image = images[int(text.split()[1]) - 1]
            if rule in ("select", "two_images"):
                truth[letter] = holds(image, task, fact)
            elif rule == "select_count":
                value = int(template_pattern(template.text).match(record["question"])["count"])
                truth[letter] = count(fact, image) == value
            else:  # most_least
                others = [count(fact, other) for other in images if other is not image]
                most = "most" in record["question"].rsplit(" ", 1)[-1]
                mine = count(fact, image)
                truth[letter] = all(mine > o for o in others) if most else all(mine < o for o in others)
        elif rule == "which_any":
            truth[letter] = any(holds(image, task, text) for image in images)
        elif rule == "which_all":
            truth[letter] = all(holds(image, task, text) for image in images)
        elif rule == "first_not_second":
            truth[letter] = holds(images[0], task, text) and not holds(images[1], task, text)
        elif rule == "total":
            truth[letter] = int(text) == sum(count(fact, image) for image in images)
        elif rule == "image_count":
            truth[letter] = int(text) == sum(count(fact, image) > 0 for image in images)
        elif rule == "appears_count":
            value = int(template_pattern(template.text).match(record["question"])["count"])
            truth[letter] = sum(count(text, image) for image in images) == value
    found = [letter for letter, value in truth.items() if value]
    none = [letter for letter, text in options.items() if text == NONE_OF_THE_ABOVE]
    return found or none


def test_every_answer_is_the_one_true_option(built: Path, world: dict[str, Path]) -> None:
    facts = world_facts(world)
    records = records_of(built)
    for record in records:
        assert true_options(record, facts) == [record["answer"]], record
    one_image = [r for r in records if r["template"] in (10, 22) and r["answer"] != "E"]
    for record in one_image:  # "appears in one image": the true pair or relation is in exactly one image
        text = record["options"][record["answer"]]
        task = "attribute" if record["template"] == 10 else "position"
        assert sum(holds(facts[i], task, text) for i in record["images"]) == 1


def test_counting_asks_only_about_at_most_five_instances(built: Path, world: dict[str, Path]) -> None:
    facts = world_facts(world)
    for record in records_of(built):
        if record["task"] == "counting" and record["template"] != 16:
            template = next(t for t in TEMPLATES if t.number == record["template"])
            fact = asked_fact(template, record["question"])
            assert all(facts[i]["counts"].get(fact, 0) <= 5 for i in record["images"])


# ---- balance, seeds, resumption


def test_answer_letters_are_balanced(built: Path) -> None:
    records = records_of(built)
    groups: dict[tuple, Counter] = {}
    for record in records:
        template = next(t for t in TEMPLATES if t.number == record["template"])
        size = len(record["images"]) if template.layout.startswith("images") else 0
        groups.setdefault((template.layout, size), Counter())[record["answer"]] += 1
    for (layout, size), counts in groups.items():
        letters = answerable_letters(layout, max(size, 2))
        assert set(counts) <= set(letters)
        total = sum(counts.values())
        assert max(counts.values()) <= max(total * (1 / len(letters) + 0.05), -(-total // len(letters))), counts
    assert groups[("yes_some_none", 0)]["D"] == 0  # "I don't know" is never the answer
    assert groups[("choices", 0)]["E"] > 0  # "None of the above" is sometimes the answer
    balance = json.loads((built / "manifest.json").read_text())["answer_balance"]
    assert balance["balanced"] and balance["layouts"]["yes_some_none"]["largest_share"] <= 1 / 3 + 0.05


def test_same_seed_same_file_rerun_is_a_no_op_other_seed_differs(
    built: Path, world: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    again = tmp_path / "again"
    assert main(build_args(world, again)) == 0
    assert (again / "mioh.json").read_bytes() == (built / "mioh.json").read_bytes()
    before = (again / "manifest.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main(build_args(world, again)) == 0
    assert "already holds this build" in capsys.readouterr().out
    assert (again / "manifest.json").stat().st_mtime_ns == before
    code, err = run_cli(build_args(world, again, "train", "--seed", "7"), capsys)
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1
    assert main(build_args(world, again, "train", "--seed", "7", "--force")) == 0
    assert (again / "mioh.json").read_bytes() != (built / "mioh.json").read_bytes()


# ---- leakage


def test_exclude_images_from_another_build_shares_none(world: dict[str, Path], tmp_path: Path) -> None:
    small = ("--tasks", "existence", "--num-images", "2")
    first = tmp_path / "first"
    assert main([*build_args(world, first, "train", *small), "--questions", "1"]) == 0
    used = {image for record in records_of(first) for image in record["images"]}
    out = tmp_path / "other"
    assert main(build_args(world, out, "train", *small, "--exclude-images-from", str(first))) == 0
    other = {image for record in records_of(out) for image in record["images"]}
    assert other and not other & used
    leakage = json.loads((out / "manifest.json").read_text())["leakage"]
    assert leakage["excluded_images"] == len(used) and leakage["shared_images"] == 0


def test_pressures_builds_only_those_cells_and_keeps_the_full_builds_identity(
    world: dict[str, Path], built: Path, tmp_path: Path
) -> None:
    easy = tmp_path / "easy"
    assert main(build_args(world, easy, "train", "--pressures", "easy")) == 0
    records = records_of(easy)
    assert records and {r["pressure"] for r in records} == {"easy"}
    full = [r for r in records_of(built) if r["pressure"] == "easy"]
    assert [r["id"] for r in records] == [r["id"] for r in full]  # the same cells as the full build's easy ones
    manifest = json.loads((easy / "manifest.json").read_text())
    assert manifest["settings"]["pressures"] == ["easy"] and manifest["counts"]["pressure"] == {"easy": len(records)}
    # a build of every pressure has the identity it had before the flag: rerunning it is a no-op
    assert "pressures" not in json.loads((built / "manifest.json").read_text())["build"]["settings"]


# ---- bad input and help


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--num-images", "1,4"], "error: --num-images: every set size must be at least 2"),
        (["--num-images", "two"], "error: --num-images: expected comma-separated integers"),
        (["--tasks", "colour"], "error: --tasks: unknown task 'colour'"),
        (["--questions", "0"], "error: --questions must be at least 1"),
        (["--pressures", "easy,hardest"], "error: --pressures: unknown pressure 'hardest'"),
    ],
)
def test_bad_flags_are_one_line(
    world: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    code, err = run_cli(build_args(world, tmp_path / "out", "train", *extra), capsys)
    assert code == 2 and err.startswith(message) and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_bad_input_files_are_one_line_naming_the_file(
    world: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "instances.json"
    broken.write_text(json.dumps({"images": [{"id": 1}], "annotations": [], "categories": []}))
    args = build_args(world, tmp_path / "out")
    args[args.index("--annotations") + 1] = str(broken)
    code, err = run_cli(args, capsys)
    assert code == 2 and err.strip() == f"error: {broken}: images[0] has no 'file_name'"
    graphs = tmp_path / "graphs.json"
    graphs.write_text(json.dumps([{"image": "a.jpg", "objects": [{"object": ""}]}]))
    args = build_args(world, tmp_path / "out")
    args[args.index("--scene-graphs") + 1] = str(graphs)
    code, err = run_cli(args, capsys)
    assert code == 2 and err.startswith(f"error: {graphs}: record 1") and len(err.strip().splitlines()) == 1
    no_graphs = [a for a in build_args(world, tmp_path / "out") if a != str(world["train_scene_graphs"])]
    no_graphs.remove("--scene-graphs")
    code, err = run_cli([*no_graphs, "--tasks", "attribute"], capsys)
    assert code == 2 and err.strip() == (
        "error: --tasks attribute needs --scene-graphs (FINER-layout scene graphs with attributes)"
    )
    assert not (tmp_path / "out").exists()


def test_help_is_one_short_line_per_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["build", "mioh-rft", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    from veritune.cli import build_parser

    parser = build_parser(["build", "mioh-rft"])
    command = parser._subparsers._group_actions[0].choices["build"]._subparsers._group_actions[0].choices["mioh-rft"]
    for action in command._actions:
        if action.dest == "help":
            continue
        assert action.help and "\n" not in action.help and len(action.help) <= 80, action.option_strings
        assert action.option_strings[0] in text and " ".join(action.help.split()) in text


def test_clip_pressures_use_the_clip_model(world: dict[str, Path], tmp_path: Path) -> None:
    from miniature.tiny.clip import build_tiny_clip

    clip = build_tiny_clip(tmp_path / "clip")
    out = tmp_path / "clip-build"
    extra = ("--tasks", "existence", "--clip-model", str(clip), "--clip-cache", str(tmp_path / "cache"))
    assert main(build_args(world, out, "train", *extra)) == 0
    records = records_of(out)
    by = Counter((r["pressure"], r["hard_by"]) for r in records)
    assert by[("hard_negative", "clip")] and by[("hard_negative", "cooccurrence")]
    assert by[("hard_positive", "clip")] and by[("hard_positive", "size")]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["clip"]["model"] == str(clip)

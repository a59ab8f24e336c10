"""ORIC-format training data for GRPO: prompts, resizing, length filtering and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_entry

from core.errors import UserError
from core.images import load_image
from core.prompts import with_r1_instruction
from core.sampling import sample_indices
from finetune.oric_data import get_oric_dataset, prompt_length, question_from_problem

SHARED_ORIC = Path(__file__).resolve().parent.parent.parent / "shared" / "benchmarks" / "oric"


def rewrite(path: Path, mutate) -> None:
    records = json.loads(path.read_text())
    mutate(records)
    path.write_text(json.dumps(records))


def test_prompt_wraps_question_in_r1_template(oric_fixture: tuple[Path, Path]) -> None:
    dataset, report = get_oric_dataset(*oric_fixture)
    row = dataset[0]
    assert row["prompt"] == [{"role": "user", "content": with_r1_instruction("Is there a cat in the image?")}]
    assert row["solution"] == "yes"
    assert row["image"].mode == "RGB"
    assert report.kept == report.total == 8


@pytest.mark.skipif(not SHARED_ORIC.is_dir(), reason="official ORIC files not beside the checkout")
def test_official_training_prompts_are_reproduced_exactly() -> None:
    records = json.loads((SHARED_ORIC / "oric_train.json").read_text())
    template = with_r1_instruction("{question}")
    assert all(template.format(question=question_from_problem(r["problem"])) == r["problem"] for r in records)


def test_bench_paraphrase_list_uses_first_question() -> None:
    assert question_from_problem(["Is there a cat in the image?", "Does the image contain a cat?"]) == (
        "Is there a cat in the image?"
    )


def test_images_are_resized_to_max_pixels(oric_fixture: tuple[Path, Path]) -> None:
    _, images = oric_fixture
    image = load_image(next(images.iterdir()), max_pixels=1000)
    assert image.width * image.height <= 1000
    assert abs(image.width / image.height - 96 / 80) < 0.1


def test_long_prompts_are_dropped_and_counted(oric_fixture: tuple[Path, Path], tiny_qwen3vl: Path) -> None:
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_qwen3vl)
    rewrite(oric_fixture[0], lambda records: records[0].update(problem="Is there a " + "very " * 20 + "big cat here?"))
    full, _ = get_oric_dataset(*oric_fixture, max_pixels=4096, max_prompt_length=None)
    lengths = [prompt_length(processor, row["prompt"], row["image"]) for row in full]
    limit = min(lengths)
    dataset, report = get_oric_dataset(*oric_fixture, processor=processor, max_pixels=4096, max_prompt_length=limit)
    assert len(dataset) == 7 and report.dropped_too_long == 1
    assert dataset[0]["id"] == "2"
    with pytest.raises(UserError, match="no usable training examples.*8 dropped as longer"):
        get_oric_dataset(*oric_fixture, processor=processor, max_pixels=4096, max_prompt_length=5)


def test_max_samples_is_the_seeded_uniform_subsample_of_dpo(oric_fixture: tuple[Path, Path]) -> None:
    import finetune.dpo_data

    assert finetune.dpo_data.sample_indices is sample_indices  # one helper for every trainer's max_train_samples
    path, images = oric_fixture
    ids = [str(record["id"]) for record in json.loads(path.read_text())]
    picks = []
    for seed in range(4):
        dataset, report = get_oric_dataset(path, images, max_samples=3, seed=seed)
        picks.append([row["id"] for row in dataset])
        assert picks[-1] == [ids[i] for i in sample_indices(len(ids), 3, seed)] and report.total == 3
    assert picks[0] == [row["id"] for row in get_oric_dataset(path, images, max_samples=3, seed=0)[0]]
    assert len({tuple(pick) for pick in picks}) > 1 and any(pick != ids[:3] for pick in picks)  # not the first rows


def test_grpo_passes_max_train_samples_and_the_seed(
    oric_fixture: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import finetune.grpo
    from finetune.configs import GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig
    from finetune.recipe import parse_recipe

    recipe = Path(__file__).resolve().parent.parent / "recipes" / "miniature" / "tiny_oric_demo.yaml"
    flags = ["--dataset_path", str(oric_fixture[0]), "--image_root", str(oric_fixture[1])]
    flags += ["--output_dir", str(tmp_path / "run"), "--max_train_samples", "3", "--seed", "7", "--report_to", "none"]
    flags += ["--model_name_or_path", str(tmp_path)]  # a folder that exists: the run checks it; none is loaded
    args = parse_recipe([str(recipe), *flags], (GRPOScriptArguments, VerituneGRPOConfig, VerituneModelConfig))
    seen = {}

    def capture(*_: object, **kwargs: object) -> None:
        seen.update(kwargs)
        raise KeyboardInterrupt  # stop before training

    monkeypatch.setattr(finetune.grpo, "get_model_and_processor", lambda _: (None, None, None))
    monkeypatch.setattr(finetune.grpo, "get_oric_dataset", capture)
    with pytest.raises(KeyboardInterrupt):
        finetune.grpo.main(*args)
    assert seen["max_samples"] == 3 and seen["seed"] == 7


def write_pope_file(path: Path, images: Path, count: int) -> Path:
    """``count`` questions in POPE's official JSON-lines layout about the fixture's images."""
    names = sorted(p.name for p in images.iterdir())
    lines = [
        {"question_id": i + 1, "image": names[i % len(names)], "text": "Is there an apple in the image?", "label": "no"}
        for i in range(count)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_replay_adds_conventional_questions_per_oric_question(oric_fixture: tuple[Path, Path]) -> None:
    path, images = oric_fixture
    pope = write_pope_file(path.parent / "coco_pope_random.json", images, 20)
    dataset, report = get_oric_dataset(path, images, replay_path=pope, replay_ratio=0.5, seed=3)
    replayed = [row for row in dataset if row["id"].startswith("replay/")]
    assert report.total == report.kept == 8 + 4 and len(replayed) == report.replayed == 4
    assert report.summary().startswith("12/12 examples kept (4 of them replayed conventional questions);")
    chosen = sorted(int(row["id"].rsplit("/", 1)[1]) - 1 for row in replayed)
    assert chosen == sorted(sample_indices(20, 4, 3 + 1))  # seeded, and not the ORIC subsample's draw
    row = replayed[0]
    assert row["prompt"] == [{"role": "user", "content": with_r1_instruction("Is there an apple in the image?")}]
    assert row["solution"] == "no" and row["target_object"] == "apple" and row["image"].mode == "RGB"
    assert get_oric_dataset(path, images)[1].total == 8  # off unless asked


def test_replay_asking_for_more_than_the_file_holds(oric_fixture: tuple[Path, Path]) -> None:
    path, images = oric_fixture
    pope = write_pope_file(path.parent / "coco_pope_random.json", images, 3)
    with pytest.raises(UserError, match=r"coco_pope_random.json: 3 questions, fewer than the 8 replay_ratio asks for"):
        get_oric_dataset(path, images, replay_path=pope, replay_ratio=1.0)
    with pytest.raises(UserError, match=r"replay_path: POPE file not found: .*none.json"):
        get_oric_dataset(path, images, replay_path=path.parent / "none.json")


def test_missing_dataset_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="dataset file not found"):
        get_oric_dataset(tmp_path / "none.json", tmp_path)


def test_dataset_not_json(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(UserError, match=r"bad\.json: not valid JSON \(line 1"):
        get_oric_dataset(path, tmp_path)


def test_dataset_missing_field(oric_fixture: tuple[Path, Path]) -> None:
    path, images = oric_fixture
    rewrite(path, lambda records: records[3].pop("target_object"))
    with pytest.raises(UserError, match=r"oric_train\.json: row 3 \(id 4\): missing field 'target_object'"):
        get_oric_dataset(path, images)


def test_solution_not_yes_no(oric_fixture: tuple[Path, Path]) -> None:
    path, images = oric_fixture
    rewrite(path, lambda records: records[2].update(solution="<SOLUTION>maybe</SOLUTION>"))
    with pytest.raises(UserError, match=r"row 2 \(id 3\): solution .*maybe.* is not yes or no"):
        get_oric_dataset(path, images)


def test_missing_and_unreadable_images_are_listed(oric_fixture: tuple[Path, Path]) -> None:
    path, images = oric_fixture
    names = sorted(images.iterdir())
    names[1].unlink()
    names[5].write_bytes(b"not an image")
    with pytest.raises(
        UserError, match=r"2 example\(s\) with missing or unreadable images, first: row 1 .*missing; row 5 .*unreadable"
    ):
        get_oric_dataset(path, images)
    dataset, report = get_oric_dataset(path, images, skip_bad_examples=True)
    assert len(dataset) == 6 and len(report.dropped_bad_image) == 2


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda records: records[0].update(solution="perhaps"), "row 0 (id 1): solution 'perhaps' is not yes or no"),
        (lambda records: records[1].pop("image"), "row 1 (id 2): missing field 'image'"),
    ],
)
def test_entry_point_reports_bad_data_in_one_line(
    oric_fixture: tuple[Path, Path], tiny_qwen3vl: Path, tmp_path: Path, mutate, message: str
) -> None:
    path, images = oric_fixture
    rewrite(path, mutate)
    result = run_entry(
        "grpo.py",
        "recipes/miniature/tiny_oric_demo.yaml",
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        path,
        "--image_root",
        images,
        "--output_dir",
        tmp_path / "run",
        "--report_to",
        "none",
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr

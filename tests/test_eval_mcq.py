"""FINER, MIOH, ORBIT and VLMEvalKit-TSV scorers, and the option / count graders they share, against
hand-computed values."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
from pathlib import Path

import pytest
from PIL import Image

from core.errors import UserError
from eval_hooks.answers import extract_count, extract_option
from eval_hooks.evaluate import rescore, score_benchmark
from eval_hooks.registry import get_benchmark
from eval_hooks.runner import read_predictions
from rewards.graders import extract_yes_no
from veritune.cli import main

FIVE = {letter: f"option {letter}" for letter in "ABCDE"}


# ------------------------------------------------------------------------------------------ graders


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is B", ("B", "letter")),
        ("(c)", ("C", "letter")),
        ("B. No, but I can see a red cup in this image.", ("B", "letter")),
        ("A) Image 1", ("A", "letter")),
        ("It is D.", ("D", "letter")),
        ("There is a cat.", (None, "unresolved")),
        ("option E", ("E", "letter")),
        ("F", (None, "unresolved")),  # not an option here
        ("", (None, "unresolved")),
        (None, (None, "unresolved")),
    ],
)
def test_option_letter_extraction(text: str | None, expected: tuple[str | None, str]) -> None:
    assert extract_option(text, FIVE) == expected


def test_option_text_extraction_prefers_the_longest_match() -> None:
    options = {
        "A": "Yes, I can see a cup in this image.",
        "B": "No, but I can see a red cup in this image.",
        "C": "a cup",
    }
    assert extract_option("no, but I can see a red cup in this image", options) == ("B", "option_text")
    assert extract_option("I would say a cup", options) == ("C", "option_text")


@pytest.mark.parametrize(("text", "expected"), [("Yes.", "yes"), ("No, there is not.", "no")])
def test_plain_yes_and_no_answers(text: str, expected: str) -> None:
    assert extract_yes_no(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4 [cup, cup, plate, bowl]", (4, "count_list")),
        ("There are 12 chairs.", (12, "digits")),
        ("Seven.", (7, "word")),
        ("none of them", (None, "unresolved")),  # "none" is no number word officially; scored as 0 all the same
        ("VIII", (8, "roman")),
        ("The answer is IX", (9, "roman")),
        ("I cannot tell", (1, "roman")),  # the official clean_answer_improved reads a standalone "I" as 1
        ("someone", (None, "unresolved")),  # no number word inside other words
    ],
)
def test_count_extraction(text: str, expected: tuple[int | None, str]) -> None:
    assert extract_count(text) == expected


# ------------------------------------------------------------------------------------------- FINER


def finer_rows() -> list[dict[str, str]]:
    def row(qtype: str, gt: int, k: str = "") -> dict[str, str]:
        return {
            "image": "a.jpg",
            "qtype": qtype,
            "question": f"Can you see {qtype}?",
            **{f"choice{i}": f"{qtype} choice {i}" for i in range(1, 6)},
            "gt_index": str(gt),
            "k": k,
        }

    return [
        row("multi_obj_pos", 0, "1"),
        row("multi_obj_neg", 1, "1"),
        row("multi_obj_pos", 2, "2"),
        row("multi_obj_neg", 3, "2"),
        row("wh_pos", 4),
        row("wh_neg", 0),
    ]


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_finer_paired_accuracy_per_setting_and_k(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"x")
    data = write_csv(tmp_path / "finer.csv", finer_rows())
    items = get_benchmark("finer").load(data, tmp_path)
    assert items[0].prompt.endswith(
        "E. multi_obj_pos choice 5\nPlease answer with a single capital letter (A, B, C, D, or E)."
    )
    assert items[0].max_new_tokens == 3 and [i.meta["answer"] for i in items] == ["A", "B", "C", "D", "E", "A"]
    # pair 1 (k=1): both right; pair 2 (k=2): q+ right, q- wrong; wh pair: both right (one by option text)
    answers = ["A", "B.", "The answer is C", "A", "E", "wh_neg choice 1"]
    result = get_benchmark("finer").score(items, {item.id: a for item, a in zip(items, answers)})
    metrics = result["metrics"]
    assert metrics["paired_accuracy"] == pytest.approx(200 / 3)
    assert metrics["accuracy"] == pytest.approx(500 / 6)
    assert (
        metrics["multi_obj/paired_accuracy"],
        metrics["multi_obj/k1/paired_accuracy"],
        metrics["multi_obj/k2/paired_accuracy"],
    ) == (50.0, 100.0, 0.0)
    assert metrics["wh/paired_accuracy"] == 100.0 and metrics["neg/accuracy"] == pytest.approx(200 / 3)
    assert metrics["resolved/letter"] == pytest.approx(500 / 6) and metrics["resolved/option_text"] == pytest.approx(
        100 / 6
    )
    assert result["gt_index_base"] == 0


def test_finer_pairs_must_be_consecutive_pos_then_neg(tmp_path: Path) -> None:
    rows = finer_rows()
    rows[0], rows[1] = rows[1], rows[0]
    with pytest.raises(
        UserError, match=r"finer.csv: rows 2-3: expected a <setting>_pos row followed by its <setting>_neg row"
    ):
        get_benchmark("finer").load(write_csv(tmp_path / "finer.csv", rows), tmp_path)


def test_finer_one_based_indices_are_detected(tmp_path: Path) -> None:
    rows = finer_rows()
    for row in rows:
        row["gt_index"] = str(int(row["gt_index"]) + 1)
    items = get_benchmark("finer").load(write_csv(tmp_path / "finer.csv", rows), tmp_path)
    assert [i.meta["answer"] for i in items] == ["A", "B", "C", "D", "E", "A"]


def test_finer_missing_column_names_the_layout(tmp_path: Path) -> None:
    rows = [{k: v for k, v in row.items() if k != "gt_index"} for row in finer_rows()]
    with pytest.raises(UserError, match="missing column 'gt_index'"):
        get_benchmark("finer").load(write_csv(tmp_path / "finer.csv", rows), tmp_path)


def test_finer_bench_output_scores_through_eval_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from test_finer_builder import GRAPH

    from data_builders.finer.bench import BenchSettings, build_finer_bench

    graphs = tmp_path / "graphs.json"
    graphs.write_text(json.dumps([GRAPH]))
    build_finer_bench(graphs, tmp_path / "finer.csv", BenchSettings(seed=0))
    Image.new("RGB", (8, 8)).save(tmp_path / "dog.jpg")
    items = get_benchmark("finer").load(tmp_path / "finer.csv", tmp_path)
    predictions = tmp_path / "predictions.jsonl"
    # every q+ right, every q- answered with the "Yes" option: each pair fails
    lines = [{"id": i.id, "prediction": i.meta["answer"] if i.meta["polarity"] == "pos" else "A"} for i in items]
    predictions.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert (
        main(
            [
                "eval",
                "score",
                "--benchmarks",
                "finer",
                "--data",
                f"finer={tmp_path / 'finer.csv'}",
                "--image-root",
                str(tmp_path),
                "--predictions",
                str(predictions),
            ]
        )
        == 0
    )
    printed = json.loads((tmp_path / "predictions.metrics.json").read_text())
    truth_neg_is_a = sum(i.meta["answer"] == "A" for i in items if i.meta["polarity"] == "neg")
    assert printed["metrics"]["pos/accuracy"] == 100.0
    assert printed["metrics"]["paired_accuracy"] == pytest.approx(100 * truth_neg_is_a / (len(items) // 2))
    assert {row["setting"] for row in printed["tables"]["by_setting"]} == {"multi_obj", "multi_attr", "multi_rel", "wh"}
    assert printed["metrics"]["multi_obj/k2/paired_accuracy"] in (0.0, 100.0)


# ------------------------------------------------------------------------------------------- ORBIT


def orbit_file(tmp_path: Path, answers: list[str]) -> Path:
    questions = [
        {
            "id": f"Q{n % 3 + 1}",
            "question": f"How many things {n}?",
            "answer": a,
            "property_category": "physical" if n % 2 else "taxonomic",
        }
        for n, a in enumerate(answers)
    ]
    images = [
        {
            "image_id": f"image{n // 3:02d}",
            "image_type": "REAL" if n < 3 else "ANIMATED",
            "path": f"data/{n // 3}.jpg",
            "questions": questions[n : n + 3],
        }
        for n in range(0, len(questions), 3)
    ]
    for record in images:
        (tmp_path / record["path"]).parent.mkdir(exist_ok=True)
        (tmp_path / record["path"]).write_bytes(b"x")
    path = tmp_path / "benchmark.json"
    path.write_text(
        json.dumps(
            {
                "benchmark": {
                    "question_types": {
                        "Q1": "direct_recognition",
                        "Q2": "property_inference",
                        "Q3": "counterfactual_reasoning",
                    },
                    "images": images,
                }
            }
        )
    )
    return path


def test_orbit_metrics_hand_computed(tmp_path: Path) -> None:
    data = orbit_file(tmp_path, ["3", "5", "0", "10", "2", "7"])
    items = get_benchmark("orbit").load(data, tmp_path)
    assert (
        items[0].id == "REAL/image00/Q1"
        and items[0].meta["level"] == "direct_recognition"
        and items[0].max_new_tokens == 200
    )
    answers = ["3 [a, b, c]", "four", "Nothing of the kind", "X", "There are 15 of them", "VII"]
    # predicted: 3 (right), 4 (off by 1), missing -> 0 (right), 10 (right, Roman), 15 (invalid), 7 (right)
    result = get_benchmark("orbit").score(items, {i.id: a for i, a in zip(items, answers)})
    metrics = result["metrics"]
    assert metrics["accuracy"] == pytest.approx(400 / 6)
    assert metrics["off_by_1"] == pytest.approx(500 / 6)  # 15 vs 2 is far
    errors = [0, -1, 0, 0, 13, 0]
    assert metrics["rmse"] == pytest.approx(math.sqrt(sum(e * e for e in errors) / 6))
    assert metrics["mean_error"] == pytest.approx(sum(errors) / 6)
    assert metrics["macro_accuracy"] == pytest.approx(100 * 4 / 6)  # six distinct true counts, four right
    assert result["counts"]["invalid_above_10"] == 1 and result["counts"]["unresolved_scored_as_0"] == 1
    assert (
        metrics["image_type/REAL/accuracy"] == pytest.approx(200 / 3)
        and metrics["level/counterfactual_reasoning/accuracy"] == 100.0
    )  # Q3: 0 and VII


def test_orbit_missing_image_is_never_right(tmp_path: Path) -> None:
    data = orbit_file(tmp_path, ["0", "1", "2"])
    (tmp_path / "data" / "0.jpg").unlink()
    items = get_benchmark("orbit").load(data, tmp_path)
    result = get_benchmark("orbit").score(items, {})
    assert result["metrics"]["accuracy"] == 0.0 and result["counts"]["missing_images"] == 3


def test_orbit_bad_layout_names_the_expected_fields(tmp_path: Path) -> None:
    path = tmp_path / "benchmark.json"
    path.write_text(json.dumps([{"question": "q"}]))
    with pytest.raises(UserError, match="expected ORBIT's layout"):
        get_benchmark("orbit").load(path, tmp_path)


# -------------------------------------------------------------------------------------------- MIOH


def test_mioh_table_2_averages(tmp_path: Path) -> None:
    records = []
    for n, (task, pressure, right) in enumerate(
        [
            ("existence", "easy", True),
            ("existence", "easy", False),
            ("existence", "hard_negative", True),
            ("counting", "easy", False),
            ("counting", "num_images", True),
        ]
    ):
        (tmp_path / f"{n}.jpg").write_bytes(b"x")
        records.append(
            {
                "id": f"q{n}",
                "images": [f"{n}.jpg", f"{n}.jpg"],
                "question": "Which image?",
                "options": ["Image 1", "Image 2", "None of the above"],
                "answer": "B",
                "task": task,
                "pattern": "selective" if n % 2 else "comprehensive",
                "pressure": pressure,
                "_right": right,
            }
        )
    path = tmp_path / "mioh.json"
    path.write_text(json.dumps(records))
    items = get_benchmark("mioh").load(path, tmp_path)
    assert (
        "Image 1, Image 2" in items[0].prompt
        and "C. None of the above" in items[0].prompt
        and len(items[0].images) == 2
    )
    predictions = {r["id"]: ("B" if r["_right"] else "Image 1") for r in records}
    metrics = get_benchmark("mioh").score(items, predictions)["metrics"]
    assert (metrics["existence/easy"], metrics["existence/hard_negative"], metrics["existence/average"]) == (
        50.0,
        100.0,
        75.0,
    )
    assert (metrics["counting/easy"], metrics["counting/num_images"], metrics["counting/average"]) == (0.0, 100.0, 50.0)
    assert metrics["overall_average"] == 62.5 and metrics["accuracy"] == 60.0
    assert metrics["resolved/option_text"] == 40.0  # "Image 1" matched the option text


def test_mioh_answer_must_be_an_option(tmp_path: Path) -> None:
    path = tmp_path / "mioh.json"
    path.write_text(
        json.dumps(
            [
                {
                    "id": 1,
                    "images": ["a.jpg"],
                    "question": "q",
                    "options": ["x", "y"],
                    "answer": "D",
                    "task": "existence",
                    "pattern": "selective",
                    "pressure": "easy",
                }
            ]
        )
    )
    with pytest.raises(UserError, match=r"row 0: answer 'D' is not one of the options A, B"):
        get_benchmark("mioh").load(path, tmp_path)


# ----------------------------------------------------------------------------------- VLMEvalKit TSV


def tsv_file(tmp_path: Path) -> Path:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buffer, format="JPEG")
    encoded = base64.b64encode(buffer.getvalue()).decode()
    rows = [
        {
            "index": "0",
            "image": encoded,
            "question": "What colour?",
            "A": "red",
            "B": "blue",
            "C": "green",
            "D": "",
            "answer": "A",
            "category": "colour",
            "l2-category": "perception",
        },
        {
            "index": "1",
            "image": "0",
            "question": "Is it square?",
            "A": "yes",
            "B": "no",
            "C": "",
            "D": "",
            "answer": "A",
            "category": "shape",
            "l2-category": "perception",
        },
        {
            "index": "2",
            "image": encoded,
            "question": "How many?",
            "A": "1",
            "B": "2",
            "C": "3",
            "D": "4",
            "answer": "C",
            "category": "shape",
            "l2-category": "reasoning",
        },
    ]
    path = tmp_path / "MMStar.tsv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_tsv_suite_decodes_images_and_scores_per_category(tmp_path: Path) -> None:
    items = get_benchmark("mmstar").load(tsv_file(tmp_path), None)
    names = [i.images[0].name for i in items]
    assert names[0] == names[1] and names[0].startswith("0-") and names[2].startswith("2-")  # row 1 reuses row 0's
    assert all(name.endswith(".jpg") for name in names)
    assert all(not i.missing_images for i in items) and Image.open(items[0].images[0]).size == (4, 4)
    assert "C. green\nAnswer with the option's letter (A, B, or C) only." in items[0].prompt
    result = get_benchmark("mmstar").score(items, {"0": "A", "1": "B", "2": "(C)"})
    assert result["metrics"]["accuracy"] == pytest.approx(200 / 3)
    assert result["metrics"]["category/colour"] == 100.0 and result["metrics"]["category/shape"] == 50.0
    assert {r["l2_category"]: r["accuracy"] for r in result["tables"]["by_l2_category"]} == {
        "perception": 50.0,
        "reasoning": 100.0,
    }


def test_tsv_rescore_matches_direct_scoring(tmp_path: Path) -> None:
    data = tsv_file(tmp_path)
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(
        "".join(json.dumps({"id": i, "prediction": p}) + "\n" for i, p in (("0", "A"), ("1", "B"), ("2", "C")))
    )
    direct = score_benchmark("mcq_tsv", get_benchmark("mcq_tsv").load(data, None), {"0": "A", "1": "B", "2": "C"})
    rescored = rescore("mcq_tsv", data, predictions)
    assert rescored["metrics"] == direct["metrics"] and rescored["metrics"]["answers/rules_share"] == 100.0


def test_tsv_without_answer_column_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text("index\timage\tquestion\tA\tB\n0\tx\tq\ta\tb\n")
    with pytest.raises(UserError, match="missing column 'answer'"):
        get_benchmark("mcq_tsv").load(path, None)


# ------------------------------------------------------------------- end to end with the tiny model


def test_eval_run_on_the_new_benchmarks_matches_eval_score(
    tiny_qwen3vl: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    (root / "finer").mkdir(parents=True)
    Image.new("RGB", (40, 32), "blue").save(root / "finer" / "a.jpg")
    write_csv(root / "finer" / "finer.csv", finer_rows())
    (root / "finer" / "images").mkdir()
    Image.new("RGB", (40, 32), "blue").save(root / "finer" / "images" / "a.jpg")
    (root / "orbit").mkdir()
    orbit_file(root / "orbit", ["3", "5", "0"])
    for path in (root / "orbit" / "data").iterdir():
        Image.new("RGB", (36, 36), "green").save(path, format="JPEG")
    (root / "mioh" / "images").mkdir(parents=True)
    for name in ("x.jpg", "y.jpg"):
        Image.new("RGB", (32, 40), "red").save(root / "mioh" / "images" / name)
    (root / "mioh" / "mioh.json").write_text(
        json.dumps(
            [
                {
                    "id": "m1",
                    "images": ["x.jpg", "y.jpg"],
                    "question": "Which image has a dog?",
                    "options": ["Image 1", "Image 2", "None of the above"],
                    "answer": "A",
                    "task": "existence",
                    "pattern": "selective",
                    "pressure": "easy",
                }
            ]
        )
    )
    tsv_file(root)
    out = tmp_path / "out"
    assert (
        main(
            [
                "eval",
                "run",
                "--model",
                str(tiny_qwen3vl),
                "--benchmarks",
                "finer,mioh,orbit,mmstar",
                "--data-root",
                str(root),
                "--out",
                str(out),
                "--limit",
                "4",
                "--max-new-tokens",
                "4",
                "--allow-unresolved",  # the tiny model writes no option letter or count
            ]
        )
        == 0
    )
    summary = capsys.readouterr().out
    assert "paired_accuracy" in summary and "overall_average" in summary and "macro_accuracy" in summary
    sources = {
        "finer": root / "finer",
        "mioh": root / "mioh" / "mioh.json",
        "orbit": root / "orbit" / "benchmark.json",
        "mmstar": root / "MMStar.tsv",
    }
    for name, data in sources.items():
        ran = json.loads((out / name / "metrics.json").read_text())
        predictions = out / name / "predictions.jsonl"
        assert len(read_predictions(predictions)) == ran["counts"]["predicted"] > 0
        assert ran["counts"]["missing_images"] == 0
        rescored = rescore(name, data, predictions, limit=4, allow_unresolved=True)
        assert rescored["metrics"] == ran["metrics"], name


def test_tsv_images_go_to_the_cache_when_the_folder_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tsv_file(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the image folder would go")  # mkdir under it fails, even for root
    items = get_benchmark("mmstar").load(data, blocked)
    assert (tmp_path / "cache" / "veritune" / "tsv_images") in items[0].images[0].parents and not items[
        0
    ].missing_images

"""Benchmark loaders and scorers against hand-computed values, in the official formats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import UserError
from eval_hooks.benchmarks.pope import pope_yes_no
from eval_hooks.evaluate import rescore, score_benchmark
from eval_hooks.registry import get_benchmark
from rewards.graders import extract_yes_no
from veritune.cli import main

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "benchmarks"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="official benchmark files not beside the checkout")


def oric_file(tmp_path: Path, labels: list[str], sizes: list[str | None] | None = None) -> Path:
    records = []
    for index, label in enumerate(labels):
        record = {
            "id": index + 1,
            "image": f"img{index}.jpg",
            "target_object": "cup",
            "problem": [f"q{index}-{k}?" for k in range(4)],
            "solution": label,
        }
        if sizes:
            record["object_size"] = sizes[index]
        records.append(record)
        (tmp_path / f"img{index}.jpg").write_bytes(b"x")
    path = tmp_path / "oric_bench.json"
    path.write_text(json.dumps(records))
    return path


def answers(items, by_question: dict[int, str]) -> dict[str, str]:
    return {item.id: by_question[int(item.id.split("/")[0])] for item in items}


# ---- ORIC-Bench


def test_oric_metrics_hand_computed(tmp_path: Path) -> None:
    bench = get_benchmark("oric_bench")
    items = bench.load(oric_file(tmp_path, ["yes", "yes", "yes", "no", "no"]), tmp_path)
    # yes-questions answered yes, yes, no; no-questions answered yes, "unsure" (unresolved)
    result = bench.score(
        items, answers(items, {1: "Yes.", 2: "yes", 3: "No, there is not.", 4: "Yes", 5: "I cannot tell"})
    )
    m = result["metrics"]
    assert m["yes/precision"] == pytest.approx(200 / 3)  # 2 of 3 yes-predictions right
    assert m["yes/recall"] == pytest.approx(200 / 3)
    assert m["no/precision"] == 0.0 and m["no/recall"] == 0.0  # the one "no" answer was wrong
    assert m["macro/f1"] == pytest.approx((200 / 3 + 0.0) / 2)
    assert m["yes_proportion"] == pytest.approx(60.0)
    assert result["counts"] == {"items": 20, "questions": 5, "resolved": 16, "unresolved": 4, "missing_images": 0}


@pytest.mark.parametrize(("answer", "yes_prop"), [("yes", 100.0), ("no", 0.0)])
def test_oric_all_yes_and_all_no(tmp_path: Path, answer: str, yes_prop: float) -> None:
    bench = get_benchmark("oric_bench")
    items = bench.load(oric_file(tmp_path, ["yes", "no"]), tmp_path)
    m = bench.score(items, {item.id: answer for item in items})["metrics"]
    assert m["yes_proportion"] == yes_prop
    assert m["macro/recall"] == 50.0 and m["macro/precision"] == 25.0
    assert m[f"{'no' if answer == 'yes' else 'yes'}/f1"] == 0.0  # empty predicted class: 0, not a crash


def test_oric_per_paraphrase_average_and_sizes(tmp_path: Path) -> None:
    bench = get_benchmark("oric_bench")
    items = bench.load(oric_file(tmp_path, ["yes", "yes", "no"], ["small", "large", None]), tmp_path)
    predictions = {item.id: ("yes" if item.meta["paraphrase"] < 2 else "no") for item in items}
    m = bench.score(items, predictions)["metrics"]
    assert m["p0/yes_proportion"] == 100.0 and m["p3/yes_proportion"] == 0.0
    assert m["yes_proportion"] == 50.0  # averaged over the four paraphrases
    assert m["yes_recall_small"] == 50.0 and m["yes_recall_large"] == 50.0


def test_oric_missing_images_never_correct(tmp_path: Path) -> None:
    bench = get_benchmark("oric_bench")
    path = oric_file(tmp_path, ["yes"])
    (tmp_path / "img0.jpg").unlink()
    items = bench.load(path, tmp_path)
    result = bench.score(items, {item.id: "yes" for item in items})
    assert result["metrics"]["yes/recall"] == 0.0 and result["counts"]["missing_images"] == 4


@needs_shared
def test_official_oric_bench_loads() -> None:
    items = get_benchmark("oric_bench").load(SHARED / "oric" / "oric_bench.json", SHARED)
    assert len(items) == 8000
    assert sum(item.meta["label"] == "yes" for item in items) == 4000
    assert (
        items[0].prompt
        == "Question: Is there a traffic light in the image?\nPlease answer the question based on the given image."
    )  # Fig. 7


# ---- POPE


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes, there is a car.", "yes"),
        ("No, there is not.", "no"),
        ("There is no car. Yes.", "no"),
        ("It is not present", "no"),
        ("Nope", "yes"),
        ("NO", "yes"),
        ("", "yes"),
        ("Yes. No.", "yes"),
    ],
)
def test_pope_official_parsing(text: str, expected: str) -> None:
    assert pope_yes_no(text) == expected


def pope_file(tmp_path: Path, labels: list[str]) -> Path:
    path = tmp_path / "coco_pope_random.json"
    lines = [
        json.dumps({"question_id": i + 1, "image": "a.jpg", "text": "Is there a cup in the image?", "label": lab})
        for i, lab in enumerate(labels)
    ]
    path.write_text("\n".join(lines) + "\n")
    (tmp_path / "a.jpg").write_bytes(b"x")
    return path


def test_pope_metrics_and_prediction_yes_ratio(tmp_path: Path) -> None:
    bench = get_benchmark("pope")
    items = bench.load(pope_file(tmp_path, ["yes", "yes", "no", "no"]), tmp_path)
    predictions = dict(zip([i.id for i in items], ["Yes", "No.", "Yes there is", "No"]))
    m = bench.score(items, predictions)["metrics"]
    assert m["accuracy"] == 50.0 and m["precision"] == 50.0 and m["recall"] == 50.0 and m["f1"] == 50.0  # percent
    assert m["yes_ratio"] == 50.0  # of the predictions: 2 of 4 answered yes
    all_yes = bench.score(items, {i.id: "yes" for i in items})["metrics"]
    assert all_yes["yes_ratio"] == 100.0 and all_yes["recall"] == 100.0 and all_yes["precision"] == 50.0


@needs_shared
def test_official_pope_files_load() -> None:
    items = get_benchmark("pope").load(SHARED / "pope", SHARED)
    assert len(items) == 9000
    assert {item.meta["subset"] for item in items} == {"random", "popular", "adversarial"}


# ---- extraction shared with rewards


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes.", "yes"),
        ("No, there is not.", "no"),
        ("yes", "yes"),
        ("Absolutely, yes", "yes"),
        ("<REASONING>x</REASONING><SOLUTION>no</SOLUTION>", "no"),
        ("yes or no", None),
        ("maybe", None),
        (None, None),
    ],
)
def test_yes_no_extraction(text: str | None, expected: str | None) -> None:
    assert extract_yes_no(text) == expected


# ---- eval score and bad input


def test_eval_score_cli_prints_metrics(tmp_path: Path, capsys) -> None:
    data = oric_file(tmp_path, ["yes", "no"])
    items = get_benchmark("oric_bench").load(data, tmp_path)
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("".join(json.dumps({"id": i.id, "prediction": "yes"}) + "\n" for i in items))
    assert (
        main(
            [
                "eval",
                "score",
                "--benchmarks",
                "oric_bench",
                "--data",
                f"oric_bench={data}",
                "--predictions",
                str(predictions),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == [
        "benchmark",
        "answered",
        "coverage",
        "%",
        "missing",
        "img",
        "unresolved",
        "%",
        "metric",
        "value",
    ]  # eval run's table
    # coverage (8 items, the 2 questions' paraphrases) and unresolved share
    assert lines[2].split()[:8] == ["oric_bench", "8/8", "items", "(2", "questions)", "100.00", "0", "0.00"]
    printed = json.loads((tmp_path / "predictions.metrics.json").read_text())
    assert printed["metrics"]["yes_proportion"] == 100.0
    assert printed == rescore("oric_bench", data, predictions)


def test_predictions_with_foreign_ids_are_rejected(tmp_path: Path) -> None:
    items = get_benchmark("oric_bench").load(oric_file(tmp_path, ["yes"]), tmp_path)
    with pytest.raises(UserError, match=r"2 prediction id\(s\) are not in the benchmark, first: 99/p0, 98/p1"):
        score_benchmark("oric_bench", items, {"99/p0": "yes", "98/p1": "no"})


def test_unknown_layout_names_expected_fields(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps([{"question": "Is there a cup?"}]))
    with pytest.raises(UserError, match="missing field 'id'.*id, image, target_object, problem, solution"):
        get_benchmark("oric_bench").load(path, tmp_path)
    with pytest.raises(UserError, match="expected POPE fields question_id, image, text, label"):
        get_benchmark("pope").load(path, tmp_path)


def test_unknown_benchmark() -> None:
    with pytest.raises(UserError, match="unknown benchmark 'popee'"):
        get_benchmark("popee")


# ---- HallusionBench


def hb_record(
    category: str, subcategory: str, set_id: int, figure_id: int, question_id: int, gt: str, visual: str = "1"
) -> dict:
    return {
        "category": category,
        "subcategory": subcategory,
        "visual_input": visual,
        "set_id": str(set_id),
        "figure_id": str(figure_id),
        "sample_note": "",
        "question_id": str(question_id),
        "question": "Is it so?",
        "gt_answer_details": "",
        "gt_answer": gt,
        "filename": None,
    }


def test_hallusionbench_grouping_and_vs_figure_zero_exception(tmp_path: Path) -> None:
    records = [
        hb_record("VS", "chart", 0, 0, 0, "1", visual="0"),  # image-free: in aAcc and qAcc, not in fAcc
        hb_record("VS", "chart", 0, 1, 0, "1"),
        hb_record("VS", "chart", 0, 1, 1, "0"),
        hb_record("VD", "illusion", 3, 0, 0, "1"),  # VD figure 0 is a real figure: counted in fAcc
        hb_record("VD", "illusion", 3, 1, 0, "0"),
    ]
    path = tmp_path / "HallusionBench.json"
    path.write_text(json.dumps(records))
    for r in records[1:]:
        image = tmp_path / r["category"] / r["subcategory"] / f"{r['set_id']}_{r['figure_id']}.png"
        image.parent.mkdir(parents=True, exist_ok=True)
        image.write_bytes(b"png")
    bench = get_benchmark("hallusionbench")
    items = bench.load(path, tmp_path)
    assert [bool(i.images) for i in items] == [False, True, True, True, True]
    answers = ["No.", "Yes", "No", "Yes", "Yes"]  # wrong, right, right, right, wrong
    result = bench.score(items, dict(zip([i.id for i in items], answers)))
    m = result["metrics"]
    assert m["aAcc"] == pytest.approx(60.0)
    # figures: VS_chart_0_1 (right, right) ok; VD_illusion_3_0 (right) ok; VD_illusion_3_1 (wrong) -> 2/3
    assert m["fAcc"] == pytest.approx(200 / 3)
    # pairs: VS_chart_0_0 (wrong, right) no; VS_chart_0_1 (right) ok; VD_illusion_3_0 (right, wrong) no -> 1/3
    assert m["qAcc"] == pytest.approx(100 / 3)
    assert result["counts"]["figures"] == 3 and result["counts"]["image_free"] == 1


@needs_shared
def test_official_hallusionbench_loads_all_questions() -> None:
    items = get_benchmark("hallusionbench").load(SHARED / "hallusionbench" / "HallusionBench.json", SHARED)
    assert len(items) == 1129 and sum(not item.images for item in items) == 178
    assert len({item.id for item in items}) == 1129


# ---- AMBER discriminative


def test_amber_metrics_with_no_as_positive(tmp_path: Path) -> None:
    (tmp_path / "query").mkdir()
    annotations = [{"id": i + 1, "type": "generative"} for i in range(2)] + [
        {"id": 3, "type": "discriminative-hallucination", "truth": "yes"},
        {"id": 4, "type": "discriminative-hallucination", "truth": "no"},
        {"id": 5, "type": "discriminative-attribute-state", "truth": "no"},
        {"id": 6, "type": "discriminative-relation", "truth": "yes"},
    ]
    (tmp_path / "annotations.json").write_text(json.dumps(annotations))
    queries = [{"id": i, "image": "a.jpg", "query": "Is there a cup?"} for i in (3, 4, 5, 6)]
    (tmp_path / "query" / "query_discriminative.json").write_text(json.dumps(queries))
    (tmp_path / "query" / "a.jpg").write_bytes(b"x")
    bench = get_benchmark("amber_discriminative")
    items = bench.load(tmp_path / "query" / "query_discriminative.json")
    result = bench.score(items, {"3": "Yes", "4": "No", "5": "Yes", "6": "No"})
    m = result["metrics"]  # as inference.py prints them: one decimal
    assert m["accuracy"] == round(100 * 2 / 4.001, 1) == 50.0
    assert m["precision"] == round(100 * 1 / 2.001, 1) == 50.0  # answered no: 4 (right), 6 (wrong)
    assert m["recall"] == round(100 * 1 / 2.001, 1)  # truth no: 4 (found), 5 (missed)
    assert m["f1"] == round(2 * 0.5 * 0.5 / (0.5 + 0.5 + 0.0001) * 100, 1) == 50.0
    assert m["existence/accuracy"] == round(100 * 2 / 2.001, 1) == 100.0
    assert m["relation/recall"] == 0.0  # no "no" question in the group: no division by zero


@needs_shared
def test_official_amber_queries_load() -> None:
    items = get_benchmark("amber_discriminative").load(SHARED / "amber" / "query" / "query_discriminative.json", SHARED)
    assert len(items) == 14216
    assert {item.meta["type"] for item in items} == {
        "existence",
        "attribute_state",
        "attribute_number",
        "attribute_action",
        "relation",
    }

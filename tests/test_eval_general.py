"""MME, TextVQA, ChartQA, V* Bench and the generic VLMEvalKit Y/N and VQA TSV suites: the graders they use
(VQA normalisation, ChartQA's relaxed match, MME's and VLMEvalKit's yes/no parsers), scores hand-computed
on small fixtures written in each release layout, and end-to-end runs with the tiny model; plus the
``general`` preset and the final-only benchmarks of the eval hook."""

from __future__ import annotations

import ast
import base64
import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from core.errors import UserError
from eval_hooks.benchmarks.chartqa import relaxed_match
from eval_hooks.benchmarks.mme import mme_yes_no
from eval_hooks.benchmarks.vlmeval_tsv import normalize_vqa_answer, vlmeval_yes_no, vqa_accuracy
from eval_hooks.callback import EvalHookCallback
from eval_hooks.evaluate import rescore
from eval_hooks.registry import PRESETS, get_benchmark
from veritune.cli import main


def jpeg_base64(colour: str, size: tuple[int, int] = (24, 20)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format="JPEG")
    return base64.b64encode(buffer.getvalue()).decode()


def write_tsv(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A TSV as VLMEvalKit's files are written (pandas ``to_csv(sep="\\t")``: a header, minimal quoting)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    return path


def predictions_file(path: Path, predictions: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": key, "prediction": value}) + "\n" for key, value in predictions.items()))
    return path


# ------------------------------------------------------------------------------------------ graders


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Two", "2"),  # number words become digits
        ("two", "2"),
        ("The dog", "dog"),  # articles go
        ("a Stop Sign.", "stop sign"),  # a final period goes, case folds
        ("2.5", "2.5"),  # a period before a digit stays
        ("1,000", "1000"),  # commas go
        ("coca-cola", "coca cola"),  # a hyphen inside a word becomes a space
        ("well - known", "well known"),  # next to a space it is deleted
        ("dont", "don't"),  # contractions without apostrophe are restored
        ("McDonald's", "mcdonald 's"),
        ("none", "0"),
        ("", ""),
        (None, ""),
    ],
)
def test_vqa_normalisation(text: str | None, expected: str) -> None:
    assert normalize_vqa_answer(text) == expected


@pytest.mark.parametrize(
    ("prediction", "target", "expected"),
    [
        ("105", "100", True),  # exactly 5%: right (<=)
        ("95", "100", True),
        ("105.1", "100", False),  # 5.1%: wrong
        ("0.12", "12%", True),  # a trailing % divides by 100
        ("12", "12%", False),
        ("0", "0", True),  # a zero target: exact match only
        ("0.0", "0", False),
        ("Yes", "yes", True),  # text: case-insensitive exact match
        ("yes.", "yes", False),
        ("about 100", "100", False),  # not a number: the texts differ
        (None, "1", False),
    ],
)
def test_relaxed_match(prediction: str | None, target: str, expected: bool) -> None:
    assert relaxed_match(prediction, target) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes", "yes"),
        ("no", "no"),
        ("No, there is no dog.", "no"),
        ("Not really.", "no"),  # "no" inside the first four characters, as officially
        ("I think yes.", None),  # the first four characters hold neither: "other"
        ("yesterday", "yes"),
        ("", None),
    ],
)
def test_official_mme_parser(text: str, expected: str | None) -> None:
    assert mme_yes_no(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes, it is.", "yes"),
        ("No.", "no"),
        ("I think the answer is yes", "yes"),
        ("Yes, no doubt.", None),
        ("Maybe", None),
        ("not sure", None),
    ],
)
def test_vlmevalkit_yes_no_extraction(text: str, expected: str | None) -> None:
    assert vlmeval_yes_no(text) == expected


def test_vqa_accuracy_averages_the_ten_leave_one_out_subsets() -> None:
    # 4 of 10 annotators gave the answer: every 9-subset holds at least 3 of them
    assert vqa_accuracy("2", ["two"] * 3 + ["2"] + ["three"] * 6) == 1.0
    # 2 of 10: the 2 subsets without one of them hold 1 match (1/3), the 8 others hold 2 (2/3): 0.6
    assert vqa_accuracy("Stop Sign.", ["the stop sign"] * 2 + ["stop"] * 8) == pytest.approx(0.6)
    # 1 of 10: 9 subsets with it (1/3), one without (0): 0.3
    assert vqa_accuracy("Coca-Cola", ["coca cola"] + ["pepsi"] * 9) == pytest.approx(0.3)
    assert vqa_accuracy("nothing", ["pepsi"] * 10) == 0.0
    assert vqa_accuracy("The Pepsi", ["pepsi"]) == 1.0  # one reference: a normalised exact match


# ---------------------------------------------------------------------------------------- fixtures


def mme_rows() -> list[dict[str, Any]]:
    """VLMEvalKit's MME.tsv layout: two questions per image; the second row's ``image`` cell is the index
    of the row holding the picture."""
    rows = []
    questions = [
        ("existence", "000000006040.jpg", "Is there a train in this image?", "Yes"),
        ("existence", "000000006040.jpg", "Is there a bed in this image?", "No"),
        ("existence", "000000044279.jpg", "Is there a tie in this image?", "Yes"),
        ("existence", "000000044279.jpg", "Is there a fork in this image?", "No"),
        ("code_reasoning", "0020.png", "Is a c++ code shown in the picture?", "Yes"),
        ("code_reasoning", "0020.png", "Is a python code shown in the picture?", "No"),
        ("code_reasoning", "0012.png", "The output of the code is 5?", "Yes"),
        ("code_reasoning", "0012.png", "The output of the code is 6?", "No"),
    ]
    for index, (category, image, question, answer) in enumerate(questions):
        cell = jpeg_base64(["red", "green", "blue", "white"][index // 2]) if index % 2 == 0 else str(index - 1)
        rows.append(
            {
                "index": index,
                "image": cell,
                "question": f"{question} Please answer yes or no.",
                "answer": answer,
                "category": category,
                "image_path": f"{category}/{image}",
            }
        )
    return rows


def textvqa_rows() -> list[dict[str, Any]]:
    """VLMEvalKit's TextVQA_VAL.tsv layout: the ten answers as a Python list literal."""
    answers = [
        ["two"] * 3 + ["2"] + ["three"] * 6,
        ["the stop sign"] * 2 + ["stop"] * 8,
        ["coca cola"] + ["pepsi"] * 9,
        ["nike"] * 10,
    ]
    questions = [
        "how many bottles are there?",
        "what does the sign say?",
        "what brand is the drink?",
        "what brand are the shoes?",
    ]
    return [
        {"index": 34602 + i, "image": jpeg_base64("gray"), "question": q, "answer": repr(a)}
        for i, (q, a) in enumerate(zip(questions, answers))
    ]


TEXTVQA_PREDICTIONS = {
    "34602": "Two",
    "34603": "Stop Sign.",
    "34604": "Coca-Cola",
    "34605": "adidas",
}  # 1 + 0.6 + 0.3 + 0 -> 47.5


def chartqa_rows() -> list[dict[str, Any]]:
    """VLMEvalKit's ChartQA_TEST.tsv layout: one answer per row, ``split`` human / augmented."""
    cases = [
        ("human", "What is the value of the tallest bar?", "100"),
        ("human", "What is the value in 2019?", "100"),
        ("augmented", "What share of people said yes?", "12%"),
        ("augmented", "Is the red line above the blue one?", "Yes"),
        ("augmented", "How many bars are below zero?", "0"),
    ]
    return [
        {"index": i, "image": jpeg_base64("yellow"), "question": q, "answer": a, "split": s}
        for i, (s, q, a) in enumerate(cases)
    ]


CHARTQA_PREDICTIONS = {
    "0": "105",
    "1": "105.1",
    "2": "0.12",
    "3": " yes ",
    "4": "0.0",
}  # human 1/2, augmented 2/3, overall 3/5


def vstar_rows() -> list[dict[str, Any]]:
    """VLMEvalKit's VStarBench.tsv layout (MCQ): options A-D (some empty), ``category`` the sub-task."""
    return [
        {
            "index": 0,
            "image": jpeg_base64("purple", (64, 48)),
            "question": "What is the color of the woman's bag?",
            "A": "black",
            "B": "white",
            "C": "red",
            "D": "blue",
            "answer": "C",
            "category": "direct_attributes",
        },
        {
            "index": 1,
            "image": jpeg_base64("orange", (64, 48)),
            "question": "What is the material of the glove?",
            "A": "rubber",
            "B": "cotton",
            "C": "leather",
            "D": "",
            "answer": "A",
            "category": "direct_attributes",
        },
        {
            "index": 2,
            "image": jpeg_base64("cyan", (64, 48)),
            "question": "Is the dog on the left or right side of the bicycle?",
            "A": "The dog is on the left side of the bicycle.",
            "B": "The dog is on the right side of the bicycle.",
            "C": "",
            "D": "",
            "answer": "B",
            "category": "relative_position",
        },
    ]


# --------------------------------------------------------------------------------------------- MME


def test_mme_acc_plus_needs_both_questions_of_an_image(tmp_path: Path) -> None:
    items = get_benchmark("mme").load(write_tsv(tmp_path / "MME.tsv", mme_rows()), None)
    assert (
        items[0].prompt == "Is there a train in this image? Please answer yes or no." and items[0].max_new_tokens == 16
    )
    assert items[0].images == items[1].images and not items[0].missing_images  # row 1 reuses row 0's picture
    answers = {
        "0": "Yes",
        "1": "No, there is no bed.",
        "2": "Yes",
        "3": "Yes",  # existence: 3/4 right, 1 of 2 images both right
        "4": "I think so",
        "5": "Yes",
        "6": "yes",
        "7": "NO",
    }  # code: image 1 "other" + wrong, image 2 both right
    result = get_benchmark("mme").score(items, answers)
    metrics = result["metrics"]
    assert (metrics["existence/acc"], metrics["existence/acc_plus"], metrics["existence/score"]) == (75.0, 50.0, 125.0)
    assert (metrics["code_reasoning/acc"], metrics["code_reasoning/acc_plus"], metrics["code_reasoning/score"]) == (
        50.0,
        50.0,
        100.0,
    )
    assert (metrics["perception"], metrics["cognition"], metrics["total"]) == (125.0, 100.0, 225.0)
    assert result["counts"] == {"items": 8, "images": 4, "unpaired_images": 0, "other_answers": 1, "missing_images": 0}
    assert "OCR" in result["missing_subtasks"] and "existence" not in result["missing_subtasks"]


def test_mme_official_release_folders_score_like_the_tsv(tmp_path: Path) -> None:
    release = tmp_path / "MME_Benchmark_release_version"
    tsv_rows = mme_rows()
    for index in range(
        0, 8, 2
    ):  # existence in the flat layout, code_reasoning in the images/ + questions_answers_YN/ one
        first, second = tsv_rows[index], tsv_rows[index + 1]
        task, image = first["image_path"].split("/")
        stem = Path(image).stem
        image_dir, text_dir = (
            (release / task, release / task)
            if task == "existence"
            else (release / task / "images", release / task / "questions_answers_YN")
        )
        image_dir.mkdir(parents=True, exist_ok=True)
        text_dir.mkdir(parents=True, exist_ok=True)
        (image_dir / image).write_bytes(base64.b64decode(first["image"]))
        (text_dir / f"{stem}.txt").write_text(
            f"{first['question']}\t{first['answer']}\n{second['question']}\t{second['answer']}\n\n"
        )
    items = get_benchmark("mme").load(release, None)
    assert [item.id for item in items][:2] == ["existence/000000006040/q0", "existence/000000006040/q1"]
    assert not any(item.missing_images for item in items) and items[4].images[0].parent.name == "images"
    answers = ["Yes", "No, there is no bed.", "Yes", "Yes", "I think so", "Yes", "yes", "NO"]
    from_folders = get_benchmark("mme").score(items, {item.id: a for item, a in zip(items, answers)})
    tsv_items = get_benchmark("mme").load(write_tsv(tmp_path / "MME.tsv", tsv_rows), None)
    from_tsv = get_benchmark("mme").score(tsv_items, {item.id: a for item, a in zip(tsv_items, answers)})
    assert from_folders["metrics"] == from_tsv["metrics"] and from_folders["metrics"]["total"] == 225.0
    (release / "existence" / "000000006040.txt").write_text("Is there a train?\tPerhaps\n")
    with pytest.raises(UserError, match=r"000000006040.txt: line 1: expected 'question<TAB>Yes' or 'question<TAB>No'"):
        get_benchmark("mme").load(release, None)


def test_mme_rejects_an_answer_that_is_not_yes_or_no(tmp_path: Path) -> None:
    rows = mme_rows()
    rows[3]["answer"] = "Maybe"
    with pytest.raises(UserError, match=r"MME.tsv: line 5: answer 'Maybe' is not Yes or No"):
        get_benchmark("mme").load(write_tsv(tmp_path / "MME.tsv", rows), None)


def test_generic_yes_no_tsv_scores_as_vlmevalkit_default_rating(tmp_path: Path) -> None:
    rows = [
        {
            "index": i,
            "image": jpeg_base64("red"),
            "question": f"Is it {c}?",
            "answer": a,
            "category": cat,
            "l2-category": l2,
        }
        for i, (c, a, cat, l2) in enumerate(
            [
                ("red", "Yes", "colour", "perception"),
                ("blue", "No", "colour", "perception"),
                ("round", "No", "shape", "reasoning"),
            ]
        )
    ]
    data = write_tsv(tmp_path / "suite.tsv", rows)
    items = get_benchmark("tsv_yn").load(data, None)
    result = get_benchmark("tsv_yn").score(items, {"0": "Yes, it is red.", "1": "Yes, no doubt.", "2": "No."})
    assert result["metrics"]["accuracy"] == pytest.approx(200 / 3)
    assert (result["metrics"]["category/colour"], result["metrics"]["category/shape"]) == (50.0, 100.0)
    assert (result["metrics"]["l2_category/perception"], result["metrics"]["l2_category/reasoning"]) == (50.0, 100.0)
    assert result["counts"]["unresolved"] == 1  # "Yes, no doubt." has both words: VLMEvalKit's Unknown


def test_tsv_without_an_answer_column_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_tsv(tmp_path / "bad.tsv", [{"index": 0, "image": jpeg_base64("red"), "question": "Is it red?"}])
    predictions = predictions_file(tmp_path / "p.jsonl", {"0": "yes"})
    for name in ("tsv_yn", "tsv_vqa", "mme", "textvqa", "chartqa"):
        with pytest.raises(SystemExit) as exit_info:
            main(
                [
                    "eval",
                    "score",
                    "--benchmarks",
                    name,
                    "--data",
                    name + "=" + str(data),
                    "--predictions",
                    str(predictions),
                ]
            )
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "bad.tsv: missing column 'answer'" in err and "\n" not in err


# ----------------------------------------------------------------------------------------- TextVQA


def test_textvqa_accuracy_with_normalisation(tmp_path: Path) -> None:
    items = get_benchmark("textvqa").load(write_tsv(tmp_path / "TextVQA_VAL.tsv", textvqa_rows()), None)
    assert items[0].prompt == "how many bottles are there?\nAnswer the question using a single word or phrase."
    assert len(items[0].meta["answers"]) == 10 and items[0].max_new_tokens == 32
    result = get_benchmark("textvqa").score(items, TEXTVQA_PREDICTIONS)
    assert result["metrics"]["vqa_accuracy"] == pytest.approx(47.5)
    assert result["counts"]["rows_without_10_answers"] == 0


def test_textvqa_official_json_scores_like_the_tsv(tmp_path: Path) -> None:
    (tmp_path / "train_images").mkdir()
    records = []
    for row in textvqa_rows():
        image_id = f"{row['index']:016x}"
        (tmp_path / "train_images" / f"{image_id}.jpg").write_bytes(base64.b64decode(row["image"]))
        records.append(
            {
                "question": row["question"],
                "image_id": image_id,
                "image_classes": ["Bottle"],
                "flickr_original_url": "",
                "flickr_300k_url": "",
                "image_width": 24,
                "image_height": 20,
                "answers": ast.literal_eval(row["answer"]),
                "question_tokens": row["question"].split(),
                "question_id": row["index"],
                "set_name": "val",
            }
        )
    data = tmp_path / "TextVQA_0.5.1_val.json"
    data.write_text(
        json.dumps({"dataset_type": "val", "dataset_name": "textvqa", "dataset_version": "0.5.1", "data": records})
    )
    items = get_benchmark("textvqa").load(data, None)
    assert not any(item.missing_images for item in items) and items[0].prompt.endswith(
        "\nAnswer the question using a single word or phrase."
    )
    assert get_benchmark("textvqa").score(items, TEXTVQA_PREDICTIONS)["metrics"]["vqa_accuracy"] == pytest.approx(47.5)
    del records[1]["answers"]
    data.write_text(json.dumps({"data": records}))
    with pytest.raises(UserError, match=r"data\[1\]: missing or empty field 'answers'"):
        get_benchmark("textvqa").load(data, None)


def test_generic_vqa_tsv_with_single_answers(tmp_path: Path) -> None:
    rows = [
        {"index": i, "image": jpeg_base64("red"), "question": q, "answer": a, "category": c}
        for i, (q, a, c) in enumerate(
            [("What colour?", "red", "colour"), ("How many?", "3", "count"), ("Which animal?", "a cat", "animal")]
        )
    ]
    items = get_benchmark("tsv_vqa").load(write_tsv(tmp_path / "suite.tsv", rows), None)
    result = get_benchmark("tsv_vqa").score(items, {"0": "Red.", "1": "three", "2": "dog"})
    assert result["metrics"]["vqa_accuracy"] == pytest.approx(200 / 3)
    assert (
        result["metrics"]["colour/vqa_accuracy"],
        result["metrics"]["count/vqa_accuracy"],
        result["metrics"]["animal/vqa_accuracy"],
    ) == (100.0, 100.0, 0.0)
    assert result["counts"]["single_answer_items"] == 3


# ----------------------------------------------------------------------------------------- ChartQA


def test_chartqa_relaxed_accuracy_per_split(tmp_path: Path) -> None:
    items = get_benchmark("chartqa").load(write_tsv(tmp_path / "ChartQA_TEST.tsv", chartqa_rows()), None)
    result = get_benchmark("chartqa").score(items, CHARTQA_PREDICTIONS)
    metrics = result["metrics"]
    assert metrics["relaxed_accuracy"] == pytest.approx(60.0)
    assert metrics["human/relaxed_accuracy"] == 50.0 and metrics["augmented/relaxed_accuracy"] == pytest.approx(200 / 3)
    assert [row["split"] for row in result["tables"]["by_split"]] == ["augmented", "human"]


def test_chartqa_official_json_release_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ChartQA Dataset" / "test"
    (folder / "png").mkdir(parents=True)
    Image.new("RGB", (30, 20), "white").save(folder / "png" / "two_col_1.png")
    (folder / "test_human.json").write_text(
        json.dumps([{"imgname": "two_col_1.png", "query": "What is the highest value?", "label": "48.5"}])
    )
    (folder / "test_augmented.json").write_text(
        json.dumps([{"imgname": "missing.png", "query": "Which year is lowest?", "label": "2015"}])
    )
    items = get_benchmark("chartqa").load(folder, None)
    assert [item.id for item in items] == ["human/0", "augmented/0"]
    assert not items[0].missing_images and items[1].missing_images  # a missing chart is never right
    result = get_benchmark("chartqa").score(items, {"human/0": "50", "augmented/0": "2015"})
    assert (
        result["metrics"]["human/relaxed_accuracy"] == 100.0 and result["metrics"]["augmented/relaxed_accuracy"] == 0.0
    )
    (folder / "test_human.json").write_text(json.dumps([{"imgname": "two_col_1.png", "question": "?"}]))
    with pytest.raises(UserError, match=r"test_human.json: record 0: expected ChartQA fields imgname, query, label"):
        get_benchmark("chartqa").load(folder, None)


# ---------------------------------------------------------------------------------------------- V*


def test_vstar_uses_vlmevalkit_prompt_and_scores_per_subtask(tmp_path: Path) -> None:
    items = get_benchmark("vstar").load(write_tsv(tmp_path / "VStarBench.tsv", vstar_rows()), None)
    assert items[1].prompt == (
        "Question: What is the material of the glove?\nOptions:\nA. rubber\nB. cotton\nC. leather\n"
        "Please select the correct answer from the options above. \n"
    )
    result = get_benchmark("vstar").score(
        items, {"0": "C", "1": "B. cotton", "2": "The dog is on the right side of the bicycle."}
    )
    metrics = result["metrics"]
    assert metrics["accuracy"] == pytest.approx(200 / 3)
    assert (metrics["attribute/accuracy"], metrics["spatial/accuracy"]) == (50.0, 100.0)
    assert metrics["category/direct_attributes"] == 50.0


# ------------------------------------------------------------------------------ end to end, tiny model


def test_eval_run_and_eval_score_agree_on_every_new_benchmark(
    tiny_qwen3vl: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    files = {
        "mme": write_tsv(root / "MME.tsv", mme_rows()),
        "textvqa": write_tsv(root / "TextVQA_VAL.tsv", textvqa_rows()),
        "chartqa": write_tsv(root / "ChartQA_TEST.tsv", chartqa_rows()),
        "vstar": write_tsv(root / "VStarBench.tsv", vstar_rows()),
        "tsv_yn": write_tsv(tmp_path / "other" / "yn.tsv", mme_rows()[:2]),
        "tsv_vqa": write_tsv(tmp_path / "other" / "vqa.tsv", chartqa_rows()[:2]),
    }
    out = tmp_path / "out"
    assert (
        main(
            [
                "eval",
                "run",
                "--model",
                str(tiny_qwen3vl),
                "--benchmarks",
                ",".join(files),
                "--data-root",
                str(root),
                "--data",
                f"tsv_yn={files['tsv_yn']}",
                "--data",
                f"tsv_vqa={files['tsv_vqa']}",
                "--out",
                str(out),
                "--limit",
                "4",
                "--max-new-tokens",
                "3",
                "--batch-size",
                "4",
                "--allow-unresolved",  # three tokens of a tiny random model: rarely a readable answer
            ]
        )
        == 0
    )
    summary = capsys.readouterr().out
    assert "perception" in summary and "vqa_accuracy" in summary and "relaxed_accuracy" in summary
    for name, data in files.items():
        ran = json.loads((out / name / "metrics.json").read_text())
        predictions = out / name / "predictions.jsonl"
        expected = min(4, len(data.read_text().splitlines()) - 1)
        assert (
            ran["counts"]["predicted"] == ran["counts"]["items"] == expected and ran["counts"]["missing_images"] == 0
        ), name
        assert ran["generation"]["max_new_tokens"] == 3
        assert (
            main(
                [
                    "eval",
                    "score",
                    "--benchmarks",
                    name,
                    "--data",
                    name + "=" + str(data),
                    "--predictions",
                    str(predictions),
                    "--limit",
                    "4",
                    "--allow-unresolved",
                ]
            )
            == 0
        )
        assert json.loads(predictions.with_name("predictions.metrics.json").read_text())["metrics"] == ran["metrics"], (
            name
        )
        assert rescore(name, data, predictions, limit=4, allow_unresolved=True)["metrics"] == ran["metrics"], name


# ------------------------------------------------------------------------------------ eval hook preset


def test_general_preset_expands_with_its_limit() -> None:
    hook = EvalHookCallback(["oric_bench_r1"], None, final_benchmarks=["general:50", "pope"])
    assert hook.benchmarks == ["oric_bench_r1"]
    assert hook.final_benchmarks == [*PRESETS["general"], "pope"]
    assert hook.final_limits == dict.fromkeys(PRESETS["general"], 50)
    assert set(PRESETS["general"]) == {"mmstar", "textvqa", "chartqa", "mmvp", "naturalbench", "vstar"}  # FINER Table 3


def test_final_benchmarks_run_once_after_the_final_checkpoint(
    tiny_qwen3vl: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor, TrainerControl, TrainerState, TrainingArguments

    root = tmp_path / "data"
    write_tsv(root / "MME.tsv", mme_rows())
    write_tsv(root / "VStarBench.tsv", vstar_rows())
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl, dtype="float32").train()
    processor = AutoProcessor.from_pretrained(tiny_qwen3vl)
    args = TrainingArguments(output_dir=str(tmp_path / "run"), report_to=[], use_cpu=True)
    control = TrainerControl()
    hook = EvalHookCallback(
        [], str(root), limit=2, batch_size=4, max_new_tokens=2, final_benchmarks=["mme", "vstar", "textvqa"]
    )
    state = TrainerState(max_steps=4)
    with caplog.at_level("WARNING", logger="veritune.eval"):
        hook.on_train_begin(args, state, control, processing_class=processor)
    assert (
        "final benchmark textvqa cannot run as configured" in caplog.text and "final benchmark mme" not in caplog.text
    )  # said at the start
    for step in (2, 4):  # a save mid-run evaluates nothing; the final save runs the final benchmarks
        state.global_step = step
        hook.on_save(args, state, control, model=model, processing_class=processor)
    hook.on_train_end(args, state, control, model=model, processing_class=processor)  # already done: nothing more
    eval_dir = tmp_path / "run" / "eval"
    assert sorted(p.name for p in eval_dir.iterdir()) == ["checkpoint-4"]
    assert sorted(p.name for p in (eval_dir / "checkpoint-4").iterdir()) == [
        "mme",
        "vstar",
    ]  # textvqa's file is absent: skipped
    logged = [row for row in state.log_history if "eval/mme/perception" in row]
    assert len(logged) == 1 and logged[0]["step"] == 4 and "eval/vstar/accuracy" in logged[0]
    assert model.training

    # Training that ends on an unsaved step: the final benchmarks run on the final model at the end.
    hook = EvalHookCallback([], str(root), limit=2, batch_size=4, max_new_tokens=2, final_benchmarks=["mme"])
    state = TrainerState(max_steps=5, global_step=5)
    hook.on_train_end(args, state, control, model=model, processing_class=processor)
    assert (
        json.loads((eval_dir / "checkpoint-5" / "mme" / "metrics.json").read_text())["counts"]["predicted"] == 2
    )  # limit 2: one image pair


REPO_ROOT = Path(__file__).resolve().parent.parent
FINER_RECIPES = sorted(p for p in (REPO_ROOT / "recipes").glob("*finer*.yaml") if not p.name.startswith("tiny_"))


@pytest.mark.parametrize("recipe", FINER_RECIPES, ids=lambda p: p.name)
def test_finer_recipes_run_the_general_preset_after_the_final_checkpoint(
    recipe: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from finetune import training
    from finetune.configs import DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig
    from finetune.recipe import parse_recipe

    monkeypatch.setattr(training, "configure_wandb", lambda *args: None)  # it sets W&B variables and makes output_dir
    script_args, training_args, _ = parse_recipe(
        [str(recipe), "--use_cpu", "true"], (DPOScriptArguments, VerituneDPOConfig, VerituneModelConfig)
    )
    assert script_args.eval_final_benchmarks == ["general"]
    hooks = [cb for cb in training.get_callbacks(script_args, training_args) if isinstance(cb, EvalHookCallback)]
    # one hook: the paper's hallucination suites at every save, the general preset once after the final checkpoint
    assert len(hooks) == 1 and hooks[0].final_benchmarks == list(PRESETS["general"])
    assert hooks[0].benchmarks == ["finer", "pope", "amber_discriminative", "hallusionbench"]

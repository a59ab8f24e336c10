"""The hallucination suites of FINER's Tables 2, 3, 13 and 14 (MMVP, NaturalBench, RePOPE, CRPE relation,
DASH-B, MMHal-Bench, HaloQuest): each loads a fixture written in its release layout, scores hand-computed
predictions with the official parsing edge cases, the judged ones through a real loopback chat server, and
all seven run end to end through ``veritune eval run`` with a tiny model and re-score identically through
``eval score``."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeChatServer
from helpers import REPO_ROOT
from PIL import Image

from eval_hooks.evaluate import rescore
from eval_hooks.judge import AnswerJudge
from eval_hooks.registry import get_benchmark
from eval_hooks.runner import read_predictions
from veritune.cli import main

HALOQUEST_FIXTURE = REPO_ROOT / "tests" / "fixtures" / "haloquest" / "haloquest-eval.csv"


def image(path: Path, shade: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (40 + 4 * (shade % 5), 36), (20 * shade % 255, 90, 140)).save(path)
    return path


def write_predictions(path: Path, predictions: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": key, "prediction": value}) + "\n" for key, value in predictions.items()))
    return path


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# ------------------------------------------------------------------------------- release-layout fixtures


def write_repope(root: Path) -> Path:
    """RePOPE's annotations/ folder (POPE and RePOPE files side by side) and COCO images."""
    for index in range(3):
        image(root / "coco" / f"COCO_val2014_{index:012d}.jpg", index)
    questions = [
        (1, 0, "dog", "yes"),
        (2, 0, "cat", "no"),
        (3, 1, "snowboard", "yes"),
        (4, 1, "car", "no"),
        (5, 2, "bus", "no"),
    ]
    pope = [
        {
            "question_id": q,
            "image": f"COCO_val2014_{i:012d}.jpg",
            "text": f"Is there a {o} in the image?",
            "label": label,
        }
        for q, i, o, label in questions
    ]
    repope = [
        dict(pope[0]),
        {**pope[1], "label": "yes"},
        dict(pope[3]),
        dict(pope[4]),
    ]  # 2 relabelled no -> yes, 3 removed
    jsonl(root / "annotations" / "coco_pope_random.json", pope)
    jsonl(root / "annotations" / "coco_repope_random.json", repope)
    return root / "annotations"


def write_dash(root: Path) -> Path:
    """DASH-B's images/ folder: the two JSON files and images/{neg,pos}/<source>/<object>/<file>."""
    neg, pos = (
        {"objaverse": {"dog": ["a.jpg", "b.jpg", "e.jpg"]}},
        {"objaverse": {"dog": ["c.jpg"]}, "spair": {"cat": ["d.jpg"]}},
    )
    for split, data in (("neg", neg), ("pos", pos)):
        (root / f"dash_benchmark_{split}.json").parent.mkdir(parents=True, exist_ok=True)
        (root / f"dash_benchmark_{split}.json").write_text(json.dumps(data))
        for source, objects in data.items():
            for obj, files in objects.items():
                for number, name in enumerate(files):
                    image(root / split / source / obj / name, number)
    return root


MMVP_ROWS = [
    ("Are the butterfly's wings closer to being open or closed?", "(a) Open (b) Closed", "(a)"),
    ("Are the butterfly's wings closer to being open or closed?", "(a) Open (b) Closed", "(b)"),
    ("Is the dog facing left or right from the camera's perspective?", "(a) Left (b) Right", "(a)"),
    ("Is the dog facing left or right from the camera's perspective?", "(a) Left (b) Right", "(b)"),
]


def write_mmvp(root: Path) -> Path:
    """MMVP's Questions.csv (with the release's 'lndex' header) and 'MMVP Images/<row+1>.jpg'."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / "Questions.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["lndex", "Question", "Options", "Correct Answer"])
        writer.writerows([[i + 1, *row] for i, row in enumerate(MMVP_ROWS)])
    for index in range(len(MMVP_ROWS)):
        image(root / "MMVP Images" / f"{index + 1}.jpg", index)
    return root / "Questions.csv"


def write_crpe(root: Path) -> Path:
    """crpe_relation.jsonl: two circular groups of four (exist, subject), images beside it."""
    rows = []
    for qid in range(8):
        category = "exist" if qid < 4 else "subject"
        options = ["a man", "a horse", "a dog", "a cat"]
        shift = qid % 4
        rotated = options[shift:] + options[:shift]
        text = "What is riding the bicycle?\n" + "\n".join(f"{'ABCD'[i]}. {o}" for i, o in enumerate(rotated))
        text += "\nAnswer with the option's letter from the given choices directly."
        rows.append(
            {
                "question_id": qid,
                "image": f"images/{qid // 4}.jpg",
                "text": text,
                "category": category,
                "correct_option": "ABCD"[rotated.index("a man")],
            }
        )
    image(root / "images" / "0.jpg", 0)
    image(root / "images" / "1.jpg", 1)
    return jsonl(root / "crpe_relation.jsonl", rows)


def _png_bytes(shade: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (44, 40), (shade, 50, 200)).save(buffer, format="PNG")
    return buffer.getvalue()


def write_naturalbench(root: Path) -> Path:
    """NaturalBench's parquet release (data/*.parquet, images embedded as {bytes, path})."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "Index": 0,
            "Image_0": {"bytes": _png_bytes(10), "path": None},
            "Image_1": {"bytes": _png_bytes(90), "path": None},
            "Question_0": "Is the dog asleep?",
            "Image_0_Question_0": "Yes",
            "Image_1_Question_0": "No",
            "Question_1": "Is the dog awake?",
            "Image_0_Question_1": "No",
            "Image_1_Question_1": "Yes",
            "Question_Type": "yes_no",
            "Source": "coco",
        },
        {
            "Index": 1,
            "Image_0": {"bytes": _png_bytes(150), "path": None},
            "Image_1": {"bytes": _png_bytes(220), "path": None},
            "Question_0": "Which animal is on the left? A. bird B. cat",
            "Image_0_Question_0": "A",
            "Image_1_Question_0": "B",
            "Question_1": "Which animal is on the right? A. bird B. cat",
            "Image_0_Question_1": "B",
            "Image_1_Question_1": "A",
            "Question_Type": "multiple_choice",
            "Source": "docci",
        },
    ]
    (root / "data").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), root / "data" / "train-00000-of-00001.parquet")
    return root


MMHAL_TYPES = ("attribute", "adversarial", "comparison")


def write_mmhal(root: Path) -> Path:
    """MMHal-Bench's response_template.json and images/<file name of image_src>."""
    records = []
    for index, kind in enumerate(MMHAL_TYPES):
        name = f"{1000 + index}_abc_o.jpg"
        image(root / "images" / name, index)
        records.append(
            {
                "question_type": kind,
                "question_topic": "animal",
                "image_id": f"id{index}",
                "image_src": f"https://farm1.staticflickr.com/1/{name}",
                "image_content": ["Cat", "Sofa"],
                "question": f"Question {index} about the cat?",
                "gt_answer": f"Human answer {index}.",
                "model_answer": "",
            }
        )
    path = root / "response_template.json"
    path.write_text(json.dumps(records))
    return path


def write_haloquest(root: Path) -> Path:
    """The vendored HaloQuest rows and an image per row."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(HALOQUEST_FIXTURE, root / "haloquest-eval.csv")
    with HALOQUEST_FIXTURE.open(newline="") as handle:
        for index, row in enumerate(csv.DictReader(handle)):
            image(root / "images" / row["image_name"], index)
    return root / "haloquest-eval.csv"


# --------------------------------------------------------------------------------------- scorers


def test_repope_scores_corrected_labels_and_lists_changes(tmp_path: Path) -> None:
    data = write_repope(tmp_path)
    # q1 yes; q2 "eyes" contains "yes" (RePOPE's substring parse); q4 "nothing" contains "no"; q5 unparsed
    predictions = write_predictions(
        tmp_path / "p.jsonl",
        {
            "random/1": "Yes, there is.",
            "random/2": "I see its eyes",
            "random/4": "There is nothing.",
            "random/5": "Maybe.",
        },
    )
    result = rescore("repope", data, predictions, tmp_path / "coco")
    metrics = result["metrics"]
    # RePOPE labels yes, yes, no (+ q5 unparsed, in no cell): TP 2, TN 1
    assert (metrics["accuracy"], metrics["precision"], metrics["recall"], metrics["f1"]) == (100.0,) * 4  # percent
    assert metrics["yes_ratio"] == pytest.approx(200 / 3) and result["counts"]["unparsed"] == 1
    # the same answers on POPE's original labels of the kept items (yes, no, no, no): TP 1, FP 1, TN 1
    assert metrics["pope_labels/accuracy"] == pytest.approx(200 / 3) and metrics["pope_labels/precision"] == 50.0
    assert metrics["pope_labels/f1"] == pytest.approx(200 / 3)
    changes = {(row["question_id"], row["change"]) for row in result["tables"]["changes"]}
    assert changes == {("2", "no -> yes"), ("3", "removed (was yes)")}
    assert (result["counts"]["random/relabelled_no_to_yes"], result["counts"]["random/removed"]) == (1, 1)


def test_dash_b_substring_parse_and_rates(tmp_path: Path) -> None:
    data = write_dash(tmp_path / "images")
    predictions = write_predictions(
        tmp_path / "p.jsonl",
        {
            "neg/objaverse/dog/a.jpg": "No.",  # right
            "neg/objaverse/dog/b.jpg": "I don't know",  # "know" contains "no": no, right
            "neg/objaverse/dog/e.jpg": "There are two eyes.",  # "eyes" contains "yes": yes, wrong
            "pos/objaverse/dog/c.jpg": "Yes",  # right
            "pos/spair/cat/d.jpg": "Nope.",  # no, wrong
        },
    )
    result = rescore("dash_b", data, predictions)
    metrics = result["metrics"]
    assert metrics["TNR"] == pytest.approx(200 / 3) and metrics["TPR"] == 50.0 and metrics["ACC"] == 60.0
    assert metrics["harmonic_mean"] == pytest.approx(2 * (200 / 3) * 50 / (200 / 3 + 50))
    assert metrics["objaverse/ACC"] == 75.0 and metrics["spair/ACC"] == 0.0
    items = {item.id: item for item in get_benchmark("dash_b").load(data)}
    assert items["pos/spair/cat/d.jpg"].prompt == "Can you see a cat in this image? Please answer only with yes or no."


def test_mmvp_pairs_with_rules(tmp_path: Path) -> None:
    data = write_mmvp(tmp_path)
    predictions = write_predictions(tmp_path / "p.jsonl", {"1": "(a)", "2": "(b) Closed", "3": "Left", "4": "(a) Left"})
    result = rescore("mmvp", data, predictions)
    assert result["metrics"]["pair_accuracy"] == 50.0 and result["metrics"]["question_accuracy"] == 75.0
    assert result["grading"] == "rules" and result["counts"]["pairs"] == 2


def mmvp_grader(request: dict[str, Any]) -> str:
    text = request["messages"][-1]["content"]
    answer = text.split("answer:")[-1].rstrip("?")
    return {"(a)": "yes", "(b)": "YES", "Left": "yes"}.get(answer, "Yes.")  # "Yes." is not exactly yes: undetermined


def test_mmvp_official_grader_through_the_judge(tmp_path: Path) -> None:
    data = write_mmvp(tmp_path)
    predictions = write_predictions(tmp_path / "p.jsonl", {"1": "(a)", "2": "(b)", "3": "Left", "4": "I think (a)"})
    with FakeChatServer(mmvp_grader) as server:
        result = rescore(
            "mmvp", data, predictions, judge=AnswerJudge(server.base_url, "grader-1", cache_path=tmp_path / "j.sqlite")
        )
        request = next(
            r
            for r in server.requests
            if r["messages"][1]["content"].endswith("answer:(a)?") and "butterfly" in r["messages"][1]["content"]
        )
    assert request["messages"][0] == {
        "role": "system",
        "content": "You are a helpful and precise assistant for checking the quality of the answer. "
        "Please answer in only yes or no.",
    }
    assert request["messages"][1]["content"] == (
        "Given the following question Are the butterfly's wings closer to being open or closed? (a) Open "
        "(b) Closed, the correct answer is (a). Does the following answer correctly answers the question, answer:(a)?"
    )
    assert request["temperature"] == 0.2
    assert (
        result["grading"] == "judge"
        and result["metrics"]["pair_accuracy"] == 50.0
        and result["metrics"]["question_accuracy"] == 75.0
    )
    assert result["answer_resolution"]["model"] == "grader-1" and result["answer_resolution"]["unresolved"] == 1


def test_crpe_single_letter_and_circular_groups(tmp_path: Path) -> None:
    data = write_crpe(tmp_path)
    items = get_benchmark("crpe_relation").load(data)
    right = {item.id: item.meta["answer"] for item in items}
    answers = dict(right)
    answers["5"] = right["5"] + "."  # two characters: invalid, so the whole subject group is wrong
    result = rescore("crpe_relation", data, write_predictions(tmp_path / "p.jsonl", answers))
    assert result["metrics"]["exist/accuracy"] == 100.0 and result["metrics"]["subject/accuracy"] == 0.0
    assert result["metrics"]["average"] == 50.0 and result["metrics"]["relation_average"] == 0.0
    assert result["metrics"]["total"] == 50.0  # one of the two groups
    assert result["counts"]["invalid_answers"] == 1
    lower = dict(right, **{"0": right["0"].lower()})  # case-sensitive comparison, as eval_crpe.py
    assert (
        rescore("crpe_relation", data, write_predictions(tmp_path / "q.jsonl", lower))["metrics"]["exist/accuracy"]
        == 0.0
    )


def test_naturalbench_group_rule(tmp_path: Path) -> None:
    root = write_naturalbench(tmp_path / "nb")
    items = get_benchmark("naturalbench").load(root)
    assert [item.id for item in items[:4]] == ["0/q0_i0", "0/q0_i1", "0/q1_i0", "0/q1_i1"]
    assert (
        items[0].prompt == "Is the dog asleep?Please answer Yes or No."
    )  # concatenated without a space, as officially
    assert items[0].images[0].is_file() and items[0].images[0] != items[1].images[0]
    predictions = write_predictions(
        tmp_path / "p.jsonl",
        {
            "0/q0_i0": "Yes",
            "0/q0_i1": "No, it isn't.",
            "0/q1_i0": "no",
            "0/q1_i1": "Yes and no",  # yes comes first: yes
            "1/q0_i0": "A",
            "1/q0_i1": "B",
            "1/q1_i0": "A bird sits there, so B",  # the article "A" comes first: A, wrong
            "1/q1_i1": "a",
        },
    )
    metrics = rescore("naturalbench", root, predictions)["metrics"]
    assert (metrics["Acc"], metrics["Q_Acc"], metrics["I_Acc"], metrics["G_Acc"]) == (87.5, 75.0, 75.0, 50.0)
    assert metrics["yes_no/G_Acc"] == 100.0 and metrics["multiple_choice/G_Acc"] == 0.0


def mmhal_judge(request: dict[str, Any]) -> str:
    text = request["messages"][-1]["content"]
    assert len(request["messages"]) == 1 and "max_tokens" not in request and request["temperature"] == 0.0
    if "Question 0 about" in text:
        return "The response is accurate.\nRating: 5, very informative, no hallucination"
    if "Question 1 about" in text:
        return "It invents a dog. Rating: 2"
    return "Rating: 4 or maybe rating: 3"  # two ratings: 0, as summarize_gpt_mmhal.py


def test_mmhal_judge_rubric_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = write_mmhal(tmp_path / "mmhal")
    predictions = write_predictions(tmp_path / "p.jsonl", {str(i): f"Answer {i}." for i in range(3)})
    with pytest.raises(SystemExit) as exit_info:  # no judge: one line, exit 2
        main(
            [
                "eval",
                "score",
                "--benchmarks",
                "mmhal",
                "--data",
                "mmhal" + "=" + str(data),
                "--predictions",
                str(predictions),
            ]
        )
    assert exit_info.value.code == 2 and "mmhal: scored by an LLM judge" in capsys.readouterr().err
    with FakeChatServer(mmhal_judge) as server:
        command = [
            "eval",
            "score",
            "--benchmarks",
            "mmhal",
            "--data",
            "mmhal" + "=" + str(data),
            "--predictions",
            str(predictions),
            "--judge-base-url",
            server.base_url,
            "--judge-model",
            "gpt-4.1-mini",
            "--judge-cache",
            str(tmp_path / "j.sqlite"),
        ]
        assert main(command) == 0
        first = json.loads((tmp_path / "p.metrics.json").read_text())
        prompt = next(
            r["messages"][0]["content"] for r in server.requests if "Question 0 about" in r["messages"][0]["content"]
        )
        assert main(command) == 0 and len(server.requests) == 3  # the rerun comes from the cache
    assert prompt.startswith("Please act as an impartial and objective judge")
    assert prompt.endswith(
        "### Image Contents\nCat, Sofa\n\n### Question\nQuestion 0 about the cat?\n\n"
        "### Standard Human-Generated Answer\n"
        "Human answer 0.\n\n### LMM Response to Evaluate\nAnswer 0.\n"
    )
    metrics = first["metrics"]
    assert metrics["score"] == pytest.approx(7 / 3) and metrics["hallucination_rate"] == pytest.approx(200 / 3)
    assert (metrics["attribute/score"], metrics["adversarial/score"], metrics["comparison/score"]) == (5, 2, 0)
    assert first["answer_resolution"]["model"] == "gpt-4.1-mini" and first["answer_resolution"]["mode"] == "rubric"
    assert "Rating: 2" in first["answer_resolution"]["reviews"]["1"]
    assert json.loads((tmp_path / "p.metrics.json").read_text())["metrics"] == metrics


def haloquest_judge(request: dict[str, Any]) -> str:
    text = request["messages"][-1]["content"]
    response = text.split("model_response=")[1].split("\n")[0]
    if response == "There is no such thing.":
        return '```json\n{"question": "q", "is_prediction_correct": true}\n```'
    if response == "Blue.":
        return '{"is_prediction_correct": false}'
    return "I am not sure."  # no field: unresolved, wrong


def test_haloquest_judge_scores_per_subset(tmp_path: Path) -> None:
    data = write_haloquest(tmp_path / "hq")
    ids = [row[""] for row in csv.DictReader(HALOQUEST_FIXTURE.open(newline=""))]  # 0, 1, 84, 360, 366, 375
    answers = [
        "There is no such thing.",
        "Blue.",
        "There is no such thing.",
        "Blue.",
        "There is no such thing.",
        "Hmm.",
    ]
    predictions = write_predictions(tmp_path / "p.jsonl", dict(zip(ids, answers)))
    with FakeChatServer(haloquest_judge) as server:
        result = rescore(
            "haloquest",
            data,
            predictions,
            judge=AnswerJudge(server.base_url, "gemini-2.0-flash", cache_path=tmp_path / "j.sqlite"),
        )
        prompt = next(
            r["messages"][-1]["content"] for r in server.requests if "the girl wearing" in r["messages"][-1]["content"]
        )
    assert prompt.startswith(
        "Your task is to determine if the model response is correct given the question and groundtruth response.\n"
    )
    assert (
        "\nquestion=What type of shoes is the girl wearing?,\nmodel_response=There is no such thing.\n"
        "groundtruth_response=The girl's shoes" in prompt
    )
    metrics = result["metrics"]
    # rows: 0 generated/insufficient (right), 1 generated/false premises (wrong), 84 generated/visual (right),
    # 360 real/insufficient (wrong), 366 real/false premises (right), 375 real/visual (unresolved: wrong)
    assert metrics["score"] == 50.0
    assert (
        metrics["false_premises/score"],
        metrics["visual_challenge/score"],
        metrics["insufficient_context/score"],
    ) == (50.0, 50.0, 50.0)
    assert (metrics["generated/score"], metrics["real/score"]) == (pytest.approx(200 / 3), pytest.approx(100 / 3))
    assert result["answer_resolution"]["model"] == "gemini-2.0-flash" and result["answer_resolution"]["unresolved"] == 1


def test_haloquest_loads_the_official_eval_file() -> None:

    official = REPO_ROOT.parent / "shared" / "benchmarks" / "haloquest" / "haloquest-eval.csv"
    if not official.is_file():
        pytest.skip("the shared benchmark files are not here")
    items = get_benchmark("haloquest").load(official)
    kinds = [item.meta["hallucination_type"] for item in items]
    assert len(items) == 608 and (
        kinds.count("false premises"),
        kinds.count("visual challenge"),
        kinds.count("insufficient context"),
    ) == (304, 183, 121)


def test_bad_release_files_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "Questions.csv"
    bad.write_text("Question,Options\nIs it?,(a) yes (b) no\n")
    predictions = write_predictions(tmp_path / "p.jsonl", {})
    for name, path, expected in (
        ("mmvp", bad, "row 1: expected MMVP columns Question, Options, Correct Answer"),
        ("crpe_relation", jsonl(tmp_path / "c.jsonl", [{"question_id": 1}]), "line 1: expected CRPE fields"),
        ("dash_b", tmp_path, "dash_benchmark_neg.json not found"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(
                [
                    "eval",
                    "score",
                    "--benchmarks",
                    name,
                    "--data",
                    name + "=" + str(path),
                    "--predictions",
                    str(predictions),
                ]
            )
        err = capsys.readouterr().err
        assert (
            exit_info.value.code == 2
            and expected in err
            and "Traceback" not in err
            and len(err.strip().splitlines()) == 1
        )


# ---------------------------------------------------------------------------------------- end to end


def any_judge(request: dict[str, Any]) -> str:
    text = request["messages"][-1]["content"]
    if "Does the following answer correctly answers the question" in text:
        return "yes" if len(text) % 2 else "no"
    if "Rating: 6, very informative" in text:
        return f"Rating: {len(text) % 7}"
    return json.dumps({"is_prediction_correct": len(text) % 2 == 0})


def test_all_seven_run_end_to_end_and_rescore(
    tiny_qwen3vl: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {
        "repope": write_repope(tmp_path / "repope"),
        "dash_b": write_dash(tmp_path / "dash" / "images"),
        "mmvp": write_mmvp(tmp_path / "mmvp"),
        "crpe_relation": write_crpe(tmp_path / "crpe"),
        "naturalbench": write_naturalbench(tmp_path / "nb"),
        "mmhal": write_mmhal(tmp_path / "mmhal"),
        "haloquest": write_haloquest(tmp_path / "hq"),
    }
    images = {"repope": tmp_path / "repope" / "coco"}
    names = ",".join(data)
    out = tmp_path / "out"
    with FakeChatServer(any_judge) as server:
        judge = [
            "--judge-base-url",
            server.base_url,
            "--judge-model",
            "judge-e2e",
            "--judge-cache",
            str(tmp_path / "j.sqlite"),
        ]
        # --data for each benchmark; RePOPE's COCO images are under their own root, so it runs on its own
        assert (
            main(
                [
                    "eval",
                    "run",
                    "--model",
                    str(tiny_qwen3vl),
                    "--benchmarks",
                    names.replace("repope,", ""),
                    "--out",
                    str(out),
                    "--max-new-tokens",
                    "4",
                    *[f"--data={k}={v}" for k, v in data.items() if k != "repope"],
                    *judge,
                    "--allow-unresolved",  # four tokens of a tiny random model: NaturalBench reads none
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "eval",
                    "run",
                    "--model",
                    str(tiny_qwen3vl),
                    "--benchmarks",
                    "repope",
                    "--out",
                    str(out),
                    "--max-new-tokens",
                    "4",
                    "--data",
                    f"repope={data['repope']}",
                    "--image-root",
                    str(images["repope"]),
                ]
            )
            == 0
        )
        sent = len(server.requests)
        capsys.readouterr()
        expected_items = {
            "repope": 4,
            "dash_b": 5,
            "mmvp": 4,
            "crpe_relation": 8,
            "naturalbench": 8,
            "mmhal": 3,
            "haloquest": 6,
        }
        for name, count in expected_items.items():
            run = json.loads((out / name / "metrics.json").read_text())
            assert (
                run["counts"]["items"] == count
                and run["counts"]["predicted"] == count
                and run["counts"]["missing_images"] == 0
            ), name
            assert len(read_predictions(out / name / "predictions.jsonl")) == count
            extra = ["--image-root", str(images[name])] if name in images else []
            # the judge's options only where it judges: for a benchmark scored by its rules alone they are refused
            uses_judge = AnswerJudge.applies_to(get_benchmark(name))
            assert (
                main(
                    [
                        "eval",
                        "score",
                        "--benchmarks",
                        name,
                        "--data",
                        name + "=" + str(data[name]),
                        "--predictions",
                        str(out / name / "predictions.jsonl"),
                        *extra,
                        *(judge if uses_judge else []),
                        "--allow-unresolved",
                    ]
                )
                == 0
            )
            assert json.loads((out / name / "predictions.metrics.json").read_text())["metrics"] == run["metrics"], name
        assert len(server.requests) == sent  # re-scoring asked the judge nothing new
    for name in ("mmvp", "mmhal", "haloquest"):
        assert json.loads((out / name / "metrics.json").read_text())["answer_resolution"]["model"] == "judge-e2e"
    assert re.search(r"\d", json.dumps(json.loads((out / "naturalbench" / "metrics.json").read_text())["metrics"]))


def test_naturalbench_json_layout_and_partial_groups(tmp_path: Path) -> None:
    rows = [
        {
            "Index": 7,
            "Image_0": "a.png",
            "Image_1": "b.png",
            "Question_0": "Is it red?",
            "Question_1": "Is it blue?",
            "Image_0_Question_0": "Yes",
            "Image_1_Question_0": "No",
            "Image_0_Question_1": "No",
            "Image_1_Question_1": "Yes",
            "Question_Type": "yes_no",
        }
    ]
    image(tmp_path / "a.png", 1)
    image(tmp_path / "b.png", 2)
    path = tmp_path / "naturalbench.json"
    path.write_text(json.dumps(rows))
    items = get_benchmark("naturalbench").load(path)
    assert [item.images[0].name for item in items] == ["a.png", "b.png", "a.png", "b.png"] and not any(
        i.missing_images for i in items
    )
    result = rescore(
        "naturalbench",
        path,
        write_predictions(tmp_path / "p.jsonl", {"7/q0_i0": "yes", "7/q0_i1": "no"}),
        limit=2,
        limit_mode="first",  # the stratified limit never cuts a group; the first two items do
    )
    assert result["counts"]["incomplete_groups"] == 1 and result["metrics"]["G_Acc"] == 0.0  # a cut group is left out


def test_mmvp_limit_leaves_a_cut_pair_out(tmp_path: Path) -> None:
    data = write_mmvp(tmp_path)
    result = rescore(
        "mmvp",
        data,
        write_predictions(tmp_path / "p.jsonl", {"1": "(a)", "2": "(b)", "3": "(a)"}),
        limit=3,
        limit_mode="first",  # the stratified limit never cuts a pair; the first three questions do
    )
    assert (result["counts"]["pairs"], result["counts"]["incomplete_pairs"], result["metrics"]["pair_accuracy"]) == (
        1,
        1,
        100.0,
    )


def test_training_hook_refuses_judged_suites() -> None:
    from core.errors import UserError
    from eval_hooks.callback import EvalHookCallback

    with pytest.raises(UserError, match="haloquest: scored by an LLM judge"):
        EvalHookCallback(["pope", "haloquest:20"], "data")
    EvalHookCallback(["pope", "dash_b", "mmvp"], "data")  # the others need no judge


def test_eval_run_refuses_judged_suites_without_a_judge_before_loading_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = {
        "dash_b": write_dash(tmp_path / "dash" / "images"),
        "mmhal": write_mmhal(tmp_path / "mmhal"),
        "haloquest": write_haloquest(tmp_path / "hq"),
    }
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "eval",
                "run",
                "--model",
                str(tmp_path / "no-model"),
                "--benchmarks",
                ",".join(data),
                "--out",
                str(tmp_path / "x"),
                *[f"--data={k}={v}" for k, v in data.items()],
            ]
        )
    assert exit_info.value.code == 2 and "mmhal, haloquest: scored by an LLM judge" in capsys.readouterr().err

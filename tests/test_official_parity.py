"""Scorers against the benchmarks' own scoring code: each test holds a case where a plausible scorer departs
from the official one, with the figure the official script prints."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from eval_hooks.answers import extract_count
from eval_hooks.registry import get_benchmark
from rewards.graders import grade_tagged_yes_no
from rewards.oric import accuracy_reward
from veritune.cli import main

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "benchmarks"
ORBIT_RELEASE = Path(__file__).resolve().parent / "data" / "orbit"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="official benchmark files not beside the checkout")


def write_jsonl(path: Path, rows: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": key, "prediction": value}) + "\n" for key, value in rows.items()))
    return path


def score(capsys: pytest.CaptureFixture[str], name: str, *args: str) -> dict:
    """``veritune eval score`` of one benchmark (``name --data PATH --predictions FILE ...``); its metrics file."""
    args_list = list(args)
    data = args_list[args_list.index("--data") + 1]
    args_list[args_list.index("--data") + 1] = f"{name}={data}"
    predictions = Path(args_list[args_list.index("--predictions") + 1])
    capsys.readouterr()
    assert main(["eval", "score", "--benchmarks", name, *args_list]) == 0
    return json.loads(predictions.with_name(f"{predictions.stem}.metrics.json").read_text())


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err and "Traceback" not in err
    return err


# ------------------------------------------------------------------------------------------- ORBIT


@pytest.fixture(scope="module")
def orbit_release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """The official benchmark.json and the released Qwen2.5-VL-7B results (tests/data/orbit, unchanged)."""
    root = tmp_path_factory.mktemp("orbit")
    benchmark = root / "benchmark.json"
    benchmark.write_bytes(gzip.decompress((ORBIT_RELEASE / "benchmark.json.gz").read_bytes()))
    results = json.loads(gzip.decompress((ORBIT_RELEASE / "Qwen2.5-VL_7b_results.json.gz").read_bytes()))
    return benchmark, results


def test_orbit_ids_are_unique_on_the_official_file(orbit_release: tuple[Path, list[dict]]) -> None:
    items = get_benchmark("orbit").load(orbit_release[0])
    assert len(items) == 1080 and len({item.id for item in items}) == 1080  # image_id/Q alone gives 360
    assert items[0].id == "REAL/image01/Q1"
    assert {i.id.split("/")[0] for i in items} == {"REAL", "ANIMATED", "AI_GENERATED"}


def test_orbit_released_qwen25vl_7b_results_reproduce_table_2(
    orbit_release: tuple[Path, list[dict]], tmp_path: Path, capsys
) -> None:
    benchmark, results = orbit_release
    # the released file, keyed by veritune's ids; the raw answers are re-read by the grader
    predictions = write_jsonl(
        tmp_path / "predictions.jsonl",
        {f"{r['image_type']}/{r['image_id']}/{r['question_id']}": r["raw_answer"] for r in results},
    )
    assert len(results) == 1080
    metrics = score(capsys, "orbit", "--data", str(benchmark), "--predictions", str(predictions))["metrics"]
    table_2 = {"accuracy": 38.70, "macro_accuracy": 31.57, "rmse": 1.88, "mean_error": -0.62, "off_by_1": 70.28}
    assert {key: round(metrics[key], 2) for key in table_2} == table_2
    # the grader agrees with the official clean_answer_improved on every released answer
    items = {item.id: item for item in get_benchmark("orbit").load(benchmark)}
    assert all(str(extract_count(r["raw_answer"])[0] or 0) == r["model_answer"] for r in results)
    assert all(
        items[f"{r['image_type']}/{r['image_id']}/{r['question_id']}"].meta["answer"] == int(r["ground_truth"])
        for r in results
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("iii", (3, "roman")),
        ("V cups", (5, "roman")),
        ("There are XII", (12, "roman")),
        ("eleven", (11, "word")),  # beyond ten: read, then invalid, never 0
        ("I think there are three", (1, "roman")),  # the official quirk: a standalone "I" reads as 1
        ("ninety", (90, "tens_word")),
        ("2.5 [a, b]", (5, "count_list")),  # the first "<digits> [..]" wins over the first digits
        ("nothing here", (None, "unresolved")),  # scored as 0, as officially
    ],
)
def test_orbit_extraction_is_clean_answer_improved(text: str, expected: tuple[int | None, str]) -> None:
    assert extract_count(text) == expected


def test_orbit_eleven_is_invalid_and_eleven_for_ten_is_off_by_one(tmp_path: Path) -> None:
    images = [
        {
            "image_id": "image01",
            "image_type": "REAL",
            "path": "a.jpg",
            "questions": [
                {"id": "Q1", "question": "How many?", "answer": "10"},
                {"id": "Q2", "question": "How many?", "answer": "0"},
            ],
        }
    ]
    (tmp_path / "a.jpg").write_bytes(b"x")
    (tmp_path / "benchmark.json").write_text(json.dumps({"benchmark": {"images": images}}))
    bench = get_benchmark("orbit")
    items = bench.load(tmp_path / "benchmark.json")
    result = bench.score(items, {"REAL/image01/Q1": "11", "REAL/image01/Q2": "eleven"})
    assert result["metrics"]["accuracy"] == 0.0 and result["counts"]["invalid_above_10"] == 2
    assert result["metrics"]["off_by_1"] == 50.0  # 11 for a true 10 is within one, as the official code counts it
    assert result["metrics"]["mean_error"] == pytest.approx((1 + 11) / 2)  # "eleven" is 11, never 0


def test_duplicate_orbit_ids_are_refused_naming_the_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    image = {
        "image_id": "image01",
        "image_type": "REAL",
        "path": "a.jpg",
        "questions": [{"id": "Q1", "question": "How many?", "answer": "1"}],
    }
    (tmp_path / "benchmark.json").write_text(json.dumps({"benchmark": {"images": [image, dict(image)]}}))
    write_jsonl(tmp_path / "p.jsonl", {"REAL/image01/Q1": "1"})
    err = refused(
        capsys,
        "eval",
        "score",
        "--benchmarks",
        "orbit",
        "--data",
        "orbit=" + str(tmp_path / "benchmark.json"),
        "--predictions",
        str(tmp_path / "p.jsonl"),
    )
    assert "'REAL/image01/Q1' occurs more than once" in err and "benchmark.json" in err


def test_duplicate_ids_are_refused_for_every_benchmark(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = {
        "id": 7,
        "image": "a.jpg",
        "target_object": "cup",
        "problem": ["Is there a cup in the image?"],
        "solution": "yes",
    }
    data = tmp_path / "oric" / "oric_bench.json"
    data.parent.mkdir()
    data.write_text(json.dumps([record, record]))
    # eval run refuses before any model loads (the model path does not exist)
    err = refused(
        capsys,
        "eval",
        "run",
        "--model",
        str(tmp_path / "no-model"),
        "--benchmarks",
        "oric_bench",
        "--data-root",
        str(tmp_path),
        "--out",
        str(tmp_path / "out"),
    )
    assert "oric_bench:" in err and "'7/p0' occurs more than once" in err


# ------------------------------------------------------------------------------------------- AMBER


def amber_files(root: Path, truths: list[tuple[str, str]]) -> Path:
    """An AMBER query file and annotations: ``truths`` are ``(type, truth)`` per discriminative question."""
    (root / "query").mkdir(parents=True)
    annotations = [{"id": 1, "type": "generative", "truth": [], "hallu": []}]
    annotations += [{"id": n + 2, "type": kind, "truth": truth} for n, (kind, truth) in enumerate(truths)]
    (root / "annotations.json").write_text(json.dumps(annotations))
    queries = [
        {"id": n + 2, "image": "AMBER_1.jpg", "query": "Is there a cup in this image?"} for n in range(len(truths))
    ]
    (root / "query" / "query_discriminative.json").write_text(json.dumps(queries))
    (root / "query" / "AMBER_1.jpg").write_bytes(b"x")  # the image root defaults to the query file's folder
    return root / "query" / "query_discriminative.json"


def test_amber_yes_dot_scores_zero_officially_and_is_a_recorded_veritune_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kinds = [
        ("discriminative-hallucination", "yes"),
        ("discriminative-hallucination", "no"),
        ("discriminative-relation", "no"),
    ]
    data = amber_files(tmp_path, kinds)
    predictions = write_jsonl(tmp_path / "p.jsonl", {"2": "Yes.", "3": "No.", "4": "No."})
    common = ["amber_discriminative", "--data", str(data), "--predictions", str(predictions)]
    strict = score(capsys, *common, "--strict-official")
    assert strict["metrics"]["accuracy"] == 0.0 and strict["metrics"]["f1"] == 0.0 and strict["strict_official"] is True
    assert (
        strict["answer_normalisation"]["mode"] == "strict_official"
        and strict["answer_normalisation"]["unresolved"] == 3
    )
    normalised = score(capsys, *common)
    assert normalised["metrics"]["accuracy"] == 100.0 and normalised["metrics"]["existence/accuracy"] == 100.0
    assert (
        normalised["answer_normalisation"]["normalised"] == 3
        and normalised["metrics"]["normalisation/normalised_share"] == 100.0
    )
    assert normalised["metrics"]["normalisation/exact_share"] == 0.0


def test_amber_f1_from_rounded_precision_and_recall_with_the_official_constants(tmp_path: Path) -> None:
    # existence: 9 "no" questions answered No (right), 4 "yes" questions answered No (wrong):
    # precision round(9 / 13.001 * 100, 1) = 69.2, recall round(9 / 9.001 * 100, 1) = 100.0;
    # F1 = round(2 * .692 * 1 / (.692 + 1 + 0.001) * 100, 1) = 81.7 (unrounded: 81.81 -> 81.8)
    data = amber_files(
        tmp_path, [("discriminative-hallucination", "no")] * 9 + [("discriminative-hallucination", "yes")] * 4
    )
    bench = get_benchmark("amber_discriminative")
    items = bench.load(data)
    metrics = bench.score(items, {item.id: "No" for item in items})["metrics"]
    assert (metrics["existence/precision"], metrics["existence/recall"], metrics["existence/f1"]) == (69.2, 100.0, 81.7)
    assert metrics["f1"] == 81.8  # the overall F1 adds 0.0001, as officially
    assert metrics["accuracy"] == round(9 / 13.001 * 100, 1) == 69.2


def test_amber_attribute_group_sums_the_three_attribute_counters(tmp_path: Path) -> None:
    kinds = [
        ("discriminative-attribute-state", "no"),
        ("discriminative-attribute-number", "yes"),
        ("discriminative-attribute-action", "no"),
    ]
    bench = get_benchmark("amber_discriminative")
    items = bench.load(amber_files(tmp_path, kinds))
    metrics = bench.score(items, {"2": "No", "3": "Yes", "4": "Yes"})["metrics"]
    assert metrics["attribute/accuracy"] == round(2 / 3.003 * 100, 1)  # three counters, each starting at 0.001
    assert metrics["attribute/recall"] == round(1 / 2.003 * 100, 1)


def test_strict_official_refuses_a_judge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = amber_files(tmp_path, [("discriminative-hallucination", "yes")])
    write_jsonl(tmp_path / "p.jsonl", {"2": "Yes"})
    err = refused(
        capsys,
        "eval",
        "score",
        "--benchmarks",
        "amber_discriminative",
        "--data",
        "amber_discriminative" + "=" + str(data),
        "--predictions",
        str(tmp_path / "p.jsonl"),
        "--strict-official",
        "--judge-base-url",
        "http://127.0.0.1:9/v1",
        "--judge-model",
        "m",
    )
    assert "--strict-official" in err


# ---------------------------------------------------------------------------------- HallusionBench


@needs_shared
def test_hallusionbench_uncertain_without_the_figure_is_correct(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = SHARED / "hallusionbench" / "HallusionBench.json"
    items = get_benchmark("hallusionbench").load(data, tmp_path)
    answers = {item.id: "Yes" if item.meta["gt_answer"] == "1" else "No" for item in items}
    answers["VS_chart_0_0_0"] = "I don't know"
    result = score(
        capsys, "hallusionbench", "--data", str(data), "--predictions", str(write_jsonl(tmp_path / "p.jsonl", answers))
    )
    assert (result["metrics"]["aAcc"], result["metrics"]["qAcc"], result["metrics"]["fAcc"]) == (100.0, 100.0, 100.0)
    assert result["counts"]["uncertain"] == 1
    # a wrong (not uncertain) answer there is still wrong, and uncertain on a figure is wrong
    truth = {item.id: item.meta["gt_answer"] for item in items}
    answers["VS_chart_0_0_0"] = "No" if truth["VS_chart_0_0_0"] == "1" else "Yes"
    wrong = score(
        capsys, "hallusionbench", "--data", str(data), "--predictions", str(write_jsonl(tmp_path / "p.jsonl", answers))
    )
    assert wrong["metrics"]["aAcc"] == pytest.approx(100 * 1128 / 1129)
    answers["VS_chart_0_0_0"], answers["VS_chart_0_1_0"] = (
        "Yes" if truth["VS_chart_0_0_0"] == "1" else "No",
        "I don't know",
    )
    on_figure = score(
        capsys, "hallusionbench", "--data", str(data), "--predictions", str(write_jsonl(tmp_path / "p.jsonl", answers))
    )
    assert on_figure["metrics"]["aAcc"] == pytest.approx(100 * 1128 / 1129)


# ------------------------------------------------------------------------------------- ORIC-Bench


def oric_bench_file(tmp_path: Path) -> Path:
    record = {
        "id": 1,
        "image": "a.jpg",
        "target_object": "cup",
        "problem": ["Is there a cup in the image?"],
        "solution": "yes",
    }
    (tmp_path / "a.jpg").write_bytes(b"x")
    (tmp_path / "oric_bench.json").write_text(json.dumps([record]))
    return tmp_path / "oric_bench.json"


@pytest.mark.parametrize(
    "answer",
    [
        "yes",
        "Yes, there is a cup.",
        "<SOLUTION>yes</SOLUTION><SOLUTION>no</SOLUTION>",
        "<SOLUTION>yes or no</SOLUTION>",
    ],
)
def test_oric_bench_r1_uses_the_training_grader(tmp_path: Path, answer: str) -> None:
    assert (
        accuracy_reward([answer], ["yes"]) == [0.0] and grade_tagged_yes_no(answer) is None
    )  # unverifiable in training
    bench = get_benchmark("oric_bench_r1")
    items = bench.load(oric_bench_file(tmp_path), tmp_path)
    result = bench.score(items, {items[0].id: answer})
    assert (
        result["counts"]["unresolved"] == 1
        and result["metrics"]["yes/recall"] == 0.0
        and result["metrics"]["yes_proportion"] == 0.0
    )
    right = bench.score(items, {items[0].id: "<REASONING>a cup</REASONING><SOLUTION>yes</SOLUTION>"})
    assert right["metrics"]["yes/recall"] == 100.0


def test_oric_bench_prompts_and_token_limit_are_the_papers(tmp_path: Path) -> None:
    data = oric_bench_file(tmp_path)
    default, cot = (get_benchmark(name).load(data, tmp_path)[0] for name in ("oric_bench", "oric_bench_cot"))
    assert (
        default.prompt == "Question: Is there a cup in the image?\nPlease answer the question based on the given image."
    )  # Fig. 7
    assert (
        cot.prompt == "Question: Is there a cup in the image?\n"
        "Let's think step-by-step and then answer the question based on the given image."
    )  # Fig. 12
    assert default.max_new_tokens == cot.max_new_tokens == 1024  # Sec. 4.1
    assert (
        get_benchmark("oric_bench_cot").score([cot], {cot.id: "The cup is on the table, so yes."})["metrics"][
            "yes/recall"
        ]
        == 100.0
    )

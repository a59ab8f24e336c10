"""Numbers that cannot silently lie: predictions that miss items, missing images and a wrong image root are
refused (exit 2, one ``error:`` line) unless ``--allow-partial`` / ``eval_allow_partial``, which scores the
answered items only and labels the result partial; the scores never depend on the images being on disk; the
console table shows coverage; ``--image-root`` takes ``NAME=PATH``; ``OUT/results.json`` and its report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from eval_fixtures import write_oric_bench
from test_amber_generative import amber_dir

from core.errors import UserError
from eval_hooks.callback import EvalHookCallback, flat_metrics
from eval_hooks.paths import parse_image_roots
from eval_hooks.results import results_record
from veritune.cli import main

POPE_LABELS = ("yes", "no", "yes", "no", "yes", "no")


def pope_file(tmp_path: Path) -> tuple[Path, Path]:
    """A six-question POPE file (``random`` subset) and the folder holding its images."""
    images = tmp_path / "val2014"
    images.mkdir(parents=True)
    rows = []
    for index, label in enumerate(POPE_LABELS, start=1):
        (images / f"{index}.jpg").write_bytes(b"x")
        rows.append({"question_id": index, "image": f"{index}.jpg", "text": "Is there a cup?", "label": label})
    path = tmp_path / "coco_pope_random.json"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path, images


def write_predictions(path: Path, answers: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": key, "prediction": text}) + "\n" for key, text in answers.items()))
    return path


def score(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """``veritune eval score ARGS``: exit code, stdout, stderr."""
    try:
        code = main(["eval", "score", *map(str, args)])
    except SystemExit as stop:
        code = int(stop.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


RIGHT = {f"random/{i}": "Yes" if label == "yes" else "No" for i, label in enumerate(POPE_LABELS, start=1)}
ONE_WRONG = {**RIGHT, "random/6": "Yes"}
FIRST_TWO = {key: RIGHT[key] for key in ("random/1", "random/2")}

# (case, predictions, --allow-partial, exit code, POPE metrics or the error's words, coverage: answered share)
POPE_CASES = [
    ("complete", ONE_WRONG, False, 0, {"accuracy": 100 * 5 / 6, "yes_ratio": 100 * 4 / 6}, 100.0),
    ("complete, allow-partial changes nothing", ONE_WRONG, True, 0, {"accuracy": 100 * 5 / 6}, 100.0),
    (
        "partial: refused",
        FIRST_TWO,
        False,
        2,
        "pope: the predictions answer 2 of 6 items (4 unanswered, first: random/3, random/4, random/5, random/6)",
        None,
    ),
    # the four unanswered items are not scored (they were counted as "yes": accuracy 66.7, recall 100)
    ("partial: allowed", FIRST_TWO, True, 0, {"accuracy": 100.0, "recall": 100.0, "yes_ratio": 50.0}, 100 / 3),
    ("nothing answered", {}, False, 2, "pope: none of the 6 items is answered by the predictions", None),
    ("nothing answered, allow-partial", {}, True, 2, "pope: none of the 6 items is answered", None),
]


@pytest.mark.parametrize(
    ("case", "answers", "allow", "code", "expected", "share"), POPE_CASES, ids=[c[0] for c in POPE_CASES]
)
def test_eval_score_refuses_partial_predictions_and_labels_allowed_ones(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    answers: dict[str, str],
    allow: bool,
    code: int,
    expected: dict[str, float] | str,
    share: float | None,
) -> None:
    data, images = pope_file(tmp_path)
    predictions = write_predictions(tmp_path / "predictions.jsonl", answers)
    base = ["--benchmarks", "pope", "--data", f"pope={data}", "--predictions", predictions]
    outcomes = []
    # the same numbers whatever the images: none, a wrong root, the right one (plain or pope=PATH)
    for roots in (
        [],
        ["--image-root", tmp_path / "nowhere"],
        ["--image-root", images],
        ["--image-root", f"pope={images}"],
    ):
        returned, out, err = score(capsys, *base, *roots, *(["--allow-partial"] if allow else []))
        assert returned == code, err
        if code:
            assert err.startswith("error: ") and err.count("\n") == 1 and expected in err
            continue
        result = json.loads((tmp_path / "predictions.metrics.json").read_text())
        outcomes.append({"metrics": result["metrics"], "coverage": result["coverage"]})
        assert result["partial"] is (share < 100) and result["coverage"]["answered_share"] == pytest.approx(share)
        assert {key: result["metrics"][key] for key in expected} == pytest.approx(expected)
        row = next(line for line in out.splitlines() if line.startswith("pope"))
        assert row.startswith("pope (partial)" if share < 100 else "pope ")
        assert f"{result['coverage']['answered']}/6" in row and f"{share:.2f}" in row
    assert all(outcome == outcomes[0] for outcome in outcomes)


# (case, AMBER generative answers, --allow-partial, exit code, metrics or the error's words)
AMBER_CASES = [
    # item 1 answered, hallucinating a cat; item 2 unanswered was counted as clean (Hal 50, Cog 33.3)
    ("one of two answered: refused", {"1": "A cat."}, False, 2, "amber_generative: the predictions answer 1 of 2"),
    ("one of two answered: allowed", {"1": "A cat."}, True, 0, {"CHAIR": 100.0, "Hal": 100.0, "Cog": 50.0}),
    ("no predictions: CHAIR is not 0", {}, True, 2, "amber_generative: none of the 2 items is answered"),
]


@pytest.mark.parametrize(("case", "answers", "allow", "code", "expected"), AMBER_CASES, ids=[c[0] for c in AMBER_CASES])
def test_amber_generative_never_counts_unanswered_items_as_clean(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
    answers: dict[str, str],
    allow: bool,
    code: int,
    expected: dict[str, float] | str,
) -> None:
    root = amber_dir(tmp_path)
    predictions = write_predictions(tmp_path / "amber.jsonl", answers)
    returned, _, err = score(
        capsys,
        "--benchmarks",
        "amber_generative",
        "--data",
        f"amber_generative={root / 'query' / 'query_generative.json'}",
        "--predictions",
        predictions,
        *(["--allow-partial"] if allow else []),
    )
    assert returned == code, err
    if code:
        assert err.count("\n") == 1 and expected in err
    else:
        metrics = json.loads((tmp_path / "amber.metrics.json").read_text())["metrics"]
        assert {key: metrics[key] for key in expected} == pytest.approx(expected)


def test_console_table_shows_unresolved_share_in_one_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, _ = write_oric_bench(tmp_path / "data", questions=2)
    ids = [f"{q}/p{p}" for q in (1, 2) for p in range(4)]
    predictions = write_predictions(
        tmp_path / "oric.jsonl", {key: "maybe" for key in ids[:4]} | dict.fromkeys(ids[4:], "yes")
    )
    code, out, err = score(
        capsys, "--benchmarks", "oric_bench", "--data", f"oric_bench={data}", "--predictions", predictions
    )
    assert code == 0, err
    header, _, first, *rest = out.splitlines()
    assert header.split()[:8] == ["benchmark", "answered", "coverage", "%", "missing", "img", "unresolved", "%"]
    # what is counted: 8 items, the 2 questions' 4 paraphrases each; four of the eight answers unreadable
    assert first.split()[:8] == ["oric_bench", "8/8", "items", "(2", "questions)", "100.00", "0", "50.00"]
    values = [line.split()[-1] for line in [first, *rest] if line.strip() and not line.startswith("oric_bench.metrics")]
    values = [value for value in values if not value.endswith(".jsonl") and "/" not in value]
    assert values and all(re.fullmatch(r"-?\d+\.\d\d", value) for value in values), values


# (benchmark, limit, what the coverage says is counted)
UNIT_CASES = [
    ("oric_bench_r1", 2, "8/8 items (2 questions)"),  # a question asked in four paraphrases: four items
    ("pope", None, "6/6 items"),  # one item per question: nothing more to say
    ("finer_yn", 2, "4/4 items (2 pairs)"),  # --limit counts q+/q- pairs there
]


@pytest.mark.parametrize(("name", "limit", "text"), UNIT_CASES, ids=[c[0] for c in UNIT_CASES])
def test_coverage_names_what_it_counts(tmp_path: Path, name: str, limit: int | None, text: str) -> None:
    from test_eval_limits import write_finer_yn

    from eval_hooks.coverage import coverage_text
    from eval_hooks.evaluate import score_benchmark
    from eval_hooks.prepare import prepare_benchmark

    data = {
        "oric_bench_r1": lambda: write_oric_bench(tmp_path, questions=4)[0],
        "pope": lambda: pope_file(tmp_path)[0],
        "finer_yn": lambda: write_finer_yn(tmp_path, {1: 3, 2: 3}),
    }[name]()
    prepared = prepare_benchmark(name, data={name: data}, limit=limit)
    answers = {item.id: "<SOLUTION>yes</SOLUTION>" if name == "oric_bench_r1" else "Yes" for item in prepared.items}
    result = score_benchmark(name, prepared.items, answers)
    assert coverage_text(result["coverage"]) == text
    assert result["coverage"]["units"] == prepared.selection["units"]  # the unit --limit counts
    assert flat_metrics(name, result)[f"eval/{name}/coverage/units"] == prepared.selection["units"]
    record = results_record({name: result}, {})
    from veritune.report import eval_summary_rows

    assert eval_summary_rows(record)[0]["answered"] == text


# ---------------------------------------------------------------------------------------------- unresolved answers

CUT_OFF = "<REASONING> The image shows"  # a GRPO model's reasoning, cut off by a 3-token budget: never graded


@pytest.mark.parametrize("allow", [False, True])
def test_a_mostly_unresolved_result_is_refused_or_labelled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], allow: bool
) -> None:
    data, _ = write_oric_bench(tmp_path / "data", questions=4)
    ids = [f"{q}/p{p}" for q in range(1, 5) for p in range(4)]
    # 9 of 16 cut off (56.25%, above the 50% limit); the rest graded
    answers = {key: CUT_OFF for key in ids[:9]} | {key: "<SOLUTION>yes</SOLUTION>" for key in ids[9:]}
    predictions = write_predictions(tmp_path / "r1.jsonl", answers)
    base = ["--benchmarks", "oric_bench_r1", "--data", f"oric_bench_r1={data}", "--predictions", predictions]
    code, out, err = score(capsys, *base, *(["--allow-unresolved"] if allow else []))
    if not allow:
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        for words in (
            "oric_bench_r1: 9 of 16 answers (56.25%) are unresolved",
            "above the 50% limit",
            "likely cause: answers cut off by the generation budget (--max-new-tokens",
            "add --allow-unresolved",
        ):
            assert words in err, err
        assert not (tmp_path / "r1.metrics.json").exists()
        return
    assert code == 0, err
    result = json.loads((tmp_path / "r1.metrics.json").read_text())
    assert result["mostly_unresolved"] is True and result["coverage"]["mostly_unresolved"] is True
    assert (result["coverage"]["unresolved"], result["coverage"]["unresolved_limit"]) == (9, 50.0)
    assert next(line for line in out.splitlines() if line.startswith("oric_bench_r1")).startswith(
        "oric_bench_r1 (mostly unresolved)"
    )
    assert flat_metrics("oric_bench_r1", result)["eval/oric_bench_r1/coverage/mostly_unresolved"] == 1.0
    record = results_record({"oric_bench_r1": result}, {})
    assert record["mostly_unresolved"] == ["oric_bench_r1"] and record["results"]["oric_bench_r1"]["mostly_unresolved"]


def test_at_the_limit_a_result_is_scored_unlabelled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, _ = write_oric_bench(tmp_path / "data", questions=4)
    ids = [f"{q}/p{p}" for q in range(1, 5) for p in range(4)]
    answers = {key: CUT_OFF for key in ids[:8]} | {key: "<SOLUTION>no</SOLUTION>" for key in ids[8:]}  # 50.00%
    predictions = write_predictions(tmp_path / "r1.jsonl", answers)
    code, _, err = score(
        capsys, "--benchmarks", "oric_bench_r1", "--data", f"oric_bench_r1={data}", "--predictions", predictions
    )
    assert code == 0, err
    result = json.loads((tmp_path / "r1.metrics.json").read_text())
    assert result["coverage"]["unresolved_share"] == 50.0 and result["mostly_unresolved"] is False


def test_hook_scores_and_labels_a_mostly_unresolved_checkpoint_and_training_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers import _AnswerBackend
    from transformers import TrainerControl, TrainerState, TrainingArguments

    data, images = write_oric_bench(tmp_path / "data", questions=2)

    class Model:  # what the hook asks of the live model when the backend is given
        training = True

        def eval(self) -> None:
            self.training = False

        def train(self, mode: bool = True) -> None:
            self.training = mode

    hook = EvalHookCallback(["oric_bench_r1"], None, data={"oric_bench_r1": str(data)}, image_root=str(images))
    monkeypatch.setattr(hook, "make_backend", lambda *args: _AnswerBackend(lambda item: CUT_OFF))
    args = TrainingArguments(output_dir=str(tmp_path / "run"), report_to=[], use_cpu=True)
    state, control = TrainerState(max_steps=4), TrainerControl()
    hook.on_train_begin(args, state, control, processing_class=object())
    state.global_step = 2
    model = Model()
    with caplog.at_level("WARNING", logger="veritune.eval"):
        hook.on_save(args, state, control, model=model, processing_class=object())
    metrics = json.loads((tmp_path / "run" / "eval" / "checkpoint-2" / "oric_bench_r1" / "metrics.json").read_text())
    assert metrics["mostly_unresolved"] is True and metrics["coverage"]["unresolved_share"] == 100.0
    assert state.log_history[-1]["eval/oric_bench_r1/coverage/mostly_unresolved"] == 1.0
    assert "eval/oric_bench_r1/status/failed" not in state.log_history[-1] and not hook.failed
    assert "oric_bench_r1: 8 of 8 answers (100.00%) are unresolved" in caplog.text
    assert "scored anyway, labelled mostly unresolved" in caplog.text and model.training


# ---------------------------------------------------------------------------------------------- --image-root


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["imgs"], {None: Path("imgs")}),
        (["pope=a"], {"pope": Path("a")}),
        (["imgs", "pope=a"], {None: Path("imgs"), "pope": Path("a")}),
        (["data/x=y"], {None: Path("data/x=y")}),  # a path whose folder holds "=" stays a path
        (["a", "b"], "a second plain path"),
        (["popee=a"], "'popee' is not among the benchmarks being evaluated"),
        (["pope="], "expected BENCHMARK=PATH"),
    ],
)
def test_image_root_takes_name_equals_path(values: list[str], expected: dict | str) -> None:
    if isinstance(expected, str):
        with pytest.raises(UserError, match=re.escape(expected)):
            parse_image_roots(values, benchmarks=["pope", "oric_bench"])
    else:
        assert parse_image_roots(values, benchmarks=["pope", "oric_bench"]) == expected


@pytest.mark.parametrize(
    ("roots", "allow", "error"),
    [
        # every image missing: refused before the model loads (even with --allow-partial: nothing to answer)
        (["WRONG"], False, "oric_bench: 12 of 12 items have missing images"),
        (["oric_bench=WRONG"], True, "nothing can be answered"),
        # one image missing: refused, or allowed as partial (then the model is loaded: here, none is there)
        (["oric_bench=ONE_GONE"], False, "add --allow-partial"),
        (["oric_bench=ONE_GONE"], True, "no-model: no such directory"),
        (["oric_bench=RIGHT"], False, "no-model: no such directory"),  # the images were found: on to the model
        (["RIGHT", "pope=WRONG"], False, "'pope' is not among the benchmarks being evaluated"),
    ],
)
def test_eval_run_checks_images_before_loading_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], roots: list[str], allow: bool, error: str
) -> None:
    data, images = write_oric_bench(tmp_path / "data", questions=3)
    gone = tmp_path / "gone"
    gone.mkdir()
    for path in sorted(images.iterdir())[1:]:
        (gone / path.name).write_bytes(path.read_bytes())
    places = {"WRONG": tmp_path / "nowhere", "RIGHT": images, "ONE_GONE": gone}
    arguments = [
        "eval", "run", "--model", str(tmp_path / "no-model"), "--benchmarks", "oric_bench",
        "--data", f"oric_bench={data}", "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    for root in roots:
        name, sep, place = root.rpartition("=")
        arguments += ["--image-root", f"{name}{sep}{places[place]}"]
    with pytest.raises(SystemExit) as stop:
        main([*arguments, *(["--allow-partial"] if allow else [])])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1 and error in err, err
    if "WRONG" in roots[0]:
        assert "nowhere" in err and "COCO_val2014_000000000000.jpg" in err  # counts and the first paths


# ---------------------------------------------------------------------------------------------- the eval hook


@pytest.mark.parametrize(
    ("root", "allow", "error"),
    [
        ("WRONG", False, "have missing images"),
        ("WRONG", True, "nothing can be answered: check eval_image_root"),
        ("ONE_GONE", False, "or add eval_allow_partial: true"),
        ("ONE_GONE", True, None),
        ("RIGHT", False, None),
    ],
)
def test_hook_checks_images_before_the_first_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, root: str, allow: bool, error: str | None
) -> None:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    data, images = write_oric_bench(tmp_path / "data", questions=3)
    gone = tmp_path / "gone"
    gone.mkdir()
    for path in sorted(images.iterdir())[1:]:
        (gone / path.name).write_bytes(path.read_bytes())
    places = {"WRONG": tmp_path / "nowhere", "RIGHT": images, "ONE_GONE": gone}
    hook = EvalHookCallback(
        ["oric_bench"], None, data={"oric_bench": str(data)}, image_root=str(places[root]), allow_partial=allow
    )
    args = TrainingArguments(output_dir=str(tmp_path / "run"), report_to=[], use_cpu=True)
    with caplog.at_level("WARNING", logger="veritune.eval"):
        if error:
            with pytest.raises(UserError, match=re.escape(error)):
                hook.on_train_begin(args, TrainerState(), TrainerControl())
        else:
            hook.on_train_begin(args, TrainerState(), TrainerControl())
    assert ("eval_allow_partial: true: labelled partial" in caplog.text) is (root == "ONE_GONE" and allow)


def test_hook_scores_partial_when_allowed_and_logs_later_faults_as_failed(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor, TrainerControl, TrainerState, TrainingArguments

    data, images = write_oric_bench(tmp_path / "data", questions=3)
    (images / "COCO_val2014_000000000000.jpg").unlink()
    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl, dtype="float32")
    processor = AutoProcessor.from_pretrained(tiny_qwen3vl)
    args = TrainingArguments(output_dir=str(tmp_path / "run"), report_to=[], use_cpu=True)
    hook = EvalHookCallback(
        ["oric_bench"],
        None,
        data={"oric_bench": str(data)},
        image_root=str(images),
        max_new_tokens=2,
        allow_partial=True,
    )
    state, control = TrainerState(max_steps=4), TrainerControl()
    hook.on_train_begin(args, state, control, processing_class=processor)
    state.global_step = 1
    hook.on_save(args, state, control, model=model, processing_class=processor)
    metrics = json.loads((tmp_path / "run" / "eval" / "checkpoint-1" / "oric_bench" / "metrics.json").read_text())
    assert metrics["partial"] is True and (metrics["coverage"]["answered"], metrics["coverage"]["expected"]) == (8, 12)
    logged = state.log_history[-1]
    assert logged["eval/oric_bench/coverage/partial"] == 1.0 and logged["eval/oric_bench/coverage/answered_share"] == (
        pytest.approx(200 / 3)
    )
    # a fault after the start (every image gone): a failed evaluation, logged as such, never a score; training goes on
    for path in images.iterdir():
        path.unlink()
    state.global_step = 2
    hook.on_save(args, state, control, model=model, processing_class=processor)
    assert not (tmp_path / "run" / "eval" / "checkpoint-2" / "oric_bench" / "metrics.json").exists()
    assert state.log_history[-1] == {"eval/oric_bench/status/failed": 1.0, "step": 2}


def test_wrong_eval_image_root_stops_training_before_its_first_step(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from conftest import write_oric_fixture
    from helpers import run_entry

    train, train_images = write_oric_fixture(tmp_path / "train")
    write_oric_bench(tmp_path / "bench", questions=2)
    (tmp_path / "elsewhere").mkdir()  # a folder that exists (a missing one is refused before the model loads)
    result = run_entry(
        "grpo.py",
        "recipes/miniature/tiny_oric_demo.yaml",
        "--model_name_or_path", tiny_qwen3vl, "--dataset_path", train, "--image_root", train_images,
        "--output_dir", tmp_path / "run", "--max_steps", "2", "--save_steps", "1", "--report_to", "none",
        "--eval_on_save", "true", "--eval_benchmarks", "oric_bench_r1", "--eval_data_root", tmp_path / "bench",
        "--eval_image_root", tmp_path / "elsewhere",
    )  # fmt: skip
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-2000:]
    assert "oric_bench_r1: 8 of 8 items have missing images" in errors[0] and "eval_image_root" in errors[0]
    assert not list((tmp_path / "run").glob("checkpoint-*"))


# ---------------------------------------------------------------------------------------------- results.json


def test_results_record_carries_coverage_settings_and_selection() -> None:
    result = {
        "metrics": {"accuracy": 75.0, "random/accuracy": 75.0, "macro/f1": 70.0},
        "counts": {"items": 4},
        "partial": True,
        "coverage": {"expected": 8, "answered": 4, "answered_share": 50.0, "missing_images": 4},
        "strict_official": False,
        "data": {"path": "p", "image_root": None, "limit": 8},
        "selection": {"limit": 8, "seed": 3, "per_subset": {"random": 8}},  # recorded by the run when it limits
    }
    record = results_record({"pope": result, "oric_bench": {**result, "partial": False}}, {"model": "m", "seed": 3})
    pope = record["results"]["pope"]
    assert pope["metrics"] == {"accuracy": 75.0, "macro/f1": 70.0} and pope["coverage"] == result["coverage"]
    assert (
        pope["selection"] == result["selection"] and pope["limit"] == 8 and pope["metrics_file"] == "pope/metrics.json"
    )
    assert record["partial"] == ["pope"] and record["config"] == {"model": "m", "seed": 3}
    assert record["veritune_version"] and "date" in record and "git_commit" in record
    assert (
        "selection"
        not in results_record({"x": {k: v for k, v in result.items() if k != "selection"}}, {})["results"]["x"]
    )
    flat = flat_metrics("pope", result)
    assert flat["eval/pope/coverage/partial"] == 1.0 and flat["eval/pope/coverage/answered"] == 4.0

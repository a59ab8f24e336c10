"""The optional LLM judge, against a real loopback chat-completions server: it resolves only what the
rules cannot, is cached (a rerun sends nothing), and judges HallusionBench against gt_answer_details."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeChatServer
from test_eval_mcq import finer_rows, write_csv

from core.errors import UserError
from eval_hooks.evaluate import rescore
from eval_hooks.judge import AnswerJudge
from veritune.cli import main


def user_text(request: dict[str, Any]) -> str:
    return request["messages"][-1]["content"]


def mcq_judge(request: dict[str, Any]) -> str:
    text = user_text(request)
    if "the second one" in text:
        return "B"
    return "none"


def write_predictions(path: Path, predictions: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": key, "prediction": value}) + "\n" for key, value in predictions.items()))
    return path


def test_judge_resolves_only_unresolved_answers_and_is_cached(tmp_path: Path) -> None:
    (tmp_path / "a.jpg").write_bytes(b"x")
    data = write_csv(tmp_path / "finer.csv", finer_rows())
    # answers: A (rule), "the second one" (judge -> B, right), C (rule), "hmm" (judge: none), E (rule), A (rule)
    predictions = write_predictions(
        tmp_path / "p.jsonl",
        {
            "finer/0": "A",
            "finer/1": "I pick the second one",
            "finer/2": "C",
            "finer/3": "hmm",
            "finer/4": "E",
            "finer/5": "A",
        },
    )
    with FakeChatServer(mcq_judge) as server:
        judge = AnswerJudge(server.base_url, "judge-1", cache_path=tmp_path / "judge.sqlite")
        result = rescore("finer", data, predictions, tmp_path, judge=judge)
        assert len(server.requests) == 2  # only the two answers the rules leave unresolved
        assert "Options:\nA. multi_obj_neg choice 1" in user_text(server.requests[0])
        rerun = rescore(
            "finer",
            data,
            predictions,
            tmp_path,
            judge=AnswerJudge(server.base_url, "judge-1", cache_path=tmp_path / "judge.sqlite"),
        )
        assert len(server.requests) == 2  # the rerun is answered from the cache
    resolution = result["answer_resolution"]
    assert (resolution["model"], resolution["rules"], resolution["unresolved"], resolution["judge_share"]) == (
        "judge-1",
        4,
        1,
        pytest.approx(100 / 6),
    )
    assert result["metrics"]["multi_obj/k1/paired_accuracy"] == 100.0  # the judged "second one" completed pair 1
    assert result["metrics"]["multi_obj/k2/paired_accuracy"] == 0.0
    assert rerun["metrics"] == result["metrics"]
    without = rescore("finer", data, predictions, tmp_path)
    assert without["metrics"]["multi_obj/k1/paired_accuracy"] == 0.0
    assert (without["answer_resolution"]["mode"], without["answer_resolution"]["unresolved"]) == ("rules_only", 2)
    assert without["answer_resolution"]["unresolved_share"] == pytest.approx(100 / 3)


def hallusion_file(tmp_path: Path) -> Path:
    records = [
        {
            "category": "VS",
            "subcategory": "chart",
            "visual_input": "0",
            "set_id": "0",
            "figure_id": "0",
            "question_id": str(q),
            "question": f"Is it {q}?",
            "gt_answer_details": f"It is {q}." if truth == "1" else "It is something else.",
            "gt_answer": truth,
            "filename": None,
        }
        for q, truth in enumerate(["1", "0", "1"])
    ]
    path = tmp_path / "HallusionBench.json"
    path.write_text(json.dumps(records))
    return path


def hallusion_judge(request: dict[str, Any]) -> str:
    text = user_text(request)
    assert "Reference answer: It is" in text
    answer = text.split("Model's answer: ")[1].split("\n")[0]
    return {"agree": "correct", "disagree": "incorrect"}.get(answer, "uncertain")


def test_hallusionbench_judge_uses_gt_answer_details(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = hallusion_file(tmp_path)
    predictions = write_predictions(
        tmp_path / "p.jsonl", {"VS_chart_0_0_0": "agree", "VS_chart_0_0_1": "disagree", "VS_chart_0_0_2": "unsure"}
    )
    with FakeChatServer(hallusion_judge) as server:
        assert (
            main(
                [
                    "eval",
                    "score",
                    "--benchmarks",
                    "hallusionbench",
                    "--data",
                    f"hallusionbench={data}",
                    "--predictions",
                    str(predictions),
                    "--llm-base-url",
                    server.base_url,
                    "--llm-model",
                    "judge-2",
                    "--llm-cache",
                    str(tmp_path / "j.sqlite"),
                ]
            )
            == 0
        )
        assert len(server.requests) == 3  # every answer is judged in this mode
    printed = json.loads((tmp_path / "p.metrics.json").read_text())
    # "agree" is right, "disagree" wrong, "unsure" uncertain: right on a VS question asked without its figure
    # (assign_correctness)
    assert printed["metrics"]["aAcc"] == pytest.approx(200 / 3)
    assert (
        printed["answer_resolution"]["mode"] == "gt_answer_details" and printed["answer_resolution"]["unresolved"] == 1
    )
    # without a judge the rules see none of these words as yes/no: all uncertain (refused, above the unresolved
    # limit, unless allowed), so all right on these figure-0 VS questions
    argv = ["eval", "score", "--benchmarks", "hallusionbench", "--data", f"hallusionbench={data}"]
    with pytest.raises(SystemExit) as refused:
        main([*argv, "--predictions", str(predictions)])
    assert refused.value.code == 2 and "3 of 3 answers (100.00%) are unresolved" in capsys.readouterr().err
    assert main([*argv, "--predictions", str(predictions), "--allow-unresolved"]) == 0
    rescored = json.loads((tmp_path / "p.metrics.json").read_text())
    assert rescored["metrics"]["aAcc"] == 100.0 and rescored["mostly_unresolved"] is True


def test_a_judge_whose_replies_cannot_be_read_is_named_and_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_csv(tmp_path / "finer.csv", finer_rows())
    predictions = write_predictions(tmp_path / "p.jsonl", {f"finer/{i}": "I would say so" for i in range(6)})
    argv = ["eval", "score", "--benchmarks", "finer", "--data", f"finer={data}", "--predictions", str(predictions)]
    with FakeChatServer(lambda request: "Sure! Here is my analysis of the answer") as server:
        judge = ["--llm-base-url", server.base_url, "--llm-model", "judge-3", "--llm-cache", str(tmp_path / "j.sqlite")]
        with pytest.raises(SystemExit) as refused:
            main([*argv, *judge])
        assert server.requests  # the answers were sent (identical prompts once), none read
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]  # below the bar
    assert refused.value.code == 2 and len(errors) == 1, errors
    assert errors[0].startswith("error: finer: 6 of 6 answers (100.00%) are unresolved")
    assert "likely cause: the judge: judge-3 gave a readable verdict on 0 of the 6" in errors[0]
    assert not (tmp_path / "p.metrics.json").exists()
    assert main([*argv, *judge, "--allow-unresolved"]) == 0  # from the judge's cache, labelled
    result = json.loads((tmp_path / "p.metrics.json").read_text())
    assert result["mostly_unresolved"] is True and result["answer_resolution"]["unresolved"] == 6


def test_judge_needs_both_url_and_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = hallusion_file(tmp_path)
    predictions = write_predictions(tmp_path / "p.jsonl", {})
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "eval",
                "score",
                "--benchmarks",
                "hallusionbench",
                "--data",
                f"hallusionbench={data}",
                "--predictions",
                str(predictions),
                "--llm-model",
                "x",
            ]
        )
    assert exit_info.value.code == 2 and "give both" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("names", "outcome"),
    [
        (["oric_bench_r1"], "error"),  # graded as in training: a judge would be silently ignored
        (["oric_bench_r1", "oric_bench"], "note"),
        (["oric_bench", "mmhal"], None),
    ],
)
def test_a_judge_no_benchmark_uses_is_refused_or_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], names: list[str], outcome: str | None
) -> None:
    from eval_hooks.evaluate import require_judges

    judge = AnswerJudge("http://127.0.0.1:9/v1", "judge-1", cache_path=tmp_path / "judge.sqlite")
    if outcome == "error":
        with pytest.raises(UserError, match="no LLM judge is used by oric_bench_r1 .*drop the --llm-\\* options"):
            require_judges(names, judge)
        return
    require_judges(names, judge)
    err = capsys.readouterr().err
    assert ("note: the LLM judge is not used by oric_bench_r1" in err) == (outcome == "note")


def test_a_judge_that_reads_no_answer_of_the_benchmark_is_not_named_as_the_cause(tmp_path: Path) -> None:
    from eval_fixtures import write_oric_bench

    from eval_hooks.evaluate import score_benchmark
    from eval_hooks.prepare import prepare_benchmark

    data, _ = write_oric_bench(tmp_path, questions=1)
    items = prepare_benchmark("oric_bench_r1", data={"oric_bench_r1": data}).items
    judge = AnswerJudge("http://127.0.0.1:9/v1", "judge-1", cache_path=tmp_path / "judge.sqlite")  # never asked
    with pytest.raises(UserError, match=r"4 of 4 answers .* likely cause: answers cut off by the generation budget"):
        score_benchmark("oric_bench_r1", items, {item.id: "<REASONING> The" for item in items}, judge)

"""The eval runner and ``veritune eval run`` on tiny models: batching is exact, runs resume, images that
are missing are skipped and counted, scores match re-scoring, two processes split the work."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from eval_fixtures import write_mixed_bench, write_oric_bench
from helpers import REPO_ROOT, entry_env
from PIL import Image

from eval_hooks.base import EvalItem
from eval_hooks.results import headline_metrics
from eval_hooks.runner import (
    HEADER_KEY,
    TransformersBackend,
    generate_batch,
    plan_batches,
    predictions_provenance,
    read_predictions,
    run_items,
)
from veritune import __version__
from veritune.cli import main


@pytest.fixture(scope="module")
def qwen3(tiny_qwen3vl: Path) -> TransformersBackend:
    return TransformersBackend.from_pretrained(tiny_qwen3vl, "float32")


@pytest.fixture(scope="module")
def oric(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("benchmarks")
    write_oric_bench(root)
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_items(tmp_path: Path, count: int, max_new_tokens: int = 12) -> list[EvalItem]:
    """Questions of different lengths on images of different sizes (so batches need padding)."""
    items = []
    for index in range(count):
        path = tmp_path / f"{index}.png"
        Image.new("RGB", (40 + 12 * index, 48), (index * 20 % 255, 90, 160)).save(path)
        words = " ".join(["very"] * (index % 4))
        items.append(
            EvalItem(
                id=str(index),
                prompt=f"Is there a {words} cat in the image?",
                images=[path],
                max_new_tokens=max_new_tokens,
            )
        )
    return items


def one_at_a_time(backend: TransformersBackend, items: list[EvalItem]) -> dict[str, str]:
    return {item.id: generate_batch(backend.model, backend.processor, [item])[0] for item in items}


def test_plan_batches_groups_by_budget_and_image_count() -> None:
    items = [
        EvalItem(id=str(i), prompt="q", images=[Path("x")] * (i % 2), max_new_tokens=8 if i < 4 else 16)
        for i in range(8)
    ]
    batches = plan_batches(items, batch_size=3)
    assert [[item.id for item in batch] for batch in batches] == [["0", "2"], ["1", "3"], ["4", "6"], ["5", "7"]]


def test_plan_batches_sorts_by_length_and_caps_the_size() -> None:
    items = [EvalItem(id=str(i), prompt="q") for i in range(5)]
    batches = plan_batches(items, batch_size=2, lengths={"0": 9, "1": 3, "2": 7, "3": 1, "4": 5})
    assert [[item.id for item in batch] for batch in batches] == [["3", "1"], ["4", "2"], ["0"]]


def test_batched_equals_one_at_a_time(qwen3: TransformersBackend, tmp_path: Path) -> None:
    items = make_items(tmp_path, 6)
    batched = run_items(qwen3, items, tmp_path / "out" / "predictions.jsonl", batch_size=4)
    assert batched == one_at_a_time(qwen3, items)
    assert len(set(batched.values())) > 1  # the items really differ


def test_qwen25vl_batched_equals_one_at_a_time(tiny_qwen25vl: Path, tmp_path: Path) -> None:
    backend = TransformersBackend.from_pretrained(tiny_qwen25vl, "float32")
    items = make_items(tmp_path, 4)
    assert run_items(backend, items, tmp_path / "p.jsonl", batch_size=4) == one_at_a_time(backend, items)


def test_multi_image_and_image_free_items(qwen3: TransformersBackend, tmp_path: Path) -> None:
    from eval_fixtures import MixedImagesBench

    items = MixedImagesBench().load(write_mixed_bench(tmp_path / "mixed"))
    predictions = run_items(qwen3, items, tmp_path / "p.jsonl", batch_size=8)
    assert sorted(predictions) == sorted(item.id for item in items)
    assert predictions == one_at_a_time(qwen3, items)


def test_interrupted_run_resumes_without_redoing(
    qwen3: TransformersBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = make_items(tmp_path, 5)
    path = tmp_path / "predictions.jsonl"
    header = json.dumps({HEADER_KEY: predictions_provenance(qwen3, items)})
    kept = [header, *(json.dumps({"id": key, "prediction": "kept"}) for key in ("0", "1"))]
    path.write_text("\n".join(kept) + '\n{"id": "2", "predic')  # killed while writing item 2
    generated: list[str] = []
    original = TransformersBackend.generate
    monkeypatch.setattr(
        TransformersBackend,
        "generate",
        lambda self, batch: generated.extend(i.id for i in batch) or original(self, batch),
    )
    predictions = run_items(qwen3, items, path, batch_size=2)
    assert sorted(generated) == ["2", "3", "4"]
    assert predictions["0"] == predictions["1"] == "kept"
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()[1:]][:2] == ["0", "1"]
    assert set(read_predictions(path)) == {"0", "1", "2", "3", "4"}


def test_eval_run_writes_results_and_prints_a_summary(
    tiny_qwen3vl: Path, oric: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert (
        main(
            [
                "eval",
                "run",
                "--model",
                str(tiny_qwen3vl),
                "--benchmarks",
                "oric_bench",
                "--data-root",
                str(oric),
                "--out",
                str(tmp_path),
                "--batch-size",
                "8",
                "--limit",
                "3",
                "--max-new-tokens",
                "32",
            ]
        )
        == 0
    )
    metrics = json.loads((tmp_path / "oric_bench" / "metrics.json").read_text())
    assert metrics["counts"]["items"] == 12 and metrics["counts"]["predicted"] == 12
    assert len(read_predictions(tmp_path / "oric_bench" / "predictions.jsonl")) == 12
    assert metrics["generation"]["max_new_tokens"] == 32 and metrics["data"]["path"].endswith("oric/oric_bench.json")
    assert metrics["data"]["written_in"] == str((tmp_path / "oric_bench").resolve())  # a moved run finds its data
    assert len(metrics["samples"]) == 12 and [row["id"] for row in metrics["samples"]][:4] == [
        f"{metrics['samples'][0]['id'].partition('/')[0]}/p{index}" for index in range(4)
    ]  # a question's four paraphrases together
    assert metrics["selection"]["units"] == 3 and metrics["selection"]["mode"] == "stratified"
    printed = capsys.readouterr().out
    assert "oric_bench" in printed and "macro/f1" in printed and f"{metrics['metrics']['macro/f1']:.4g}" in printed


def test_eval_score_equals_eval_run_metrics(
    tiny_qwen3vl: Path, oric: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    data = oric / "oric" / "oric_bench.json"
    assert (
        main(
            [
                "eval",
                "run",
                "--model",
                str(tiny_qwen3vl),
                "--benchmarks",
                "oric_bench_r1",
                "--data",
                f"oric_bench_r1={data}",
                "--image-root",
                str(oric / "coco" / "val2014"),
                "--out",
                str(tmp_path),
                "--max-new-tokens",
                "16",
                "--allow-unresolved",  # the tiny model's answers have no <SOLUTION> block
            ]
        )
        == 0
    )
    run_metrics = json.loads((tmp_path / "oric_bench_r1" / "metrics.json").read_text())
    capsys.readouterr()
    assert (
        main(
            [
                "eval",
                "score",
                "--benchmarks",
                "oric_bench_r1",
                "--data",
                f"oric_bench_r1={data}",
                "--image-root",
                str(oric / "coco" / "val2014"),
                "--predictions",
                str(tmp_path),
                "--allow-unresolved",
            ]
        )
        == 0
    )
    assert (
        json.loads((tmp_path / "oric_bench_r1" / "predictions.metrics.json").read_text())["metrics"]
        == run_metrics["metrics"]
    )


def test_max_new_tokens_caps_every_answer(
    qwen3: TransformersBackend, tiny_qwen3vl: Path, oric: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mixed = "eval_fixtures.MixedImagesBench"  # no notion of an unresolved answer: never refused for it
    command = [
        "eval", "run", "--model", str(tiny_qwen3vl), "--benchmarks", f"oric_bench_r1,{mixed}",
        "--data-root", str(oric), "--data", f"{mixed}={write_mixed_bench(tmp_path / 'mixed')}",
        "--out", str(tmp_path / "out"), "--limit", "2", "--max-new-tokens", "3",
    ]  # fmt: skip
    out = tmp_path / "out"
    # every R1 answer cut off before its <SOLUTION>: refused, in one line naming the share and the budget; the
    # other benchmark is still run and written, and the refused one's answers are kept
    with pytest.raises(SystemExit) as refused:
        main(command)
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]  # below the bars
    assert refused.value.code == 2 and len(errors) == 1, errors
    assert errors[0].startswith("error: oric_bench_r1: 8 of 8 answers (100.00%) are unresolved")
    assert "--max-new-tokens 3, below oric_bench_r1's default 1024" in errors[0]
    assert "--allow-unresolved" in errors[0] and f"answers kept in {out / 'oric_bench_r1'}" in errors[0]
    assert not (out / "oric_bench_r1" / "metrics.json").exists() and (out / mixed / "metrics.json").is_file()
    refusal = json.loads((out / "results.json").read_text())
    assert list(refusal["results"]) == [mixed] and list(refusal["refused"]) == ["oric_bench_r1"]
    assert main([*command, "--allow-unresolved"]) == 0  # labelled; the answers are reused, not generated again
    answers = read_predictions(out / "oric_bench_r1" / "predictions.jsonl").values()
    assert max(len(qwen3.tokenizer(text, add_special_tokens=False)["input_ids"]) for text in answers) <= 3
    metrics = json.loads((out / "oric_bench_r1" / "metrics.json").read_text())
    assert metrics["generation"]["max_new_tokens"] == 3 and metrics["mostly_unresolved"] is True
    # one results file per run: headline metrics, coverage and the settings; the last line prints its real path
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"results: {out / 'results.json'}"
    assert any(line.startswith("oric_bench_r1 (mostly unresolved)  8/8 items (2 questions)") for line in lines)
    results = json.loads((out / "results.json").read_text())
    entry = results["results"]["oric_bench_r1"]
    assert entry["metrics"] == headline_metrics(metrics) and entry["coverage"] == metrics["coverage"]
    assert (entry["coverage"]["expected"], entry["coverage"]["answered"], entry["partial"]) == (8, 8, False)
    assert results["partial"] == [] and entry["limit"] == 2 and results["refused"] == {}
    assert results["mostly_unresolved"] == ["oric_bench_r1"] and entry["mostly_unresolved"] is True
    config = results["config"]
    assert (config["model"], config["limit"], config["strict_official"], config["judge"], config["backend"]) == (
        str(tiny_qwen3vl),
        2,
        False,
        None,
        "transformers",
    )
    assert (config["limit_seed"], config["limit_mode"]) == (0, "stratified")
    assert results["veritune_version"] == __version__ and (results["git_commit"] or "").startswith(
        subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    )


def test_missing_and_unreadable_images_are_refused_or_scored_partial(
    tiny_qwen3vl: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, images = write_oric_bench(tmp_path / "data", questions=4)
    (images / "COCO_val2014_000000000001.jpg").unlink()  # question 2: missing
    (images / "COCO_val2014_000000000002.jpg").write_bytes(b"not a jpeg")  # question 3: unreadable
    command = [
        "eval",
        "run",
        "--model",
        str(tiny_qwen3vl),
        "--benchmarks",
        "oric_bench",
        "--data-root",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "out"),
        "--max-new-tokens",
        "32",
    ]
    with pytest.raises(SystemExit) as refused:  # by default: refused before the model loads
        main(command)
    error = capsys.readouterr().err
    assert refused.value.code == 2 and error.count("\n") == 1
    assert "oric_bench: 4 of 16 items have missing images (1 image file(s) not found under " in error
    assert "--allow-partial" in error
    assert not (tmp_path / "out").exists()

    assert main([*command, "--allow-partial"]) == 0  # the answered items only, labelled partial
    printed = capsys.readouterr().out
    assert "oric_bench (partial)" in printed and " 8/16 " in printed
    metrics = json.loads((tmp_path / "out" / "oric_bench" / "metrics.json").read_text())
    assert metrics["partial"] is True and metrics["counts"]["items"] == metrics["counts"]["predicted"] == 8
    coverage = metrics["coverage"]
    assert (coverage["expected"], coverage["answered"], coverage["missing_images"], coverage["answered_share"]) == (
        16,
        8,
        8,
        50.0,
    )
    assert [Path(p).name for p in metrics["missing_images"]] == [
        "COCO_val2014_000000000001.jpg",
        "COCO_val2014_000000000002.jpg",
    ]
    predicted = set(read_predictions(tmp_path / "out" / "oric_bench" / "predictions.jsonl"))
    assert not any(key.startswith(("2/", "3/")) for key in predicted)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["partial"] == ["oric_bench"] and results["results"]["oric_bench"]["coverage"] == coverage
    # the eval-only report of the run's folder: the partial mark and the coverage beside the metrics
    assert main(["report", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "report.html").read_text()
    assert "veritune eval report" in page
    assert "<td>oric_bench (partial)</td><td>8/16 items (4 questions)</td><td>8</td>" in page
    assert "scored on the answered items only" in page and "Sample predictions" in page


def test_mixed_image_benchmark_by_dotted_path(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    data = write_mixed_bench(tmp_path / "mixed")
    name = "eval_fixtures.MixedImagesBench"
    assert (
        main(
            [
                "eval",
                "run",
                "--model",
                str(tiny_qwen3vl),
                "--benchmarks",
                name,
                "--data",
                f"{name}={data}",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    metrics = json.loads((tmp_path / "out" / name / "metrics.json").read_text())
    assert metrics["counts"]["predicted"] == 6 and {
        "images_0/accuracy",
        "images_1/accuracy",
        "images_2/accuracy",
    } <= set(metrics["metrics"])


def test_unknown_benchmark_fails_before_any_model_loads(
    oric: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "eval",
                "run",
                "--model",
                str(tmp_path / "no-such-model"),
                "--benchmarks",
                "oric_bench,nope",
                "--data-root",
                str(oric),
                "--out",
                str(tmp_path),
            ]
        )
    assert exit_info.value.code == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err


def test_missing_benchmark_file_names_the_expected_layout(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(
            [
                "eval",
                "run",
                "--model",
                "unused",
                "--benchmarks",
                "pope",
                "--data-root",
                str(tmp_path),
                "--out",
                str(tmp_path),
            ]
        )
    assert f"pope: {tmp_path / 'pope'} not found (expected pope/coco_pope_" in capsys.readouterr().err


def test_two_processes_split_the_work_and_agree_with_one(tiny_qwen3vl: Path, oric: Path, tmp_path: Path) -> None:
    common = [
        "eval",
        "run",
        "--model",
        str(tiny_qwen3vl),
        "--benchmarks",
        "oric_bench",
        "--data-root",
        str(oric),
        "--batch-size",
        "3",
        "--limit",
        "4",
        "--max-new-tokens",
        "32",
    ]
    launch = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "2",
        "--multi_gpu",  # `--cpu` would start one process where MPI is absent
        "--mixed_precision",
        "no",
        "--main_process_port",
        str(free_port()),
        "-m",
        "veritune.cli",
        *common,
        "--out",
        str(tmp_path / "two"),
    ]
    result = subprocess.run(launch, cwd=REPO_ROOT, env=entry_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert main([*common, "--out", str(tmp_path / "one")]) == 0
    two = read_predictions(tmp_path / "two" / "oric_bench" / "predictions.jsonl")
    assert len(two) == 16 and two == read_predictions(tmp_path / "one" / "oric_bench" / "predictions.jsonl")
    assert (
        len((tmp_path / "two" / "oric_bench" / "predictions.jsonl").read_text().splitlines()) == 1 + 16
    )  # header + answers, written once, by the main process


def test_vllm_backend_without_vllm_is_one_line(oric: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    model = tmp_path / "model"  # a model folder: the vLLM check is what the command stops on
    model.mkdir()
    (model / "config.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "eval",
                "run",
                "--model",
                str(model),
                "--benchmarks",
                "oric_bench",
                "--data-root",
                str(oric),
                "--out",
                str(tmp_path),
                "--backend",
                "vllm",
            ]
        )
    assert exit_info.value.code == 2 and "vLLM is not installed" in capsys.readouterr().err


def eval_run(model: Path, oric: Path, out: Path, benchmarks: str, *extra: str) -> list[str]:
    mixed = "eval_fixtures.MixedImagesBench"
    return [
        "eval", "run", "--model", str(model), "--benchmarks", benchmarks, "--data-root", str(oric),
        *(["--data", f"{mixed}={write_mixed_bench(out.parent / 'mixed')}"] if mixed in benchmarks else []),
        "--out", str(out), "--max-new-tokens", "2", "--allow-unresolved", *extra,
    ]  # fmt: skip


def test_eval_run_with_a_dead_judge_fails_before_generating(
    oric: Path, tiny_qwen3vl: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import eval_hooks.runner

    monkeypatch.setattr(eval_hooks.runner, "get_backend", lambda *a, **k: pytest.fail("the model was loaded"))
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    judge = ["--llm-base-url", url, "--llm-model", "judge", "--llm-cache", str(tmp_path / "j.sqlite")]
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as refused:
        main(eval_run(tiny_qwen3vl, oric, out, "oric_bench", "--limit", "1", *judge, "--llm-max-retries", "0"))
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert refused.value.code == 2 and len(errors) == 1, errors
    assert errors[0].startswith(f"error: LLM endpoint {url}/chat/completions") and errors[0].endswith(
        "(checked before generating: nothing was evaluated)"
    )
    assert not out.exists()


def test_a_judge_failing_while_scoring_refuses_only_its_benchmark(
    oric: Path, tiny_qwen3vl: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from fake_openai_server import FakeChatServer

    mixed = "eval_fixtures.MixedImagesBench"  # no LLM judge applies to it
    out = tmp_path / "out"
    with FakeChatServer(lambda request: "none") as server:  # answers cached for this judge and endpoint
        judge = ["--llm-base-url", server.base_url, "--llm-model", "judge", "--llm-cache", str(tmp_path / "j.sqlite")]
        assert main(eval_run(tiny_qwen3vl, oric, tmp_path / "first", "oric_bench", "--limit", "1", *judge)) == 0
        assert server.requests
    capsys.readouterr()
    # the endpoint is gone: with answers cached its check waits for the first miss, while oric_bench is scored
    command = eval_run(tiny_qwen3vl, oric, out, f"oric_bench,{mixed}", *judge, "--llm-max-retries", "0")  # all objects
    with pytest.raises(SystemExit) as refused:
        main(command)
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert refused.value.code == 2 and len(errors) == 1, errors
    assert errors[0].startswith("error: oric_bench: not scored, the LLM judge failed: LLM endpoint ")
    assert f"answers kept in {out / 'oric_bench'}" in errors[0]
    results = json.loads((out / "results.json").read_text())
    assert list(results["results"]) == [mixed] and list(results["refused"]) == ["oric_bench"]
    assert (out / mixed / "metrics.json").is_file() and (out / "oric_bench" / "predictions.jsonl").is_file()


def test_a_second_eval_run_into_the_same_out_keeps_the_other_benchmarks_results(
    oric: Path, tiny_qwen3vl: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    mixed = "eval_fixtures.MixedImagesBench"
    out = tmp_path / "out"
    assert main(eval_run(tiny_qwen3vl, oric, out, "oric_bench", "--limit", "1")) == 0
    assert main(eval_run(tiny_qwen3vl, oric, out, mixed)) == 0
    merged = json.loads((out / "results.json").read_text())
    assert list(merged["results"]) == ["oric_bench", mixed] and merged["config"]["benchmarks"] == mixed
    oric_entry = merged["results"]["oric_bench"]
    assert oric_entry["limit"] == 1 and merged["mostly_unresolved"] == ["oric_bench"]
    # a rerun of one benchmark replaces its entry only
    assert main(eval_run(tiny_qwen3vl, oric, out, "oric_bench", "--limit", "2", "--force")) == 0
    rerun = json.loads((out / "results.json").read_text())
    assert list(rerun["results"]) == [mixed, "oric_bench"] and rerun["results"]["oric_bench"]["limit"] == 2
    assert rerun["results"][mixed] == merged["results"][mixed]
    capsys.readouterr()
    # another model's results would be mixed with these: refused before its model loads, nothing changed
    other = tmp_path / "other-model"
    with pytest.raises(SystemExit) as refused:
        main(eval_run(other, oric, out, "oric_bench", "--limit", "2"))
    errors = capsys.readouterr().err.splitlines()
    assert refused.value.code == 2 and errors == [
        f"error: {out / 'results.json'}: holds results of {mixed} for model {tiny_qwen3vl}; this run evaluates "
        f"{other}: choose another --out (nothing was written)"
    ]
    assert json.loads((out / "results.json").read_text()) == rerun

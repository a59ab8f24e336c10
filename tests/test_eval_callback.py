"""The eval hook in real training runs (``finetune/grpo.py`` with ``--eval_on_save true``): metrics per
checkpoint on disk, in W&B, in the log history; a failing benchmark never stops training; DeepSpeed
ZeRO-3 with two processes."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from eval_fixtures import write_oric_bench
from helpers import REPO_ROOT, entry_env, run_entry
from wandb_offline import logged_tables, offline_history

from eval_hooks.callback import EvalHookCallback
from eval_hooks.runner import read_predictions
from veritune.cli import main

METRIC = "eval/oric_bench_r1/macro/f1"


@pytest.fixture(scope="module")
def oric(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("benchmarks")
    write_oric_bench(root, questions=3)
    return root


@pytest.fixture(scope="module")
def grpo_run(
    tiny_qwen3vl: Path, oric: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Two GRPO steps, a checkpoint after each, the hook on ORIC-Bench and on POPE (whose file is no POPE file:
    it exists, so the run starts, and cannot be loaded)."""
    from conftest import write_oric_fixture

    tmp_path = tmp_path_factory.mktemp("grpo")
    train, train_images = write_oric_fixture(tmp_path / "train")
    (tmp_path / "pope.json").write_text('{"question": "not in POPE\'s layout"}\n')
    result = run_entry(
        "grpo.py",
        "recipes/miniature/tiny_oric_demo.yaml",
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        train,
        "--image_root",
        train_images,
        "--output_dir",
        tmp_path / "run",
        "--max_steps",
        "2",
        "--save_steps",
        "1",
        "--eval_on_save",
        "true",
        "--eval_benchmarks",
        "oric_bench_r1",
        "pope",
        "--eval_data_root",
        oric,
        "--eval_data",
        f"pope={tmp_path / 'pope.json'}",
        "--eval_limit",
        "2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp_path / "run", result


def test_hook_writes_metrics_for_every_checkpoint(grpo_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    run_dir, _ = grpo_run
    for step in (1, 2):
        metrics = json.loads((run_dir / "eval" / f"checkpoint-{step}" / "oric_bench_r1" / "metrics.json").read_text())
        assert metrics["counts"]["items"] == 8 and metrics["counts"]["predicted"] == 8
        assert 0.0 <= metrics["metrics"]["macro/f1"] <= 100.0


def test_hook_logs_metrics_and_tables_to_wandb_at_the_checkpoint_step(
    grpo_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, _ = grpo_run
    rows = offline_history(run_dir / "wandb")
    logged = {row["train/global_step"]: row[METRIC] for row in rows if METRIC in row}
    on_disk = {
        step: json.loads((run_dir / "eval" / f"checkpoint-{step}" / "oric_bench_r1" / "metrics.json").read_text())[
            "metrics"
        ]["macro/f1"]
        for step in (1, 2)
    }
    assert logged == pytest.approx(on_disk)
    tables = logged_tables(rows)
    assert {"eval/oric_bench_r1/samples", "eval/oric_bench_r1/confusion", "eval/oric_bench_r1/per_paraphrase"} <= tables
    # the hook marks each checkpoint as logged, so `eval watch` neither evaluates nor logs it again
    for step in (1, 2):
        marker = json.loads((run_dir / "eval" / f"checkpoint-{step}" / "wandb_logged.json").read_text())
        assert marker["step"] == step and marker["by"] == "eval hook"
    from eval_hooks.watch import is_done

    assert all(is_done(run_dir, step, ["oric_bench_r1"], wandb_wanted=True) for step in (1, 2))


def test_a_failing_benchmark_is_logged_and_training_goes_on(
    grpo_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, result = grpo_run
    assert json.loads((run_dir / "trainer_state.json").read_text())["global_step"] == 2
    assert result.stderr.count("eval hook: pope failed at step") == 2
    assert not (run_dir / "eval" / "checkpoint-1" / "pope").exists()
    # logged as failed evaluations, never as scores of 0 (said once at the start too)
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    assert [row["step"] for row in history if row.get("eval/pope/status/failed") == 1.0] == [1, 2]
    assert not any(
        key.startswith("eval/pope/") and not key.endswith("/status/failed") for row in history for key in row
    )
    assert "eval hook: benchmark pope cannot run as configured" in result.stderr


def test_hook_metrics_reach_the_log_history_and_the_other_loggers(
    grpo_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    run_dir, result = grpo_run
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    assert [row["step"] for row in history if METRIC in row] == [1, 2]
    # the other loggers got them: the console's progress callback writes every log dict to train_log.jsonl ...
    logged = [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged if "eval_oric_bench_r1/macro/f1" in row] == [1, 2]
    # ... and the console shows them once per checkpoint (the hook's own line), not a second time as a dict
    console = result.stdout + result.stderr
    assert console.count("eval at step 1") == 1 and "'eval_oric_bench_r1/macro/f1'" not in console


def test_hook_restores_train_mode_and_padding_side(tiny_qwen3vl: Path, oric: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(tiny_qwen3vl, dtype="float32").train()
    processor = AutoProcessor.from_pretrained(tiny_qwen3vl)
    processor.tokenizer.padding_side = "right"
    hook = EvalHookCallback(["oric_bench"], str(oric), limit=1, batch_size=4, max_new_tokens=4)
    results = hook.evaluate_model(model, processor, tmp_path / "eval" / "checkpoint-7", step=7)
    assert results["oric_bench"]["counts"]["predicted"] == 4
    assert model.training and processor.tokenizer.padding_side == "right"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_hook_under_deepspeed_zero3_with_two_processes(tiny_qwen3vl: Path, oric: Path, tmp_path: Path) -> None:
    from conftest import write_oric_fixture

    train, train_images = write_oric_fixture(tmp_path / "train")
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        "recipes/accelerate/zero3.yaml",
        "--num_processes",
        "2",
        "--mixed_precision",
        "no",
        "--main_process_port",
        str(free_port()),
        "finetune/grpo.py",
        "recipes/miniature/tiny_oric_demo.yaml",
        "--model_name_or_path",
        str(tiny_qwen3vl),
        "--dataset_path",
        str(train),
        "--image_root",
        str(train_images),
        "--output_dir",
        str(tmp_path / "run"),
        "--max_steps",
        "1",
        "--save_steps",
        "1",
        "--report_to",
        "none",
        "--per_device_train_batch_size",
        "2",
        "--eval_on_save",
        "true",
        "--eval_benchmarks",
        "oric_bench_r1",
        "--eval_data_root",
        str(oric),
        "--eval_limit",
        "3",
        "--eval_batch_size",
        "2",
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, env=entry_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    hooked = read_predictions(tmp_path / "run" / "eval" / "checkpoint-1" / "oric_bench_r1" / "predictions.jsonl")
    assert len(hooked) == 12
    # The saved checkpoint, evaluated afresh by one process in the same batches, answers the same.
    assert (
        main(
            [
                "eval",
                "run",
                "--model",
                str(tmp_path / "run" / "checkpoint-1"),
                "--benchmarks",
                "oric_bench_r1",
                "--data-root",
                str(oric),
                "--limit",
                "3",
                "--batch-size",
                "2",
                "--dtype",
                "float32",
                "--out",
                str(tmp_path / "single"),
            ]
        )
        == 0
    )
    assert hooked == read_predictions(tmp_path / "single" / "oric_bench_r1" / "predictions.jsonl")


def test_per_benchmark_limits_in_eval_benchmarks() -> None:
    from core.errors import UserError
    from eval_hooks.callback import EvalHookCallback
    from eval_hooks.paths import parse_benchmark_limits

    assert parse_benchmark_limits(["pope:200", "oric_bench_r1", "my_pkg.bench.Mine:5"]) == (
        ["pope", "oric_bench_r1", "my_pkg.bench.Mine"],
        {"pope": 200, "my_pkg.bench.Mine": 5},
    )
    hook = EvalHookCallback(["pope:3", "oric_bench"], None, limit=10)
    assert (hook.benchmarks, hook.limits.get("pope", hook.limit), hook.limits.get("oric_bench", hook.limit)) == (
        ["pope", "oric_bench"],
        3,
        10,
    )
    with pytest.raises(UserError, match="expected NAME or NAME:N"):
        parse_benchmark_limits(["pope:all"])

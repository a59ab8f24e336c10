"""``veritune eval watch``: checkpoints are evaluated as they appear, once, resumably, into the training
run's W&B run."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from eval_fixtures import make_checkpoint, write_oric_bench
from wandb_offline import logged_tables, offline_history

from eval_hooks.prepare import prepare_benchmark, prepare_benchmarks
from eval_hooks.runner import HEADER_KEY, TransformersBackend, predictions_provenance, read_predictions
from eval_hooks.watch import training_finished, watch
from veritune.cli import main


@pytest.fixture(scope="module")
def oric(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("benchmarks")
    write_oric_bench(root, questions=2)
    return root


def prepared(oric: Path) -> list:
    return prepare_benchmarks(["oric_bench"], data_root=oric, limit=1, max_new_tokens=4)


def metrics_of(run_dir: Path, step: int) -> dict:
    return json.loads((run_dir / "eval" / f"checkpoint-{step}" / "oric_bench" / "metrics.json").read_text())


def test_watch_picks_up_a_checkpoint_that_appears(tiny_qwen3vl: Path, oric: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    evaluated: list[int] = []
    thread = threading.Thread(
        target=lambda: evaluated.extend(watch(run_dir, prepared(oric), interval=0.2, idle_timeout=120))
    )
    thread.start()
    time.sleep(1.0)  # the watcher is already polling an empty run directory
    half_written = run_dir / "checkpoint-3"
    half_written.mkdir()  # weights being written, no trainer_state.json yet: not ready
    make_checkpoint(tiny_qwen3vl, run_dir, 5)
    time.sleep(0.5)
    (run_dir / "trainer_state.json").write_text(json.dumps({"global_step": 5}))  # training finished
    thread.join(timeout=150)
    assert not thread.is_alive() and evaluated == [5]
    assert metrics_of(run_dir, 5)["counts"]["predicted"] == 4
    assert not (run_dir / "eval" / "checkpoint-3").exists()


def test_watch_skips_evaluated_checkpoints_and_resumes_a_half_done_one(
    tiny_qwen3vl: Path, oric: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    for step in (1, 2):
        make_checkpoint(tiny_qwen3vl, run_dir, step)
    done = run_dir / "eval" / "checkpoint-1" / "oric_bench"
    done.mkdir(parents=True)
    (done / "metrics.json").write_text(json.dumps({"metrics": {"macro/f1": 1.0}, "counts": {}}))
    half = run_dir / "eval" / "checkpoint-2" / "oric_bench"
    half.mkdir(parents=True)
    prepared = prepare_benchmark("oric_bench", data_root=oric, limit=1, max_new_tokens=4)
    backend = TransformersBackend.from_pretrained(run_dir / "checkpoint-2")
    header = {HEADER_KEY: predictions_provenance(backend, prepared.items)}
    (half / "predictions.jsonl").write_text(
        json.dumps(header) + "\n" + json.dumps({"id": "1/p0", "prediction": "yes"}) + "\n"
    )
    generated: list[str] = []
    original = TransformersBackend.generate
    monkeypatch.setattr(
        TransformersBackend,
        "generate",
        lambda self, batch: generated.extend(i.id for i in batch) or original(self, batch),
    )
    assert (
        main(
            [
                "eval",
                "watch",
                str(run_dir),
                "--benchmarks",
                "oric_bench",
                "--data-root",
                str(oric),
                "--limit",
                "1",
                "--max-new-tokens",
                "4",
                "--once",
            ]
        )
        == 0
    )
    assert sorted(generated) == ["1/p1", "1/p2", "1/p3"]
    assert read_predictions(half / "predictions.jsonl")["1/p0"] == "yes"
    assert metrics_of(run_dir, 1) == {"metrics": {"macro/f1": 1.0}, "counts": {}}
    assert metrics_of(run_dir, 2)["counts"]["predicted"] == 4
    assert "evaluated checkpoints: 2" in capsys.readouterr().out


def test_watch_logs_into_the_training_wandb_run(
    tiny_qwen3vl: Path, oric: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_dir = tmp_path / "run"
    make_checkpoint(tiny_qwen3vl, run_dir, 4)
    (run_dir / "wandb_run.json").write_text(
        json.dumps({"id": "trainrun01", "project": "veritune-test", "entity": None, "group": None})
    )
    assert watch(run_dir, prepared(oric), once=True) == [4]
    history = offline_history(run_dir / "wandb")
    rows = [row for row in history if "eval/oric_bench/macro/f1" in row]
    assert len(rows) == 1 and rows[0]["train/global_step"] == 4
    assert rows[0]["eval/oric_bench/macro/f1"] == pytest.approx(metrics_of(run_dir, 4)["metrics"]["macro/f1"])
    assert "eval/oric_bench/samples" in logged_tables(history)
    assert next((run_dir / "wandb").glob("offline-run-*-trainrun01")).is_dir()


def test_a_checkpoint_evaluated_but_not_logged_to_wandb_is_logged_on_the_rerun(
    tiny_qwen3vl: Path, oric: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted between its metrics and W&B: the rerun logs the saved metrics without evaluating again."""
    import eval_hooks.watch as watch_module

    monkeypatch.setenv("WANDB_MODE", "offline")
    run_dir = tmp_path / "run"
    make_checkpoint(tiny_qwen3vl, run_dir, 4)
    (run_dir / "wandb_run.json").write_text(
        json.dumps({"id": "trainrun02", "project": "veritune-test", "entity": None, "group": None})
    )

    class FailingRun:
        id = "trainrun02"

        def log(self, payload: dict) -> None:
            raise RuntimeError("W&B is down")

        def finish(self) -> None:
            pass

    open_run = watch_module.open_wandb_run
    monkeypatch.setattr(watch_module, "open_wandb_run", lambda run_dir: FailingRun())
    with pytest.raises(RuntimeError, match="W&B is down"):
        watch(run_dir, prepared(oric), once=True)
    metrics = metrics_of(run_dir, 4)
    assert not (run_dir / "eval" / "checkpoint-4" / "wandb_logged.json").exists()

    monkeypatch.setattr(watch_module, "open_wandb_run", open_run)
    monkeypatch.setattr(watch_module, "evaluate_checkpoint", lambda *a, **k: pytest.fail("evaluated again"))
    assert watch(run_dir, prepared(oric), once=True) == []  # nothing evaluated by this call
    rows = [row for row in offline_history(run_dir / "wandb") if "eval/oric_bench/macro/f1" in row]
    assert len(rows) == 1 and rows[0]["train/global_step"] == 4
    assert rows[0]["eval/oric_bench/macro/f1"] == pytest.approx(metrics["metrics"]["macro/f1"])
    assert json.loads((run_dir / "eval" / "checkpoint-4" / "wandb_logged.json").read_text())["step"] == 4
    assert watch(run_dir, prepared(oric), once=True) == []  # done: not logged twice
    assert len([r for r in offline_history(run_dir / "wandb") if "eval/oric_bench/macro/f1" in r]) == 1


def test_watch_stops_when_no_checkpoint_appears_for_the_timeout(oric: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    assert watch(tmp_path, prepared(oric), interval=0.05, idle_timeout=0.3) == []
    assert time.monotonic() - started < 5


def test_a_final_state_from_an_earlier_shorter_run_is_not_the_end(tiny_qwen3vl: Path, tmp_path: Path) -> None:
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    make_checkpoint(tiny_qwen3vl, tmp_path, 4)
    assert not training_finished(tmp_path)
    (tmp_path / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    assert training_finished(tmp_path)


def test_watch_refuses_a_missing_run_directory(oric: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(
            ["eval", "watch", str(tmp_path / "nope"), "--benchmarks", "oric_bench", "--data-root", str(oric), "--once"]
        )
    assert "run directory not found" in capsys.readouterr().err


def watch_command(run_dir: Path, oric: Path, *extra: str) -> list[str]:
    return ["eval", "watch", str(run_dir), "--benchmarks", "oric_bench", "--data-root", str(oric), *extra]


def test_watch_refuses_results_made_with_other_settings(
    tiny_qwen3vl: Path, oric: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "run"
    make_checkpoint(tiny_qwen3vl, run_dir, 1)
    budget = ["--max-new-tokens", "2", "--once"]
    assert main(watch_command(run_dir, oric, "--limit", "1", *budget)) == 0
    first = metrics_of(run_dir, 1)
    assert main(watch_command(run_dir, oric, "--limit", "1", *budget)) == 0  # the same settings: done
    assert capsys.readouterr().out.splitlines()[-1] == "evaluated checkpoints: none new"
    records = json.loads((oric / "oric" / "oric_bench.json").read_text())
    other_data = tmp_path / "other.json"  # the same questions, other answers
    other_data.write_text(json.dumps([{**r, "solution": "no" if r["solution"] == "yes" else "yes"} for r in records]))
    metrics = run_dir / "eval" / "checkpoint-1" / "oric_bench" / "metrics.json"
    for extra, difference in (
        (["--limit", "2"], "limit 1 (this watch: 2)"),
        ([], "limit 1 (this watch: none (every item))"),
        (["--limit", "1", "--max-new-tokens", "3"], "max_new_tokens 2 (this watch: 3)"),
        (
            ["--limit", "1", "--data", f"oric_bench={other_data}", "--image-root", str(oric / "coco" / "val2014")],
            f"data {oric / 'oric' / 'oric_bench.json'} (this",
        ),
    ):
        with pytest.raises(SystemExit) as refused:
            main(watch_command(run_dir, oric, *budget, *extra))
        errors = capsys.readouterr().err.splitlines()
        assert refused.value.code == 2 and len(errors) == 1, errors
        assert errors[0].startswith(f"error: eval watch: {metrics}: made with {difference}"), errors
        assert f"eval run --model {run_dir / 'checkpoint-1'} --out DIR" in errors[0]
    assert metrics_of(run_dir, 1) == first  # the results are kept as they were


def test_watch_started_before_the_run_folder_waits_for_it(
    tiny_qwen3vl: Path, oric: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run_dir = tmp_path / "later" / "run"
    codes: list[int] = []
    command = watch_command(run_dir, oric, "--limit", "1", "--max-new-tokens", "2", "--interval", "0.2")
    thread = threading.Thread(target=lambda: codes.append(main([*command, "--timeout", "120"])))
    thread.start()
    time.sleep(1.0)  # the watcher waits for a folder training has not made yet
    assert thread.is_alive()
    make_checkpoint(tiny_qwen3vl, run_dir, 2)
    (run_dir / "trainer_state.json").write_text(json.dumps({"global_step": 2}))  # training finished
    thread.join(timeout=150)
    assert not thread.is_alive() and codes == [0]
    printed = capsys.readouterr()
    assert f"waiting for {run_dir} to appear: training has not made it yet" in printed.err
    assert "evaluated checkpoints: 2" in printed.out and metrics_of(run_dir, 2)["counts"]["predicted"] == 4


def test_watch_waits_for_the_run_folder_at_most_wait_seconds(
    oric: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    started = time.monotonic()
    with pytest.raises(SystemExit) as refused:
        main(watch_command(tmp_path / "nope", oric, "--wait", "0.3", "--interval", "0.05"))
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert refused.value.code == 2 and errors == [
        f"error: run directory not found: {tmp_path / 'nope'} (waited 0.3 s, --wait)"
    ]
    assert time.monotonic() - started < 10


def test_a_slurm_watch_job_started_before_training_waits_for_the_run_folder(oric: Path, tmp_path: Path) -> None:
    import subprocess

    from helpers import REPO_ROOT, entry_env

    run_dir = tmp_path / "run"  # the training job, queued behind, has not made it yet
    command = ["bash", "slurm/eval.sbatch", "watch", str(run_dir), "oric_bench", str(oric), "--", "--wait", "0.5"]
    result = subprocess.run(
        [*command, "--interval", "0.1"], cwd=REPO_ROOT, env=entry_env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2 and f"waiting for {run_dir} to appear" in result.stderr, result.stderr[-2000:]
    assert result.stderr.splitlines()[-1] == f"error: run directory not found: {run_dir} (waited 0.5 s, --wait)"

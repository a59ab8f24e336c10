"""The generic Slurm scripts, run on a real one-node Slurm cluster on localhost."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import REPO_ROOT, entry_env, write_finer_fixture
from slurm_cluster import available, job_state, local_cluster

from veritune.cli import main

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with local_cluster(tmp_path_factory.mktemp("slurm")) as env:
        yield env


def sbatch(env: dict[str, str], *args: str | Path, wait: bool = True) -> tuple[str, subprocess.CompletedProcess[str]]:
    command = ["sbatch", "--parsable", *(["--wait"] if wait else []), *map(str, args)]
    result = subprocess.run(
        command, cwd=REPO_ROOT, env={**entry_env(), **env}, capture_output=True, text=True, timeout=900
    )
    return result.stdout.strip().split(";")[0], result


def test_grpo_then_eval_and_dpo_jobs(cluster, tiny_qwen3vl: Path, tmp_path: Path) -> None:
    from conftest import write_oric_fixture

    data, images = write_oric_fixture(tmp_path / "data")
    bench = tmp_path / "bench" / "oric_bench.json"
    bench.parent.mkdir()
    records = json.loads(data.read_text())
    bench.write_text(
        json.dumps(
            [
                {**r, "problem": [r["problem"].split("?")[0] + "?"] * 4, "solution": r["solution"][10:-11]}
                for r in records
            ]
        )
    )
    logs = tmp_path / "logs"
    logs.mkdir()
    env = dict(
        cluster,
        VERITUNE_RUN_ROOT=str(tmp_path / "runs"),
        VERITUNE_PYTHON=str(Path(REPO_ROOT / ".venv/bin/python")),
        VERITUNE_BIN=str(REPO_ROOT / ".venv/bin/veritune"),
    )
    job, result = sbatch(
        env,
        f"--output={logs}/%j.out",
        "--job-name=tiny-grpo",
        "slurm/train.sbatch",
        "grpo",
        "recipes/miniature/tiny_oric_demo.yaml",
        "--",
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        data,
        "--image_root",
        images,
        "--max_steps",
        "2",
        "--save_steps",
        "1",
        "--report_to",
        "none",
    )
    log = (logs / f"{job}.out").read_text() if job else result.stderr
    assert result.returncode == 0, log[-3000:]
    assert job_state(job, cluster) == "COMPLETED"
    run_dir = tmp_path / "runs" / f"tiny-grpo-{job}"
    assert (run_dir / "checkpoint-2" / "optimizer.pt").is_file()
    assert "rewards/accuracy_reward/mean" in json.loads((run_dir / "trainer_state.json").read_text())["log_history"][0]

    # An eval job that waits on a training job (afterok).
    train_job, _ = sbatch(
        env,
        f"--output={logs}/%j.out",
        "--job-name=tiny-grpo2",
        "slurm/train.sbatch",
        "grpo",
        "recipes/miniature/tiny_oric_demo.yaml",
        "--",
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        data,
        "--image_root",
        images,
        "--max_steps",
        "1",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        wait=False,
    )
    run_dir2 = tmp_path / "runs" / f"tiny-grpo2-{train_job}"
    eval_job, result = sbatch(
        env,
        f"--output={logs}/%j.out",
        f"--dependency=afterok:{train_job}",
        "slurm/eval.sbatch",
        "run",
        run_dir2,
        "oric_bench",
        tmp_path,
        tmp_path / "eval",
        "--",
        "--data",
        f"oric_bench={bench}",
        "--image-root",
        images,
        "--max-new-tokens",
        "32",
    )
    assert result.returncode == 0, (logs / f"{eval_job}.out").read_text()[-3000:]
    assert job_state(train_job, cluster) == job_state(eval_job, cluster) == "COMPLETED"
    assert json.loads((tmp_path / "eval" / "oric_bench" / "metrics.json").read_text())["counts"]["items"] == 32


def test_dpo_job(cluster, tiny_qwen3vl: Path, tmp_path: Path) -> None:
    write_finer_fixture(tmp_path / "finer")
    env = dict(cluster, VERITUNE_RUN_ROOT=str(tmp_path / "runs"), VERITUNE_PYTHON=str(REPO_ROOT / ".venv/bin/python"))
    job, result = sbatch(
        env,
        f"--output={tmp_path}/%j.out",
        "--job-name=tiny-dpo",
        "slurm/train.sbatch",
        "dpo",
        "recipes/miniature/tiny_finer_demo.yaml",
        "--",
        "--model_name_or_path",
        tiny_qwen3vl,
        "--dataset_path",
        tmp_path / "finer",
        "--max_steps",
        "2",
        "--save_steps",
        "2",
        "--report_to",
        "none",
    )
    assert result.returncode == 0, (tmp_path / f"{job}.out").read_text()[-3000:]
    assert job_state(job, cluster) == "COMPLETED"
    run_dir = tmp_path / "runs" / f"tiny-dpo-{job}"
    assert (run_dir / "checkpoint-2").is_dir() and (run_dir / "adapter_model.safetensors").is_file()


def test_bad_accelerate_config_and_unwritable_run_dir(cluster, tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("accelerate_config: recipes/accelerate/nope.yaml\n")
    job, result = sbatch(cluster, f"--output={tmp_path}/%j.out", "slurm/train.sbatch", "grpo", recipe)
    assert result.returncode != 0 and job_state(job, cluster) == "FAILED"
    assert "error: accelerate config not found: recipes/accelerate/nope.yaml" in (tmp_path / f"{job}.out").read_text()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    env = dict(cluster, VERITUNE_RUN_DIR=str(blocker / "run"))
    job, result = sbatch(
        env, f"--output={tmp_path}/%j.out", "slurm/train.sbatch", "grpo", "recipes/miniature/tiny_oric_demo.yaml"
    )
    assert result.returncode != 0
    assert f"error: run directory not writable: {blocker}/run" in (tmp_path / f"{job}.out").read_text()


def test_submit_chains_jobs_with_afterok(cluster, tmp_path: Path, capsys) -> None:
    assert (
        main(
            [
                "slurm",
                "submit",
                "--entry",
                "grpo",
                "--recipe",
                "recipes/qwen3vl_oric.yaml",
                "--build",
                "synthetic-world --out x",
                "--eval-benchmarks",
                "pope",
                "--eval-data-root",
                "d",
                "--dry-run",
                "--run-dir",
                "outputs/r",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "--dependency=afterok:BUILD_JOB" in out and "--dependency=afterok:TRAIN_JOB" in out
    assert "VERITUNE_RUN_DIR=outputs/r" in out


def test_submit_from_outside_the_repository_runs_build_and_train(cluster, tiny_qwen3vl: Path, tmp_path: Path) -> None:
    """`veritune slurm submit` from a directory that is not the repository, with nothing telling the jobs where
    veritune is: the jobs find its Python, its `veritune` and finetune/ from what the submission exports."""
    import os
    import sys
    import time

    write_finer_fixture(tmp_path / "finer")
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERITUNE_") and k != "PYTHONPATH"}
    env |= {**cluster, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    overrides = f"--model_name_or_path {tiny_qwen3vl} --dataset_path {tmp_path / 'finer'} --max_steps 1"
    command = [
        *(sys.executable, "-m", "veritune.cli", "slurm", "submit", "--entry", "dpo"),
        *("--recipe", str(REPO_ROOT / "recipes" / "miniature" / "tiny_finer_demo.yaml"), "--run-dir", "runs/r"),
        *("--override", overrides + " --save_steps 1 --report_to none"),
        *("--build", "synthetic-world --out world --train-images 2 --val-images 2"),
    ]
    result = subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"VERITUNE_PYTHON={sys.executable}" in result.stdout and f"VERITUNE_REPO={REPO_ROOT}" in result.stdout
    jobs = dict(part.split() for part in result.stdout.splitlines()[-1].removeprefix("jobs: ").split(", "))
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        states = {stage: job_state(job, cluster) for stage, job in jobs.items()}
        if all(state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") for state in states.values()):
            break
        time.sleep(2)
    logs = {stage: (elsewhere / "logs").glob(f"*-{job}.out") for stage, job in jobs.items()}
    text = "\n".join(path.read_text()[-2000:] for paths in logs.values() for path in paths)
    assert states == {"build": "COMPLETED", "train": "COMPLETED"}, text
    assert (elsewhere / "world" / "train" / "instances.json").is_file()  # relative paths: the submit directory's
    assert (elsewhere / "runs" / "r" / "checkpoint-1").is_dir()

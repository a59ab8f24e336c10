"""``veritune slurm submit`` from any directory: the sbatch scripts are the repository's, by absolute path."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from veritune import slurm_submit
from veritune.cli import main

RECIPE = REPO_ROOT / "recipes" / "tiny_oric_demo.yaml"
CHAIN = [
    "slurm",
    "submit",
    "--entry",
    "grpo",
    "--recipe",
    str(RECIPE),
    "--build",
    "synthetic-world --out data/world",
    "--eval-benchmarks",
    "pope",
    "--eval-data-root",
    "data/benchmarks",
    "--run-dir",
    "outputs/r",
    "--dry-run",
]


def test_dry_run_from_another_directory_names_the_repository_scripts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(CHAIN) == 0
    commands = [shlex.split(line[2:]) for line in capsys.readouterr().out.splitlines() if line.startswith("$ ")]
    scripts = [word for command in commands for word in command if word.endswith(".sbatch")]
    assert scripts == [str(REPO_ROOT / "slurm" / f"{stage}.sbatch") for stage in ("build", "train", "eval")]
    assert all(Path(script).is_absolute() and Path(script).is_file() for script in scripts)
    assert [command[0] for command in commands] == ["sbatch"] * 3


def test_missing_script_is_one_error_line_before_any_submission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "slurm").mkdir()
    for stage in ("build", "train"):
        (tmp_path / "slurm" / f"{stage}.sbatch").write_text("#!/usr/bin/env bash\n")
    monkeypatch.setattr(slurm_submit, "SLURM_DIR", tmp_path / "slurm")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(CHAIN)
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert err.strip() == (
        f"error: {tmp_path / 'slurm' / 'eval.sbatch'} not found: veritune slurm submit runs the repository's "
        "slurm/ scripts; use veritune from a checkout of its repository (pip install -e .)"
    )
    assert "$ sbatch" not in out  # nothing was submitted (nor printed as submitted)


@pytest.mark.parametrize(
    ("extra", "run_dir"),
    [
        ([], "outputs/tiny-oric-grpo"),  # the recipe's output_dir, where the README's `eval run --model` points
        (["--override", "--output_dir outputs/mine"], "outputs/mine"),
        (["--run-dir", "outputs/r"], "outputs/r"),
    ],
)
def test_run_directory_is_where_the_training_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], extra: list[str], run_dir: str
) -> None:
    monkeypatch.chdir(tmp_path)
    chain = [arg for arg in CHAIN if arg not in ("--run-dir", "outputs/r")]
    assert main([*chain, *extra]) == 0
    out = capsys.readouterr().out
    assert f"run directory: {run_dir}\n" in out
    (evaluation,) = [shlex.split(line[2:]) for line in out.splitlines() if "eval.sbatch" in line]
    assert evaluation[evaluation.index("run") + 1] == run_dir and f"VERITUNE_RUN_DIR={run_dir}" in out
